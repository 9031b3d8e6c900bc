// What `prism run --control` and `--metrics` (README, "Many cameras") ask of a running pipeline, and
// how the pipeline answers: the mailbox between the HTTP server's threads and the thread that runs
// the pipeline's bus loop (pipeline_runner.h), which alone changes the pipeline (CameraSupervisor).
//
// - The loop publishes what it knows of each camera (publish(), every turn, about 10 times a
//   second); cameras() gives the latest copy to any thread at once: listing the cameras and
//   scraping the metrics never wait for the pipeline.
// - Adding and removing a camera is asked with submit(): the request waits in the mailbox until the
//   loop takes it (its next turn, within 100 ms), does it and answers; submit() waits for that
//   answer at most `wait`, else answers 503 (the request may still be done later).
// - Once the run ends (close()), every request waiting and every later one is answered 503.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace prism {

struct ControlAnswer;  // the answer to one request, shared by its submitter and the loop

// How long a remade RTSP source stays PAUSED, opening, before it is played anyway if rtspsrc never
// says it opened (CameraSupervisor; counted in Camera::open_waits).
inline constexpr int kRtspOpenWaitMs = 5000;
static_assert(kRtspOpenWaitMs % 1000 == 0, "the metric's help says it in whole seconds (run_control.cpp)");

class CameraControl {
 public:
  // One camera as the loop last saw it.
  struct Camera {
    std::string id;
    std::string uri;          // without its password
    std::string state;        // "starting", "online", "offline", "ended"
    bool added = false;       // added through the control API
    uint64_t reconnects = 0;  // sources made anew
    uint64_t open_waits = 0;  // RTSP sources played when their wait for "open" ran out (Status)
    uint64_t frames = 0;      // buffers that reached its busiest sink (a new source's count on)
    double fps = 0;           // frames per second over the last second or so (0 when offline)
    uint64_t dropped = 0;     // frames its sinks dropped as too late (their QoS messages)
    bool analysis = false;    // it has an analysis element (emdtracker, textureid, bowclassify)
    uint64_t analysed = 0;    // with one: results posted, one per analysed frame
    uint64_t skipped = 0;     // with one: frames not analysed, the analysis being busy (frames-skipped)
    double latency_s = -1;    // a live camera: mean of (clock at its sink - the frame's running time); else -1
  };

  struct Request {
    enum class Kind { kAdd, kRemove } kind = Kind::kAdd;
    std::string id;      // kAdd: "" for the next free camN
    std::string uri;     // kAdd
    int reconnect = -1;  // kAdd: -1 default, 0 false, 1 true
  };

  struct Reply {
    int status = 200;              // HTTP status
    std::string field;             // 4xx: the request's field at fault ("" for none)
    std::string message;           // 4xx/5xx: what went wrong
    std::optional<Camera> camera;  // kAdd: the camera added
  };

  // ---- the HTTP threads ----
  std::vector<Camera> cameras() const;
  bool running() const;  // the pipeline plays and its loop answers
  Reply submit(Request request, std::chrono::milliseconds wait = std::chrono::milliseconds(15'000));

  // ---- the loop's thread ----
  struct Pending {
    Request request;
    std::shared_ptr<ControlAnswer> answer;
  };
  static void answer(const Pending& pending, Reply reply);
  std::vector<Pending> take();
  void publish(std::vector<Camera> cameras, bool running);
  void close();

 private:
  mutable std::mutex mutex_;
  std::vector<Camera> cameras_;
  bool running_ = false;
  bool closed_ = false;
  std::deque<Pending> pending_;
};

}  // namespace prism
