#include "gst/prism/gstprismasyncworker.h"

#include <utility>

namespace prism {

const char *GstPrismAsyncWorker::state_name(State state) {
  switch (state) {
    case State::kIdle: return "idle";
    case State::kRunning: return "running";
    case State::kFailed: return "failed";
    case State::kStopping: return "stopping";
    case State::kStopped: return "stopped";
  }
  return "?";
}

bool GstPrismAsyncWorker::allowed(State from, State to) {
  switch (from) {
    case State::kIdle: return to == State::kRunning || to == State::kStopped;
    case State::kRunning: return to == State::kFailed || to == State::kStopping;
    case State::kFailed: return to == State::kStopping;
    case State::kStopping: return to == State::kStopped;
    case State::kStopped: return false;
  }
  return false;
}

GstPrismAsyncWorker::GstPrismAsyncWorker() { gst_segment_init(&job_.segment, GST_FORMAT_UNDEFINED); }

GstPrismAsyncWorker::~GstPrismAsyncWorker() {
  stop();
  std::lock_guard<std::mutex> lk(m_);
  drop_results();
  gst_clear_buffer(&job_.in);
  gst_clear_buffer(&job_.out);
}

void GstPrismAsyncWorker::set_state(State to) {
  if (!allowed(state_, to))
    g_critical("GstPrismAsyncWorker: no transition from %s to %s", state_name(state_), state_name(to));
  state_ = to;
  cv_.notify_all();
}

void GstPrismAsyncWorker::drop_results() {
  gst_clear_buffer(&done_);
  gst_clear_buffer(&latest_);
}

bool GstPrismAsyncWorker::start(RunFn run) {
  std::lock_guard<std::mutex> lk(m_);
  if (state_ != State::kIdle) return false;
  run_ = std::move(run);
  set_state(State::kRunning);
  thread_ = std::thread(&GstPrismAsyncWorker::main_loop, this);
  return true;
}

void GstPrismAsyncWorker::main_loop() {
  std::unique_lock<std::mutex> lk(m_);
  for (;;) {
    cv_.wait(lk, [&] { return state_ == State::kStopping || job_.in; });
    if (state_ == State::kStopping) break; /* a queued job is dropped below */
    Job job = job_;
    job_.in = job_.out = nullptr;
    lk.unlock();
    const GstFlowReturn ret = run_(job);
    lk.lock();
    busy_ = false;
    if (ret != GST_FLOW_OK) {
      if (error_ == GST_FLOW_OK) error_ = ret;
      if (state_ == State::kRunning) set_state(State::kFailed);
    } else {
      gst_buffer_replace(&done_, job.out ? job.out : job.in);
      done_frame_ = job.frame;
      if (job.out) gst_buffer_replace(&latest_, job.out);
    }
    gst_clear_buffer(&job.in);
    gst_clear_buffer(&job.out);
    cv_.notify_all();
  }
  gst_clear_buffer(&job_.in);
  gst_clear_buffer(&job_.out);
  busy_ = false;
  cv_.notify_all();
}

GstPrismAsyncWorker::Delivery GstPrismAsyncWorker::submit(guint64 frame, const GstSegment &segment, bool copy,
                                                          const MakeFn &make) {
  Delivery d;
  std::unique_lock<std::mutex> lk(m_);
  if (error_ != GST_FLOW_OK) {
    d.ret = error_;
    return d;
  }
  if (state_ == State::kRunning && !busy_) {
    busy_ = true; /* only this thread makes jobs: nothing changes that while unlocked */
    lk.unlock();
    GstBuffer *in = nullptr, *out = nullptr;
    make(&in, &out);
    lk.lock();
    if (state_ != State::kRunning) { /* stopped (or failed) while the job was made: no one takes it */
      gst_clear_buffer(&in);
      gst_clear_buffer(&out);
      busy_ = false;
      skipped_++;
      cv_.notify_all();
    } else {
      job_.in = in;
      job_.out = out;
      job_.frame = frame;
      job_.segment = segment;
      d.taken = true;
      cv_.notify_all();
    }
  } else {
    skipped_++;
  }
  /* Copy mode: with no picture yet (the first frame), wait for this job's. */
  if (copy)
    cv_.wait(lk, [&] {
      return latest_ || state_ == State::kStopping || state_ == State::kStopped || error_ != GST_FLOW_OK ||
             (!busy_ && !job_.in);
    });
  if (error_ != GST_FLOW_OK) {
    d.ret = error_;
    return d;
  }
  d.done = done_;
  d.done_frame = done_frame_;
  done_ = nullptr;
  d.picture = copy && latest_ ? gst_buffer_ref(latest_) : nullptr;
  return d;
}

void GstPrismAsyncWorker::drain(bool drop) {
  std::unique_lock<std::mutex> lk(m_);
  cv_.wait(lk, [&] { return !busy_; });
  if (drop) drop_results();
}

void GstPrismAsyncWorker::stop() {
  std::unique_lock<std::mutex> lk(m_);
  switch (state_) {
    case State::kStopped: return;
    case State::kIdle: set_state(State::kStopped); return;
    case State::kStopping: /* another thread joins: wait for it */
      cv_.wait(lk, [&] { return state_ == State::kStopped; });
      return;
    case State::kRunning:
    case State::kFailed: break;
  }
  set_state(State::kStopping);
  lk.unlock();
  thread_.join();
  lk.lock();
  drop_results();
  set_state(State::kStopped);
}

GstPrismAsyncWorker::State GstPrismAsyncWorker::state() const {
  std::lock_guard<std::mutex> lk(m_);
  return state_;
}

guint64 GstPrismAsyncWorker::skipped() const {
  std::lock_guard<std::mutex> lk(m_);
  return skipped_;
}

}  // namespace prism
