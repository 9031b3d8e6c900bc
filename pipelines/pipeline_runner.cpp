#include "pipeline_runner.h"

#include <gst/gst.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "camera_control.h"
#include "camera_supervisor.h"
#include "launch_line.h"

namespace fs = std::filesystem;

namespace prism {
namespace {

using Clock = std::chrono::steady_clock;

// How long a pipeline that ended by itself (EOS or error) may take to go to NULL.
constexpr double kTeardownLimitS = 10;

volatile std::sig_atomic_t g_interrupts = 0;

void on_signal(int) {
  if (++g_interrupts >= 2) {
    static const char kMessage[] = "\nprism: aborted\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    _exit(kExitInterrupted);
  }
}

// Installs the handlers for the lifetime of the object.
class SignalGuard {
 public:
  explicit SignalGuard(bool enable) : enabled_(enable) {
    g_interrupts = 0;
    if (!enabled_) return;
    struct sigaction action = {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalGuard() {
    if (!enabled_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  bool enabled_;
  struct sigaction old_int_ = {}, old_term_ = {};
};

struct SinkCounter {
  std::string name;
  std::string camera;  // the id of the camera whose element the sink is, or ""
  std::atomic<guint64> buffers{0};
  // With --control/--metrics: each frame's lateness at the sink (the clock's running time less the
  // frame's), summed; the streaming thread's segment.
  bool measure_latency = false;
  GstSegment segment{};
  std::atomic<gint64> latency_sum_ns{0};
  std::atomic<guint64> latency_frames{0};
};

void measure_latency(SinkCounter* counter, GstPad* pad, GstBuffer* buffer) {
  if (counter->segment.format != GST_FORMAT_TIME || !GST_BUFFER_PTS_IS_VALID(buffer)) return;
  const guint64 running = gst_segment_to_running_time(&counter->segment, GST_FORMAT_TIME, GST_BUFFER_PTS(buffer));
  GstElement* sink = GST_PAD_PARENT(pad);
  if (running == GST_CLOCK_TIME_NONE || !sink) return;
  GstClock* clock = gst_element_get_clock(sink);
  if (!clock) return;
  const GstClockTime now = gst_clock_get_time(clock);
  gst_object_unref(clock);
  const GstClockTime base = gst_element_get_base_time(sink);
  if (now == GST_CLOCK_TIME_NONE || now < base) return;
  counter->latency_sum_ns += gint64(now - base) - gint64(running);
  counter->latency_frames += 1;
}

GstPadProbeReturn count_buffers(GstPad* pad, GstPadProbeInfo* info, gpointer data) {
  auto* counter = static_cast<SinkCounter*>(data);
  if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    GstEvent* event = GST_PAD_PROBE_INFO_EVENT(info);
    if (GST_EVENT_TYPE(event) == GST_EVENT_SEGMENT) gst_event_copy_segment(event, &counter->segment);
    return GST_PAD_PROBE_OK;
  }
  if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    counter->buffers += gst_buffer_list_length(GST_PAD_PROBE_INFO_BUFFER_LIST(info));
  } else {
    counter->buffers += 1;
    if (counter->measure_latency) measure_latency(counter, pad, GST_PAD_PROBE_INFO_BUFFER(info));
  }
  return GST_PAD_PROBE_OK;
}

// What the loop keeps of each camera for --control and --metrics (CameraControl::Camera).
struct CameraStats {
  std::vector<std::string> analysis;              // its elements with frames-skipped
  guint64 analysed = 0;                           // results posted by them
  std::map<std::string, guint64> dropped;         // the latest QoS count of each of its elements
  std::chrono::steady_clock::time_point sampled;  // fps and latency over [sampled, now]
  guint64 sampled_frames = 0;
  gint64 sampled_latency_ns = 0;
  guint64 sampled_latency_frames = 0;
  double fps = 0;
  double latency_s = -1;
};

// Runs `work` on a thread of its own, holding a reference to `pipeline`; the future is ready when
// it returns. gst_element_send_event(EOS) and set_state(NULL) wait for the streaming threads (and
// the former holds the pipeline's state lock meanwhile), so with a stalled element they would block
// the main loop forever: the loop only ever waits on the future, with a limit.
std::shared_future<void> run_detached(GstElement* pipeline, void (*work)(GstElement*)) {
  auto done = std::make_shared<std::promise<void>>();
  std::shared_future<void> future = done->get_future().share();
  gst_object_ref(pipeline);
  std::thread([pipeline, work, done] {
    work(pipeline);
    gst_object_unref(pipeline);
    done->set_value();
  }).detach();
  return future;
}

class Run {
 public:
  Run(const PipelineConfig& config, const RunOptions& options)
      : config_(config), options_(options), tty_(isatty(fileno(options.out)) != 0) {}

  ~Run() {
    if (pipeline_) {
      gst_element_set_state(pipeline_, GST_STATE_NULL);
      gst_object_unref(pipeline_);
    }
  }

  int execute() {
    if (!build()) return kExitRuntimeError;
    if (!create_output_folders()) return kExitRuntimeError;
    share_cuda_context();
    attach_counters();
    if (!config_.cameras.empty()) {
      cameras_ =
          std::make_unique<CameraSupervisor>(pipeline_, config_, [this](const std::string& t) { print_line(t); });
      cameras_->attach();
      for (const CameraSpec& camera : config_.cameras) watch_camera(camera);
    }
    SignalGuard signals(options_.handle_signals);
    start_ = last_progress_ = last_camera_progress_ = Clock::now();
    // A camera whose source fails as the pipeline starts is taken out (CameraSupervisor), and the
    // rest of the pipeline started again; any other failure ends the run.
    for (size_t attempt = 0; gst_element_set_state(pipeline_, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE;
         ++attempt) {
      GstBus* bus = gst_element_get_bus(pipeline_);
      bool cameras_failed = false, failed = false;
      // (popping drops the other kinds: element messages, the cameras' states among them, go on)
      const auto kinds = static_cast<GstMessageType>(GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT);
      while (GstMessage* msg = gst_bus_pop_filtered(bus, kinds)) {
        if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ELEMENT) {
          if (options_.on_element_message) options_.on_element_message(msg);
        } else if (cameras_ && attempt < config_.cameras.size() && cameras_->handle_error(msg)) {
          cameras_failed = true;
        } else {
          report(msg, "error");
          failed = true;
        }
        gst_message_unref(msg);
      }
      gst_object_unref(bus);
      if (cameras_failed && !failed) continue;
      if (!failed) print_line("prism: error: the pipeline could not be started");
      return kExitRuntimeError;
    }
    return loop();
  }

 private:
  enum class Stop { None, Interrupt, Timeout };

  bool build() {
    const std::string line = to_launch_line(config_);
    GError* error = nullptr;
    GstElement* element = gst_parse_launch_full(line.c_str(), nullptr, GST_PARSE_FLAG_FATAL_ERRORS, &error);
    if (!element || error) {
      print_line(std::string("prism: error: could not build the pipeline: ") +
                 (error ? error->message : "unknown error"));
      g_clear_error(&error);
      if (element) gst_object_unref(element);
      return false;
    }
    if (GST_IS_PIPELINE(element)) {
      pipeline_ = element;
    } else {  // a single element or a bin: wrap it
      pipeline_ = gst_pipeline_new("prism");
      gst_bin_add(GST_BIN(pipeline_), element);
    }
    return true;
  }

  // need-context messages go to options_.on_need_context from the asking element's thread.
  void share_cuda_context() {
    if (!options_.on_need_context) return;
    GstBus* bus = gst_element_get_bus(pipeline_);
    gst_bus_enable_sync_message_emission(bus);
    g_signal_connect(bus, "sync-message::need-context", G_CALLBACK(+[](GstBus*, GstMessage* msg, gpointer run) {
                       static_cast<Run*>(run)->options_.on_need_context(msg);
                     }),
                     this);
    gst_object_unref(bus);
  }

  bool create_output_folders() {
    for (const OutputFolder& f : missing_output_folders(config_)) {
      std::error_code ec;
      if (!fs::create_directories(f.folder, ec) && ec) {
        print_line("prism: error: element '" + f.element + "' (" + f.where.to_string() +
                   "): cannot create the folder '" + f.folder + "': " + ec.message());
        return false;
      }
    }
    return true;
  }

  void attach_counters() {
    for (const auto& spec : config_.elements) {
      std::string camera;
      for (const CameraSpec& c : config_.cameras)
        if (std::find(c.elements.begin(), c.elements.end(), spec.name) != c.elements.end()) camera = c.id;
      attach_counter(spec.name, camera);
    }
  }

  // Counts the buffers reaching the sink pads of `name` when it is a sink.
  void attach_counter(const std::string& name, const std::string& camera) {
    GstElement* element = gst_bin_get_by_name(GST_BIN(pipeline_), name.c_str());
    if (!element) return;
    if (GST_OBJECT_FLAG_IS_SET(element, GST_ELEMENT_FLAG_SINK)) {
      auto counter = std::make_unique<SinkCounter>();
      counter->name = name;
      counter->camera = camera;
      // (one sink pad: the segment is its streaming thread's)
      counter->measure_latency = options_.control != nullptr && !camera.empty() && element->numsinkpads == 1;
      gst_segment_init(&counter->segment, GST_FORMAT_UNDEFINED);
      GstIterator* pads = gst_element_iterate_sink_pads(element);
      GValue item = G_VALUE_INIT;
      while (gst_iterator_next(pads, &item) == GST_ITERATOR_OK) {
        auto* pad = GST_PAD(g_value_get_object(&item));
        gst_pad_add_probe(pad,
                          static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST |
                                                       GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
                          count_buffers, counter.get(), nullptr);
        g_value_reset(&item);
      }
      g_value_unset(&item);
      gst_iterator_free(pads);
      counters_.push_back(std::move(counter));
    }
    gst_object_unref(element);
  }

  // Notes which elements are the camera's (messages, QoS) and its analysis elements.
  void watch_camera(const CameraSpec& camera) {
    CameraStats& stats = stats_[camera.id];
    stats = CameraStats();
    stats.sampled = Clock::now();
    for (const std::string& name : camera.elements) {
      camera_of_element_[name] = camera.id;
      GstElement* element = gst_bin_get_by_name(GST_BIN(pipeline_), name.c_str());
      if (!element) continue;
      if (g_object_class_find_property(G_OBJECT_GET_CLASS(element), "frames-skipped")) stats.analysis.push_back(name);
      gst_object_unref(element);
    }
  }

  // The camera an element's message comes from ("" for none), and whether from its analysis.
  std::string camera_of(GstMessage* msg, bool* analysis = nullptr) const {
    for (GstObject* obj = GST_MESSAGE_SRC(msg); obj; obj = GST_OBJECT_PARENT(obj)) {
      const auto it = camera_of_element_.find(GST_OBJECT_NAME(obj));
      if (it == camera_of_element_.end()) continue;
      if (analysis) {
        const auto stats = stats_.find(it->second);
        *analysis = stats != stats_.end() && obj == GST_MESSAGE_SRC(msg) &&
                    std::find(stats->second.analysis.begin(), stats->second.analysis.end(), GST_OBJECT_NAME(obj)) !=
                        stats->second.analysis.end();
      }
      return it->second;
    }
    return {};
  }

  // ---- --control and --metrics (CameraControl) ----

  static CameraControl::Reply refusal(int status, const std::string& field, const std::string& message) {
    CameraControl::Reply r;
    r.status = status;
    r.field = field;
    r.message = message;
    return r;
  }

  CameraControl::Reply add_camera(CameraControl::Request request) {
    if (request.id.empty()) {  // the next free camN
      for (size_t n = config_.cameras.size() + added_;; ++n) {
        request.id = "cam" + std::to_string(n);
        if (!cameras_ || !cameras_->find(request.id)) break;
      }
    }
    if (cameras_ && cameras_->find(request.id))
      return refusal(409, "id", "camera '" + request.id + "' exists already (remove it first, or give another id)");
    std::vector<ConfigError> errors;
    const PipelineConfig stamped = stamp_camera(config_, {request.id, request.uri, request.reconnect}, errors);
    if (!errors.empty()) {
      const ConfigError& e = errors.front();
      if (e.where.line == 0 && (e.where.file == "id" || e.where.file == "uri" || e.where.file == "reconnect"))
        return refusal(400, e.where.file, e.message);
      if (!cameras_) return refusal(409, "", config_.path + ": " + e.message);
      std::string text;
      for (const ConfigError& each : errors) text += (text.empty() ? "" : "; ") + each.to_string();
      return refusal(400, "", "the camera's chain could not be made from 'per-camera:': " + text);
    }
    std::vector<std::string> names = stamped.cameras[0].elements;
    names.push_back(request.id + "-camera");  // its bin
    for (const std::string& name : names) {
      GstElement* existing = gst_bin_get_by_name(GST_BIN(pipeline_), name.c_str());
      if (!existing) continue;
      gst_object_unref(existing);
      return refusal(409, "id",
                     "camera '" + request.id + "' would make an element '" + name +
                         "', a name the pipeline has already; give another id");
    }
    if (const std::string why = cameras_->add(stamped); !why.empty()) return refusal(500, "", why);
    added_ += 1;
    for (const std::string& name : stamped.cameras[0].elements) attach_counter(name, request.id);
    watch_camera(stamped.cameras[0]);
    print_line("prism: camera '" + request.id + "' added (" + stamped.cameras[0].shown_uri + ")");
    CameraControl::Reply r;
    r.status = 201;
    for (const CameraControl::Camera& c : camera_snapshot())
      if (c.id == request.id) r.camera = c;
    return r;
  }

  CameraControl::Reply remove_camera(const std::string& id) {
    if (!cameras_ || !cameras_->find(id)) return refusal(404, "id", "no camera '" + id + "'");
    std::vector<std::string> elements = cameras_->find(id)->elements;
    removed_frames_ += frames(id);
    cameras_->remove(id);
    // its elements are in NULL and out of the pipeline: no streaming thread counts any more
    counters_.erase(std::remove_if(counters_.begin(), counters_.end(),
                                   [&](const std::unique_ptr<SinkCounter>& c) { return c->camera == id; }),
                    counters_.end());
    for (const std::string& name : elements) camera_of_element_.erase(name);
    stats_.erase(id);
    last_camera_frames_.erase(id);
    CameraControl::Reply r;
    r.status = 200;
    return r;
  }

  void serve_control() {
    for (const CameraControl::Pending& p : options_.control->take()) {
      CameraControl::Reply reply;
      try {
        reply =
            p.request.kind == CameraControl::Request::Kind::kAdd ? add_camera(p.request) : remove_camera(p.request.id);
      } catch (const std::exception& e) {
        reply = refusal(500, "", e.what());
      }
      // the list shows the change before the answer goes
      options_.control->publish(camera_snapshot(), true);
      CameraControl::answer(p, std::move(reply));
    }
  }

  // Each camera as CameraControl shows it; fps and latency are sampled about once a second.
  std::vector<CameraControl::Camera> camera_snapshot() {
    std::vector<CameraControl::Camera> out;
    if (!cameras_) return out;
    const Clock::time_point now = Clock::now();
    for (const CameraSupervisor::Status& s : cameras_->status()) {
      CameraStats& stats = stats_[s.id];
      CameraControl::Camera c;
      c.id = s.id;
      c.uri = s.shown_uri;
      c.state = s.online ? "online" : s.ended ? "ended" : s.reconnects ? "offline" : "starting";
      c.added = s.added;
      c.reconnects = s.reconnects;
      c.open_waits = s.open_waits;
      c.frames = frames(s.id);
      for (const auto& [element, n] : stats.dropped) c.dropped += n;
      c.analysis = !stats.analysis.empty();
      c.analysed = stats.analysed;
      for (const std::string& name : stats.analysis) {
        GstElement* element = gst_bin_get_by_name(GST_BIN(pipeline_), name.c_str());
        if (!element) continue;
        guint64 skipped = 0;
        g_object_get(element, "frames-skipped", &skipped, nullptr);
        c.skipped += skipped;
        gst_object_unref(element);
      }
      const double interval = seconds(now - stats.sampled);
      if (interval >= 1.0) {
        stats.fps = c.frames >= stats.sampled_frames ? (c.frames - stats.sampled_frames) / interval : 0.0;
        gint64 sum = 0;
        guint64 n = 0;
        for (const auto& counter : counters_) {
          if (counter->camera != s.id) continue;
          sum += counter->latency_sum_ns.load();
          n += counter->latency_frames.load();
        }
        stats.latency_s = -1;
        if (n > stats.sampled_latency_frames && is_live(s.id))
          stats.latency_s = double(sum - stats.sampled_latency_ns) / double(n - stats.sampled_latency_frames) / 1e9;
        stats.sampled = now;
        stats.sampled_frames = c.frames;
        stats.sampled_latency_ns = sum;
        stats.sampled_latency_frames = n;
      }
      c.fps = s.online ? stats.fps : 0.0;
      c.latency_s = s.online ? stats.latency_s : -1;
      out.push_back(std::move(c));
    }
    return out;
  }

  // Whether the camera's stream is live (a LATENCY query from its busiest sink, upstream): only a
  // live frame's running time is its capture time on the pipeline's clock.
  bool is_live(const std::string& camera) {
    const SinkCounter* busiest = nullptr;
    for (const auto& c : counters_)
      if (c->camera == camera && (!busiest || c->buffers > busiest->buffers)) busiest = c.get();
    if (!busiest) return false;
    GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline_), busiest->name.c_str());
    if (!sink) return false;
    gboolean live = FALSE;
    GstIterator* pads = gst_element_iterate_sink_pads(sink);
    GValue item = G_VALUE_INIT;
    if (gst_iterator_next(pads, &item) == GST_ITERATOR_OK) {
      GstQuery* query = gst_query_new_latency();
      if (gst_pad_peer_query(GST_PAD(g_value_get_object(&item)), query))
        gst_query_parse_latency(query, &live, nullptr, nullptr);
      gst_query_unref(query);
    }
    g_value_unset(&item);
    gst_iterator_free(pads);
    gst_object_unref(sink);
    return live;
  }

  int loop() {
    GstBus* bus = gst_element_get_bus(pipeline_);
    const bool control = options_.control != nullptr;
    const auto types =
        static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING | GST_MESSAGE_INFO |
                                    (options_.on_element_message || control ? GST_MESSAGE_ELEMENT : 0) |
                                    (control ? GST_MESSAGE_QOS : 0) | (cameras_ ? GST_MESSAGE_PROGRESS : 0));
    Stop stop = Stop::None;
    Clock::time_point stop_deadline;
    int result = -1;
    bool stalled = false;
    while (result < 0) {
      GstMessage* msg = gst_bus_timed_pop_filtered(bus, 100 * GST_MSECOND, types);
      if (msg) {
        switch (GST_MESSAGE_TYPE(msg)) {
          case GST_MESSAGE_EOS: result = stop == Stop::Interrupt ? kExitInterrupted : kExitOk; break;
          case GST_MESSAGE_ERROR:
            if (cameras_ && cameras_->handle_error(msg)) break;  // that camera is offline, the run goes on
            report(msg, "error");
            result = kExitRuntimeError;
            break;
          case GST_MESSAGE_WARNING: report(msg, "warning"); break;
          // e.g. a Prism element telling that it runs on the CPU because no GPU is usable
          case GST_MESSAGE_INFO: report(msg, "info"); break;
          case GST_MESSAGE_ELEMENT:
            if (control) count_result(msg);
            if (!options_.on_element_message) break;
            if (const std::string error = options_.on_element_message(msg); !error.empty()) {
              print_line("prism: error: " + error);
              result = kExitRuntimeError;
            }
            break;
          case GST_MESSAGE_QOS: count_dropped(msg); break;
          case GST_MESSAGE_PROGRESS: cameras_->handle_progress(msg); break;  // (asked for with cameras only)
          default: break;
        }
        gst_message_unref(msg);
        if (result >= 0) break;
      }
      if (cameras_) cameras_->tick();
      if (control && stop == Stop::None) {
        serve_control();
        options_.control->publish(camera_snapshot(), true);
      }
      const Clock::time_point now = Clock::now();
      if (stop == Stop::None && g_interrupts > 0) {
        stop = Stop::Interrupt;
        print_line("prism: interrupted, finishing the files (Ctrl-C again to abort)");
      } else if (stop == Stop::None && options_.timeout_s > 0 && seconds(now - start_) >= options_.timeout_s) {
        stop = Stop::Timeout;
        if (!options_.quiet) print_line("prism: --timeout reached, stopping");
      }
      if (stop != Stop::None && stop_deadline == Clock::time_point()) {
        if (control) options_.control->close();
        if (cameras_) cameras_->stop();
        run_detached(pipeline_, [](GstElement* p) { gst_element_send_event(p, gst_event_new_eos()); });
        stop_deadline =
            now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.eos_grace_s));
      } else if (stop != Stop::None && now > stop_deadline) {
        print_line("prism: error: the pipeline did not finish within " + format_seconds(options_.eos_grace_s) +
                   " s of EOS; stopping it");
        result = stop == Stop::Interrupt ? kExitInterrupted : kExitRuntimeError;
        stalled = true;
      }
      if (!options_.quiet && seconds(now - last_progress_) >= 1.0) {
        last_progress_ = now;
        print_progress(progress_text());
      }
    }
    gst_object_unref(bus);
    if (!stop_pipeline(stalled ? options_.eos_grace_s : kTeardownLimitS) && result == kExitOk) {
      result = kExitRuntimeError;
    }
    if (!options_.quiet) {
      const char* outcome = result == kExitOk            ? (stop == Stop::Timeout ? "stopped by --timeout" : "done")
                            : result == kExitInterrupted ? "interrupted"
                                                         : "failed";
      print_line(std::string("prism: ") + outcome + ": " + progress_text() + sink_breakdown());
    }
    return result;
  }

  // Sets the pipeline to NULL, waiting at most `limit_s`. When a streaming thread does not let go,
  // says so and leaves the pipeline to its threads (leaked: they still use it), so that the
  // process can exit.
  bool stop_pipeline(double limit_s) {
    const std::shared_future<void> stopped =
        run_detached(pipeline_, [](GstElement* p) { gst_element_set_state(p, GST_STATE_NULL); });
    if (stopped.wait_for(std::chrono::duration<double>(limit_s)) == std::future_status::ready) return true;
    print_line("prism: error: the pipeline did not stop within " + format_seconds(limit_s) +
               " s (an element is stuck); exiting anyway");
    pipeline_ = nullptr;
    return false;
  }

  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  static std::string format_seconds(double s) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1f", s);
    return buffer;
  }

  // Frames = buffers at the busiest sink (branches of a tee would otherwise count twice), of the
  // camera `camera` ("": of the elements of no camera); with cameras, the sum over them (those
  // removed while running included).
  guint64 frames(const std::string& camera) const {
    guint64 most = 0;
    for (const auto& c : counters_)
      if (c->camera == camera) most = std::max<guint64>(most, c->buffers.load());
    return most;
  }
  guint64 frames() const {
    if (!cameras_) return frames(std::string());
    guint64 sum = removed_frames_;
    for (const CameraSupervisor::Status& s : cameras_->status()) sum += frames(s.id);
    return sum;
  }

  // A result of a camera's analysis element (one per analysed frame).
  void count_result(GstMessage* msg) {
    const GstStructure* s = gst_message_get_structure(msg);
    if (!s || gst_structure_has_name(s, "prism-camera")) return;
    bool analysis = false;
    const std::string camera = camera_of(msg, &analysis);
    if (!camera.empty() && analysis) stats_[camera].analysed += 1;
  }

  // A sink's (or decoder's) QoS message: its count of frames dropped so far.
  void count_dropped(GstMessage* msg) {
    const std::string camera = camera_of(msg);
    if (camera.empty()) return;
    GstFormat format = GST_FORMAT_UNDEFINED;
    guint64 processed = 0, dropped = 0;
    gst_message_parse_qos_stats(msg, &format, &processed, &dropped);
    if ((format == GST_FORMAT_BUFFERS || format == GST_FORMAT_DEFAULT) && dropped != guint64(-1))
      stats_[camera].dropped[GST_MESSAGE_SRC_NAME(msg)] = dropped;
  }

  // "N frames, F fps, T s", and with cameras each camera's frames and rate since the last progress
  // line (or its state when it has no source): "; door 120 30.0 fps, yard offline (2 reconnects)".
  std::string progress_text() {
    const Clock::time_point now = Clock::now();
    const double elapsed = seconds(now - start_);
    const guint64 n = frames();
    char buffer[96];
    std::snprintf(buffer, sizeof buffer, "%llu frames, %.1f fps, %.1f s", static_cast<unsigned long long>(n),
                  elapsed > 0 ? n / elapsed : 0.0, elapsed);
    std::string text = buffer;
    if (!cameras_) return text;
    const std::vector<CameraSupervisor::Status> status = cameras_->status();
    const double interval = seconds(now - last_camera_progress_);
    for (size_t i = 0; i < status.size(); ++i) {
      const guint64 f = frames(status[i].id);
      guint64& last = last_camera_frames_[status[i].id];
      const double fps = interval > 0 && f >= last ? (f - last) / interval : 0.0;
      last = f;
      std::snprintf(buffer, sizeof buffer, " %llu %.1f fps", static_cast<unsigned long long>(f), fps);
      text += (i ? ", " : "; ") + status[i].id +
              (status[i].online       ? buffer
               : status[i].ended      ? " ended"
               : status[i].reconnects ? " offline"
                                      : " starting");
      if (status[i].reconnects) text += " (" + std::to_string(status[i].reconnects) + " reconnects)";
    }
    last_camera_progress_ = now;
    return text;
  }

  std::string sink_breakdown() const {
    if (counters_.size() < 2 || cameras_) return {};
    std::string text = " (";
    for (size_t i = 0; i < counters_.size(); ++i) {
      text += (i ? ", " : "") + counters_[i]->name + " " + std::to_string(counters_[i]->buffers.load());
    }
    return text + ")";
  }

  // On a terminal progress rewrites one line; elsewhere each report is a plain line.
  void print_progress(const std::string& text) {
    if (tty_) {
      std::fprintf(options_.out, "\rprism: %s\033[K", text.c_str());
      progress_open_ = true;
    } else {
      std::fprintf(options_.out, "prism: %s\n", text.c_str());
    }
    std::fflush(options_.out);
  }

  void print_line(const std::string& text) {
    if (progress_open_) std::fputc('\n', options_.out);
    progress_open_ = false;
    std::fprintf(options_.out, "%s\n", text.c_str());
    std::fflush(options_.out);
  }

  // The config element a message comes from: its source or the nearest configured ancestor.
  std::string describe_source(GstMessage* msg) const {
    for (GstObject* obj = GST_MESSAGE_SRC(msg); obj; obj = GST_OBJECT_PARENT(obj)) {
      if (const ElementSpec* spec = config_.find_element(GST_OBJECT_NAME(obj))) {
        return "element '" + spec->name + "' (" + spec->where.to_string() + ")";
      }
    }
    return std::string("element '") + (GST_MESSAGE_SRC(msg) ? GST_MESSAGE_SRC_NAME(msg) : "?") + "'";
  }

  // GStreamer's debug string of a message starts "FILE(LINE): FUNCTION (): OBJECT-PATH:\n" (from
  // GST_ELEMENT_ERROR and friends): the source file of the element's build, which tells a user
  // nothing (GST_DEBUG logs have it). The text after it is kept.
  static std::string without_source_location(const std::string& debug) {
    const size_t newline = debug.find('\n');
    if (newline == std::string::npos) return debug;
    const std::string first = debug.substr(0, newline);
    const size_t call = first.find(" (): ");
    if (call == std::string::npos || first.find("): ") >= call || first.back() != ':') return debug;
    return debug.substr(newline + 1);
  }

  void report(GstMessage* msg, const char* severity) {
    GError* error = nullptr;
    gchar* debug = nullptr;
    if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR)
      gst_message_parse_error(msg, &error, &debug);
    else if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_INFO)
      gst_message_parse_info(msg, &error, &debug);
    else
      gst_message_parse_warning(msg, &error, &debug);
    print_line(std::string("prism: ") + severity + ": " + describe_source(msg) + ": " +
               (error ? error->message : "unknown problem"));
    if (debug) {
      const std::string details = without_source_location(debug);
      if (!details.empty()) print_line("  debug: " + details);
    }
    g_clear_error(&error);
    g_free(debug);
  }

  const PipelineConfig& config_;
  const RunOptions& options_;
  const bool tty_;
  GstElement* pipeline_ = nullptr;
  std::vector<std::unique_ptr<SinkCounter>> counters_;
  std::unique_ptr<CameraSupervisor> cameras_;  // with cameras: keeps them running when one drops
  Clock::time_point start_, last_progress_, last_camera_progress_;
  std::map<std::string, guint64> last_camera_frames_;
  std::map<std::string, std::string> camera_of_element_;  // the cameras' elements by name
  std::map<std::string, CameraStats> stats_;              // by camera id
  size_t added_ = 0;                                      // cameras added through the control API
  guint64 removed_frames_ = 0;                            // the frames of cameras removed
  bool progress_open_ = false;
};

}  // namespace

std::vector<OutputFolder> missing_output_folders(const PipelineConfig& config) {
  std::vector<OutputFolder> out;
  for (const auto& spec : config.elements) {
    // Whether it is a sink is the element's own flag: made once from its factory, never started.
    GstElement* element = gst_element_factory_make(spec.factory.c_str(), nullptr);
    if (!element) continue;
    const bool sink = GST_OBJECT_FLAG_IS_SET(element, GST_ELEMENT_FLAG_SINK);
    gst_object_unref(gst_object_ref_sink(element));
    if (!sink) continue;
    for (const auto& p : spec.properties) {
      if (!is_path_property(p.name) || p.value.find("://") != std::string::npos) continue;
      const fs::path folder = fs::path(p.value).parent_path();
      std::error_code ec;
      if (folder.empty() || fs::is_directory(folder, ec)) continue;
      if (std::none_of(out.begin(), out.end(), [&](const OutputFolder& f) { return f.folder == folder.string(); }))
        out.push_back({spec.name, spec.where, folder.string()});
    }
  }
  return out;
}

int run_pipeline(const PipelineConfig& config, const RunOptions& options) {
  const int rc = Run(config, options).execute();
  if (options.control) options.control->close();  // (the run ended before its loop did, if it failed)
  return rc;
}

}  // namespace prism
