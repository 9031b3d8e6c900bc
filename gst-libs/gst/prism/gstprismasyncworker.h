/* GstPrismAsyncWorker: the worker thread of GstPrismCudaFilter's asynchronous mode
 * (gstprismcudafilter.h, "The asynchronous mode"), apart from the element: one job at a time, the
 * frames that arrive while it is busy skipped and counted, a failure latched, the finished job's
 * buffer and (copy mode) the newest picture handed to the next frame. It knows nothing of the
 * element: what a job does is the `run` function given to start(), and the buffers of a job are made
 * by the `make` function given to submit(). tests/plugins/test_async_worker.cpp tests it alone.
 *
 * Its life, one state at a time (state(); every change goes through one checked transition):
 *
 *     kIdle ---start()---> kRunning ---a job fails---> kFailed
 *       |                     |                           |
 *       |                   stop()                      stop()
 *       |                     v                           |
 *       |                 kStopping <---------------------+
 *       |                     |  the running job ends (it is never cut short), the thread is joined
 *     stop()                  v
 *       +--------------->  kStopped   (final: stop() again does nothing, start() is refused)
 *
 *  - kIdle: made, no thread. submit() skips the frame (nothing would run it).
 *  - kRunning: the thread waits for a job or runs one. submit() makes the frame the job when no
 *    job is being made, waits or runs ("busy"), else skips it.
 *  - kFailed: a job returned a GstFlowReturn other than GST_FLOW_OK; submit() returns it from then on
 *    (the first failure is kept) and takes no job. The thread waits for stop().
 *  - kStopping: stop() was called; the job running ends, a job queued is dropped, submit() skips.
 *  - kStopped: the thread is joined, the results not delivered are dropped; submit() skips.
 * Orthogonal to the state, `busy`: a job is being made (by submit, unlocked), queued or running.
 * drain() waits until it is not: what EOS, a flush and new caps do.
 *
 * Threads: submit() is called by one thread at a time (the element's streaming thread); drain(),
 * stop() and the getters by any; `run` runs on the worker's thread, with no lock held. The owner
 * deletes the worker only when no thread can call submit() any more (the element: in its stop(),
 * after the pads are deactivated); the destructor stops it first. */
#pragma once

#include <gst/gst.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace prism {

class GstPrismAsyncWorker {
 public:
  enum class State { kIdle, kRunning, kFailed, kStopping, kStopped };
  /* "idle", "running", ...: for messages and test output. */
  static const char *state_name(State state);
  /* Whether the life above allows going from `from` to `to` (a state to itself is no change and
   * not a transition). */
  static bool allowed(State from, State to);

  /* One frame to analyse. `in` and `out` are the worker's references (out: copy mode only, else
   * null); `segment` is the frame's segment, copied at submit (the streaming thread changes its own
   * while the job runs). */
  struct Job {
    GstBuffer *in = nullptr;
    GstBuffer *out = nullptr;
    guint64 frame = 0;
    GstSegment segment;
  };
  /* Runs one job on the worker thread; GST_FLOW_OK, or the failure (posted by it) that submit()
   * returns from then on. */
  using RunFn = std::function<GstFlowReturn(const Job &job)>;
  /* Makes the buffers of a frame the worker takes, on the submitting thread with no lock held: *in
   * a new reference, *out a new reference or null. */
  using MakeFn = std::function<void(GstBuffer **in, GstBuffer **out)>;

  /* What submit() hands the frame being pushed. The caller owns `done` and `picture`. */
  struct Delivery {
    GstFlowReturn ret = GST_FLOW_OK; /* the latched failure, else GST_FLOW_OK */
    bool taken = false;              /* the frame became the job (else it was skipped or refused) */
    GstBuffer *done = nullptr;       /* the buffer of a job finished since the last delivery, if any */
    guint64 done_frame = 0;          /* its frame number */
    GstBuffer *picture = nullptr;    /* copy mode: the newest finished output (null: none, stopping) */
  };

  GstPrismAsyncWorker();
  ~GstPrismAsyncWorker();
  GstPrismAsyncWorker(const GstPrismAsyncWorker &) = delete;
  GstPrismAsyncWorker &operator=(const GstPrismAsyncWorker &) = delete;

  /* kIdle -> kRunning: starts the thread, which runs `run` for each job. FALSE (and nothing done)
   * in any other state: a worker runs once. */
  bool start(RunFn run);

  /* The streaming thread's part, per frame `frame` of segment `segment`: while kRunning and not
   * busy, the frame becomes the job (`make` makes its buffers); otherwise it is skipped and counted
   * (skipped()), except in kFailed, where the failure is returned and nothing counted. Then hands
   * over the job finished since the last call, if any. `copy`: copy mode, which also hands a
   * reference to the newest picture, and waits for one while there is none yet (the first frame
   * after start or a drain(TRUE)) unless stopping, failed or with no job to wait for. */
  Delivery submit(guint64 frame, const GstSegment &segment, bool copy, const MakeFn &make);

  /* Waits until no job is being made, queued or running; `drop`: the finished job's buffer and the
   * newest picture, not delivered yet, are dropped (a flush, new caps, EOS). */
  void drain(bool drop);

  /* To kStopped from any state: kIdle at once; otherwise the running job ends, a queued one is
   * dropped, the thread is joined and the results not delivered are dropped. A second call (from
   * any thread) returns once the first has joined. */
  void stop();

  State state() const;
  /* Frames skipped since the worker was made. */
  guint64 skipped() const;

 private:
  void main_loop();
  void set_state(State to); /* m_ held; checks allowed() */
  void drop_results();      /* m_ held */

  mutable std::mutex m_;
  std::condition_variable cv_; /* a job, stop, not busy, a picture, a state change */
  std::thread thread_;
  RunFn run_;
  State state_ = State::kIdle;
  bool busy_ = false; /* a job is being made, queued or running */
  Job job_;           /* queued when job_.in */
  GstBuffer *done_ = nullptr;
  guint64 done_frame_ = 0;
  GstBuffer *latest_ = nullptr; /* copy mode: the newest finished output */
  GstFlowReturn error_ = GST_FLOW_OK;
  guint64 skipped_ = 0;
};

}  // namespace prism
