// Keeping a multi-camera pipeline running when one camera drops (README, "Many cameras"): the
// source of each camera of the config (CameraSpec: a uridecodebin named ID-source) is watched, and
// a camera whose source fails (an ERROR from it or its children: an RTSP server gone, a refused
// connection), ends (EOS on a live camera) or stops making frames is marked offline, its source
// taken out of the pipeline, and a new one made after a backoff (0.5 s, doubling to 5 s) until
// the camera returns. The other cameras' branches never stop: their elements stay in PLAYING and
// nothing else of the pipeline changes state.
//
// Why the source is made anew and not told to reconnect: rtspsrc 1.22 has no reconnect (its
// `retry` is about RTP ports), and a source that posted an ERROR or EOS has ended its stream; so
// the application restarts the branch's source, as GStreamer's own examples do. The camera's
// first element after `source` keeps its sink pad, caps and state: the new source links to the
// same pad and sends a new stream-start, caps and segment (the analysis elements start again on
// new caps, as they do on any). EOS from a live camera's source is dropped before it reaches that
// pad, since a pad that saw EOS takes no more data.
//
// A camera with reconnect=false (file URIs by default) is not made anew: its EOS passes and ends
// its branch; when its source fails, EOS is sent into its branch instead, so the run ends when
// every branch has ended (or on --timeout / Ctrl-C), never because of one camera.
//
// Cameras are added and removed while the pipeline runs (prism run --control): add() builds a
// camera's branch from its stamped config (stamp_camera, pipeline_config.h) in a bin of its own,
// adds it and brings it to the pipeline's state; remove() takes a camera's source, then the rest of
// its branch, to NULL and out of the pipeline. Neither changes the state of anything else.
//
// Each change is posted on the bus as an element message "prism-camera" from the camera's source
// (gstprismmessage.h): `camera`, `camera-uri`, `state` ("online", "offline", "ended", "removed"), `reason`
// ("" when online) and `reconnects` (new sources made so far); `prism run --results` writes it as
// a line of factory "camera" (docs/RESULTS.md), and progress shows each camera's state.
//
// Threading: every method is called from the thread that runs the bus loop (run_pipeline's);
// streaming threads only count buffers, note EOS and link a new source's pad, under the camera's
// own lock.
#pragma once

#include <gst/gst.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline_config.h"

namespace prism {

class CameraSupervisor {
 public:
  // How a camera's state is shown: progress and the end-of-run summary.
  struct Status {
    std::string id;
    bool online = false;  // frames have come from its current source
    bool ended = false;   // no source any more (reconnect=false), or its stream ended
    guint64 reconnects = 0;
    std::string shown_uri;  // its URI without the password
    bool added = false;     // added while running (add())
    // RTSP sources played after kRtspOpenWaitMs because rtspsrc posted no "open" progress as complete
    // (a source that never says so: its frames come that late after every reconnect).
    guint64 open_waits = 0;
  };

  // `say` prints a line (the runner's stderr reporting).
  CameraSupervisor(GstElement* pipeline, const PipelineConfig& config, std::function<void(const std::string&)> say);
  ~CameraSupervisor();
  CameraSupervisor(const CameraSupervisor&) = delete;
  CameraSupervisor& operator=(const CameraSupervisor&) = delete;

  // Before the pipeline plays: watches each camera's source (its pads as they come).
  void attach();
  // An ERROR message: true when it comes from a camera's source (the current one, which then goes
  // offline, or an earlier one taken out already), so it is no error of the run.
  bool handle_error(GstMessage* msg);
  // A PROGRESS message: a camera's remade RTSP source that says it opened plays at the next tick().
  void handle_progress(GstMessage* msg);
  // Every turn of the bus loop: cameras that began to send frames go online, those that ended or
  // went silent go offline, and those due are made anew.
  void tick();
  // The run is ending (EOS is sent to the pipeline next): nothing is made anew any more, EOS from
  // sources passes, and the branch of each camera without a running source gets EOS itself.
  void stop();
  // In the order they were added (the config's first).
  std::vector<Status> status() const;
  const CameraSpec* find(const std::string& id) const;
  // Adds the one camera of `stamped` (stamp_camera); "" or why it could not. The caller has checked
  // that its id and element names are free.
  std::string add(const PipelineConfig& stamped);
  // Takes the camera out of the pipeline; false when there is no such camera.
  bool remove(const std::string& id);

 private:
  struct Camera;
  using Clock = std::chrono::steady_clock;

  std::unique_ptr<Camera> make_camera(const CameraSpec& spec, const std::vector<LinkChain>& chains, GstBin* home);
  static void on_pad_added(GstElement* source, GstPad* pad, gpointer camera);
  static GstPadProbeReturn on_source_data(GstPad* pad, GstPadProbeInfo* info, gpointer camera);
  Camera* camera_of(GstMessage* msg, bool* current);
  void open_then_play(Camera& camera, GstElement* source);
  void watch(Camera& camera, GstElement* source);
  void go_offline(Camera& camera, const std::string& reason);
  void restart(Camera& camera);
  void post_state(Camera& camera, GstElement* from, const char* state, const std::string& reason);
  void end_branch(Camera& camera);

  GstElement* pipeline_;
  const PipelineConfig& config_;
  std::function<void(const std::string&)> say_;
  std::vector<std::unique_ptr<Camera>> cameras_;
  std::atomic<bool> stopping_{false};
};

}  // namespace prism
