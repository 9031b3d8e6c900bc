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
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "camera_supervisor.h"
#include "gst/prism/gstprismcuda.h"
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
  int camera = -1;  // index in config.cameras of the camera whose element the sink is, or -1
  std::atomic<guint64> buffers{0};
};

GstPadProbeReturn count_buffers(GstPad*, GstPadProbeInfo* info, gpointer data) {
  auto* counter = static_cast<SinkCounter*>(data);
  if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    counter->buffers += gst_buffer_list_length(GST_PAD_PROBE_INFO_BUFFER_LIST(info));
  } else {
    counter->buffers += 1;
  }
  return GST_PAD_PROBE_OK;
}

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
    if (cuda_context_) gst_context_unref(cuda_context_);
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

  // Every element that asks for a CUDA context (decoders, uploads, ours) gets one, made when the
  // first asks: a pipeline of many cameras waits on the GPU from many threads, which must sleep
  // rather than spin (gst_prism_cuda_shared_context_new says why). Answered from the asking thread.
  void share_cuda_context() {
    GstBus* bus = gst_element_get_bus(pipeline_);
    gst_bus_enable_sync_message_emission(bus);
    g_signal_connect(bus, "sync-message::need-context", G_CALLBACK(+[](GstBus*, GstMessage* msg, gpointer run) {
                       static_cast<Run*>(run)->answer_need_context(msg);
                     }),
                     this);
    gst_object_unref(bus);
  }
  void answer_need_context(GstMessage* msg) {
    const gchar* type = nullptr;
    if (!gst_message_parse_context_type(msg, &type) || g_strcmp0(type, "gst.cuda.context") != 0) return;
    std::call_once(cuda_context_once_, [this] { cuda_context_ = gst_prism_cuda_shared_context_new(0); });
    gst_prism_cuda_answer_need_context(msg, cuda_context_);
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
      GstElement* element = gst_bin_get_by_name(GST_BIN(pipeline_), spec.name.c_str());
      if (!element) continue;
      if (GST_OBJECT_FLAG_IS_SET(element, GST_ELEMENT_FLAG_SINK)) {
        auto counter = std::make_unique<SinkCounter>();
        counter->name = spec.name;
        for (size_t i = 0; i < config_.cameras.size(); ++i) {
          const auto& names = config_.cameras[i].elements;
          if (std::find(names.begin(), names.end(), spec.name) != names.end()) counter->camera = int(i);
        }
        GstIterator* pads = gst_element_iterate_sink_pads(element);
        GValue item = G_VALUE_INIT;
        while (gst_iterator_next(pads, &item) == GST_ITERATOR_OK) {
          auto* pad = GST_PAD(g_value_get_object(&item));
          gst_pad_add_probe(pad,
                            static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
                            count_buffers, counter.get(), nullptr);
          g_value_reset(&item);
        }
        g_value_unset(&item);
        gst_iterator_free(pads);
        counters_.push_back(std::move(counter));
      }
      gst_object_unref(element);
    }
  }

  int loop() {
    GstBus* bus = gst_element_get_bus(pipeline_);
    const auto types =
        static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING | GST_MESSAGE_INFO |
                                    (options_.on_element_message ? GST_MESSAGE_ELEMENT : 0));
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
            if (const std::string error = options_.on_element_message(msg); !error.empty()) {
              print_line("prism: error: " + error);
              result = kExitRuntimeError;
            }
            break;
          default: break;
        }
        gst_message_unref(msg);
        if (result >= 0) break;
      }
      if (cameras_) cameras_->tick();
      const Clock::time_point now = Clock::now();
      if (stop == Stop::None && g_interrupts > 0) {
        stop = Stop::Interrupt;
        print_line("prism: interrupted, finishing the files (Ctrl-C again to abort)");
      } else if (stop == Stop::None && options_.timeout_s > 0 && seconds(now - start_) >= options_.timeout_s) {
        stop = Stop::Timeout;
        if (!options_.quiet) print_line("prism: --timeout reached, stopping");
      }
      if (stop != Stop::None && stop_deadline == Clock::time_point()) {
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
  // camera `camera` (-1: of the elements of no camera); with cameras, the sum over them.
  guint64 frames(int camera) const {
    guint64 most = 0;
    for (const auto& c : counters_)
      if (c->camera == camera) most = std::max<guint64>(most, c->buffers.load());
    return most;
  }
  guint64 frames() const {
    if (config_.cameras.empty()) return frames(-1);
    guint64 sum = 0;
    for (size_t i = 0; i < config_.cameras.size(); ++i) sum += frames(int(i));
    return sum;
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
    last_camera_frames_.resize(status.size());
    for (size_t i = 0; i < status.size(); ++i) {
      const guint64 f = frames(int(i));
      const double fps = interval > 0 ? (f - last_camera_frames_[i]) / interval : 0.0;
      last_camera_frames_[i] = f;
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
  std::once_flag cuda_context_once_;
  GstContext* cuda_context_ = nullptr;  // the one CUDA context of the run (none without a GPU)
  Clock::time_point start_, last_progress_, last_camera_progress_;
  std::vector<guint64> last_camera_frames_;
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

int run_pipeline(const PipelineConfig& config, const RunOptions& options) { return Run(config, options).execute(); }

}  // namespace prism
