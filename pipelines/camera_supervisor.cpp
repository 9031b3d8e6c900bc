#include "camera_supervisor.h"

#include "camera_control.h"
#include "launch_line.h"

#include <algorithm>
#include <cstring>
#include <cstdio>

namespace prism {
namespace {

constexpr double kFirstBackoffS = 0.5;
constexpr double kMaxBackoffS = 5;
// A live camera that sends no frame for this long is taken as gone (a network cut leaves rtspsrc
// waiting); a new source gets as long for its first frame (RTSP's jitterbuffer is 2 s by default).
constexpr double kSilenceS = 10;

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool is_video(GstPad* pad) {
  GstCaps* caps = gst_pad_get_current_caps(pad);
  if (!caps) caps = gst_pad_query_caps(pad, nullptr);
  bool video = false;
  if (caps && !gst_caps_is_empty(caps))
    video = g_str_has_prefix(gst_structure_get_name(gst_caps_get_structure(caps, 0)), "video/");
  if (caps) gst_caps_unref(caps);
  return video;
}

}  // namespace

struct CameraSupervisor::Camera {
  enum class State { Starting, Online, Offline, Ended };

  CameraSupervisor* owner = nullptr;
  CameraSpec spec;
  GstBin* home = nullptr;    // the bin its elements are in (a reference): the pipeline, or its own bin
  bool own_bin = false;      // added at runtime: its elements are in a bin of their own (home)
  std::string next_element;  // the element the source links to, and the caps between (may be "")
  std::string caps;

  std::mutex lock;               // the fields below it, shared with streaming threads
  GstElement* source = nullptr;  // the current source (a reference), null while offline
  GstPad* target = nullptr;      // the sink pad the source links to (a reference), once known

  std::atomic<guint64> buffers{0};  // from the current source
  std::atomic<bool> ended{false};   // EOS from the current source (dropped)

  State state = State::Starting;  // the bus loop's thread only, as are the fields below
  Clock::time_point since;        // of the state; of the last new buffer when online
  guint64 buffers_seen = 0;
  Clock::time_point retry_at;
  double backoff_s = kFirstBackoffS;
  guint64 reconnects = 0;
  bool eos_due = false;   // the branch is to get EOS once its first element is PAUSED
  bool play_due = false;  // a remade source waits in PAUSED until play_at (see restart)
  Clock::time_point play_at;
  bool waits_for_open = false;  // an RTSP source that has not said it opened yet (open_then_play)
  guint64 open_waits = 0;       // RTSP sources played because their wait for "open" ran out
};

CameraSupervisor::CameraSupervisor(GstElement* pipeline, const PipelineConfig& config,
                                   std::function<void(const std::string&)> say)
    : pipeline_(GST_ELEMENT(gst_object_ref(pipeline))), config_(config), say_(std::move(say)) {
  for (const CameraSpec& spec : config.cameras) cameras_.push_back(make_camera(spec, config.chains, GST_BIN(pipeline)));
}

std::unique_ptr<CameraSupervisor::Camera> CameraSupervisor::make_camera(const CameraSpec& spec,
                                                                        const std::vector<LinkChain>& chains,
                                                                        GstBin* home) {
  auto camera = std::make_unique<Camera>();
  camera->owner = this;
  camera->spec = spec;
  camera->home = GST_BIN(gst_object_ref(home));
  for (const LinkChain& chain : chains) {
    if (chain.empty() || chain[0].element != spec.source) continue;
    const size_t next = chain.size() > 2 && chain[1].kind == LinkItem::Kind::Caps ? 2 : 1;
    if (next < chain.size()) camera->next_element = chain[next].element;
    if (next == 2) camera->caps = chain[1].caps;
  }
  return camera;
}

CameraSupervisor::~CameraSupervisor() {
  for (auto& camera : cameras_) {
    std::lock_guard<std::mutex> guard(camera->lock);
    if (camera->source) g_signal_handlers_disconnect_by_data(camera->source, camera.get());
    gst_clear_object(&camera->source);
    gst_clear_object(&camera->target);
    gst_clear_object(&camera->home);
  }
  gst_object_unref(pipeline_);
}

void CameraSupervisor::attach() {
  for (auto& camera : cameras_) {
    GstElement* source = gst_bin_get_by_name(GST_BIN(pipeline_), camera->spec.source.c_str());
    if (!source) continue;
    watch(*camera, source);
    gst_object_unref(source);
    camera->since = Clock::now();
  }
}

// Connected after gst_parse_launch's own handler (which links the first source's pad): a pad
// linked already gives the target; a new source's video pad is linked to it here.
void CameraSupervisor::on_pad_added(GstElement* source, GstPad* pad, gpointer data) {
  auto* camera = static_cast<Camera*>(data);
  if (GST_PAD_DIRECTION(pad) != GST_PAD_SRC) return;
  {
    std::lock_guard<std::mutex> guard(camera->lock);
    if (source != camera->source) return;  // an earlier source, taken out
    if (!gst_pad_is_linked(pad) && is_video(pad)) {
      if (camera->target && !gst_pad_is_linked(camera->target)) {
        gst_pad_link(pad, camera->target);
      } else if (!camera->target && !camera->next_element.empty()) {
        // never linked before (the first source failed): link as gst_parse_launch would have
        GstElement* next = gst_bin_get_by_name(GST_BIN(camera->owner->pipeline_), camera->next_element.c_str());
        GstCaps* filter = camera->caps.empty() ? nullptr : gst_caps_from_string(camera->caps.c_str());
        if (next) gst_element_link_pads_filtered(source, GST_PAD_NAME(pad), next, nullptr, filter);
        if (filter) gst_caps_unref(filter);
        if (next) gst_object_unref(next);
      }
    }
    if (!gst_pad_is_linked(pad)) return;
    if (!camera->target) camera->target = gst_pad_get_peer(pad);
  }
  gst_pad_add_probe(pad,
                    static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST |
                                                 GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
                    on_source_data, camera, nullptr);
}

GstPadProbeReturn CameraSupervisor::on_source_data(GstPad*, GstPadProbeInfo* info, gpointer data) {
  auto* camera = static_cast<Camera*>(data);
  if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    if (GST_EVENT_TYPE(GST_PAD_PROBE_INFO_EVENT(info)) != GST_EVENT_EOS) return GST_PAD_PROBE_OK;
    if (!camera->spec.reconnect || camera->owner->stopping_) return GST_PAD_PROBE_OK;
    camera->ended = true;  // the bus loop takes the camera offline; its branch goes on
    return GST_PAD_PROBE_DROP;
  }
  camera->buffers += 1;
  return GST_PAD_PROBE_OK;
}

void CameraSupervisor::watch(Camera& camera, GstElement* source) {
  std::lock_guard<std::mutex> guard(camera.lock);
  gst_object_replace(reinterpret_cast<GstObject**>(&camera.source), GST_OBJECT(source));
  camera.buffers = 0;
  camera.ended = false;
  g_signal_connect(source, "pad-added", G_CALLBACK(on_pad_added), &camera);
}

// The camera whose source (current or earlier) `msg` comes from: an ancestor named as a camera's
// source. `current`: whether it is the source in the pipeline now.
CameraSupervisor::Camera* CameraSupervisor::camera_of(GstMessage* msg, bool* current) {
  for (GstObject* obj = GST_MESSAGE_SRC(msg); obj; obj = GST_OBJECT_PARENT(obj)) {
    for (auto& camera : cameras_) {
      if (camera->spec.source != GST_OBJECT_NAME(obj)) continue;
      std::lock_guard<std::mutex> guard(camera->lock);
      *current = GST_OBJECT(camera->source) == obj;
      return camera.get();
    }
  }
  return nullptr;
}

bool CameraSupervisor::handle_error(GstMessage* msg) {
  bool current = false;
  Camera* camera = camera_of(msg, &current);
  if (!camera) {
    // An element out of the pipeline: only a camera's source taken out is (uridecodebin drops its
    // own children as it stops, so their errors come with no parent at all).
    GstObject* top = GST_MESSAGE_SRC(msg);
    while (top && GST_OBJECT_PARENT(top)) top = GST_OBJECT_PARENT(top);
    return top && top != GST_OBJECT(pipeline_);
  }
  if (current && camera->state != Camera::State::Offline && camera->state != Camera::State::Ended) {
    GError* error = nullptr;
    gst_message_parse_error(msg, &error, nullptr);
    go_offline(*camera, error ? error->message : "error");
    g_clear_error(&error);
  }
  return true;
}

void CameraSupervisor::tick() {
  const Clock::time_point now = Clock::now();
  for (auto& c : cameras_) {
    Camera& camera = *c;
    const guint64 buffers = camera.buffers;
    switch (camera.state) {
      case Camera::State::Starting:
      case Camera::State::Online:
        if (camera.play_due && now >= camera.play_at) {
          camera.play_due = false;
          if (camera.waits_for_open) camera.open_waits += 1;  // no "open" progress came
          camera.waits_for_open = false;
          std::lock_guard<std::mutex> guard(camera.lock);
          if (camera.source) gst_element_sync_state_with_parent(camera.source);
        }
        if (camera.ended.exchange(false)) {
          go_offline(camera, "end of stream");
        } else if (buffers != camera.buffers_seen) {
          camera.buffers_seen = buffers;
          camera.since = now;
          if (camera.state == Camera::State::Starting) {
            camera.state = Camera::State::Online;
            camera.backoff_s = kFirstBackoffS;
            GstElement* source = nullptr;
            {
              std::lock_guard<std::mutex> guard(camera.lock);
              if (camera.source) source = GST_ELEMENT(gst_object_ref(camera.source));
            }
            if (camera.reconnects > 0) say_("prism: camera '" + camera.spec.id + "' is back online");
            if (source) post_state(camera, source, "online", "");
            if (source) gst_object_unref(source);
          }
        } else if (camera.spec.reconnect && !stopping_ && seconds(now - camera.since) > kSilenceS) {
          char reason[64];
          std::snprintf(reason, sizeof reason, "no frame for %.0f s", kSilenceS);
          go_offline(camera, reason);
        }
        break;
      case Camera::State::Offline:
        if (!stopping_ && now >= camera.retry_at) restart(camera);
        break;
      case Camera::State::Ended:
        if (camera.eos_due) end_branch(camera);
        break;
    }
  }
}

void CameraSupervisor::post_state(Camera& camera, GstElement* from, const char* state, const std::string& reason) {
  GstStructure* s =
      gst_structure_new("prism-camera", "camera", G_TYPE_STRING, camera.spec.id.c_str(), "camera-uri", G_TYPE_STRING,
                        camera.spec.shown_uri.c_str(), "state", G_TYPE_STRING, state, "reason", G_TYPE_STRING,
                        reason.c_str(), "reconnects", G_TYPE_UINT64, camera.reconnects, nullptr);
  GstBus* bus = gst_element_get_bus(pipeline_);
  gst_bus_post(bus, gst_message_new_element(GST_OBJECT(from), s));
  gst_object_unref(bus);
}

// Takes the source out (NULL, removed) and plans the next one; a camera without reconnect ends.
void CameraSupervisor::go_offline(Camera& camera, const std::string& reason) {
  GstElement* source = nullptr;
  {
    std::lock_guard<std::mutex> guard(camera.lock);
    source = camera.source;
    camera.source = nullptr;
  }
  const bool ends = !camera.spec.reconnect || stopping_;
  if (source) {
    post_state(camera, source, ends ? "ended" : "offline", reason);
    g_signal_handlers_disconnect_by_data(source, &camera);
    gst_element_set_locked_state(source, TRUE);
    gst_element_set_state(source, GST_STATE_NULL);
    gst_bin_remove(camera.home, source);
    gst_object_unref(source);
  }
  if (ends) {
    camera.state = Camera::State::Ended;
    say_("prism: camera '" + camera.spec.id + "' ended: " + reason);
    end_branch(camera);
    return;
  }
  camera.state = Camera::State::Offline;
  camera.retry_at =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(camera.backoff_s));
  char retry[64];
  std::snprintf(retry, sizeof retry, "; trying again in %.1f s", camera.backoff_s);
  say_("prism: camera '" + camera.spec.id + "' offline: " + reason + retry);
  camera.backoff_s = std::min(camera.backoff_s * 2, kMaxBackoffS);
}

void CameraSupervisor::restart(Camera& camera) {
  GstElement* source = gst_element_factory_make("uridecodebin", camera.spec.source.c_str());
  if (!source) {
    go_offline(camera, "cannot make a uridecodebin");
    return;
  }
  g_object_set(source, "uri", camera.spec.uri.c_str(), nullptr);
  camera.reconnects += 1;
  camera.state = Camera::State::Starting;
  camera.since = Clock::now();
  camera.buffers_seen = 0;
  watch(camera, source);
  gst_bin_add(camera.home, source);
  // A failure to start posts its ERROR, which takes the camera offline again (handle_error).
  open_then_play(camera, source);
}

// PAUSED first: rtspsrc opens (DESCRIBE, SETUP) asynchronously in PAUSED, and a PLAYING asked for
// while that runs is lost (no PLAY is sent, no pad ever comes: seen with 1.22's rtspsrc). tick()
// takes the source to the pipeline's state once it has opened: an RTSP source just after rtspsrc
// posts its "open" progress as complete (handle_progress), or after kRtspOpenWaitMs if it never does; any
// other source at the next turn of the bus loop.
void CameraSupervisor::open_then_play(Camera& camera, GstElement* source) {
  gst_element_set_state(source, GST_STATE_PAUSED);
  camera.play_due = true;
  camera.play_at = Clock::now();
  camera.waits_for_open = g_ascii_strncasecmp(camera.spec.uri.c_str(), "rtsp", 4) == 0;
  if (camera.waits_for_open) camera.play_at += std::chrono::milliseconds(kRtspOpenWaitMs);
}

void CameraSupervisor::handle_progress(GstMessage* msg) {
  GstProgressType type = GST_PROGRESS_TYPE_START;
  gchar *code = nullptr, *text = nullptr;
  gst_message_parse_progress(msg, &type, &code, &text);
  const bool opened = type == GST_PROGRESS_TYPE_COMPLETE && code && std::strcmp(code, "open") == 0;
  g_free(code);
  g_free(text);
  if (!opened) return;
  bool current = false;
  Camera* camera = camera_of(msg, &current);
  // (100 ms on: rtspsrc posts it as its open command ends, not after it has returned)
  if (camera && current && camera->play_due && camera->waits_for_open) {
    camera->waits_for_open = false;
    camera->play_at = Clock::now() + std::chrono::milliseconds(100);
  }
}

// EOS into the camera's branch, so that it ends as a branch whose source ended does. Not before
// its first element is PAUSED (a camera that fails as the pipeline starts): a pad drops events
// while it flushes, and the sinks must preroll on this EOS.
void CameraSupervisor::end_branch(Camera& camera) {
  camera.eos_due = true;
  GstPad* target = nullptr;
  {
    std::lock_guard<std::mutex> guard(camera.lock);
    if (camera.target) target = GST_PAD(gst_object_ref(camera.target));
  }
  if (!target && !camera.next_element.empty()) {  // never linked: the first element's sink pad
    if (GstElement* next = gst_bin_get_by_name(GST_BIN(pipeline_), camera.next_element.c_str())) {
      GstIterator* pads = gst_element_iterate_sink_pads(next);
      GValue item = G_VALUE_INIT;
      if (gst_iterator_next(pads, &item) == GST_ITERATOR_OK) target = GST_PAD(g_value_dup_object(&item));
      g_value_unset(&item);
      gst_iterator_free(pads);
      gst_object_unref(next);
    }
  }
  if (!target) return;
  GstElement* first = gst_pad_get_parent_element(target);
  GstState state = GST_STATE_NULL;
  if (first) gst_element_get_state(first, &state, nullptr, 0);
  if (state >= GST_STATE_PAUSED) {
    camera.eos_due = false;
    // From another thread: a sink in PAUSED takes EOS as its preroll and holds the thread that
    // sent it until the pipeline plays (the bus loop's, had it been sent from here: a run whose
    // every camera failed at the start then waited forever).
    gst_element_call_async(
        first, [](GstElement*, gpointer pad) { gst_pad_send_event(GST_PAD(pad), gst_event_new_eos()); },
        gst_object_ref(target), gst_object_unref);
  }
  if (first) gst_object_unref(first);
  gst_object_unref(target);
}

void CameraSupervisor::stop() {
  stopping_ = true;
  for (auto& camera : cameras_) {
    if (camera->state == Camera::State::Offline) {
      camera->state = Camera::State::Ended;
      end_branch(*camera);
    } else if (camera->state == Camera::State::Starting) {  // a source that may never send EOS
      go_offline(*camera, "the run is stopping");
    }
  }
}

std::vector<CameraSupervisor::Status> CameraSupervisor::status() const {
  std::vector<Status> out;
  for (const auto& camera : cameras_)
    out.push_back({camera->spec.id, camera->state == Camera::State::Online, camera->state == Camera::State::Ended,
                   camera->reconnects, camera->spec.shown_uri, camera->own_bin, camera->open_waits});
  return out;
}

const CameraSpec* CameraSupervisor::find(const std::string& id) const {
  for (const auto& camera : cameras_)
    if (camera->spec.id == id) return &camera->spec;
  return nullptr;
}

// The branch is built apart (a bin of its own, its sinks' preroll kept inside it: async-handling),
// then added and brought to the pipeline's state; its source opens in PAUSED first, as a remade
// one does (restart), and plays from tick().
std::string CameraSupervisor::add(const PipelineConfig& stamped) {
  if (stamped.cameras.size() != 1) return "no camera to add";
  const CameraSpec& spec = stamped.cameras[0];
  GError* error = nullptr;
  GstElement* bin = gst_parse_bin_from_description_full(to_launch_line(stamped).c_str(), FALSE, nullptr,
                                                        GST_PARSE_FLAG_FATAL_ERRORS, &error);
  if (!bin || error) {
    const std::string why = std::string("could not build the camera's chain: ") + (error ? error->message : "?");
    g_clear_error(&error);
    if (bin) gst_object_unref(gst_object_ref_sink(bin));
    return why;
  }
  gst_object_set_name(GST_OBJECT(bin), (spec.id + "-camera").c_str());
  g_object_set(bin, "async-handling", TRUE, nullptr);
  auto camera = make_camera(spec, stamped.chains, GST_BIN(bin));
  camera->own_bin = true;
  camera->since = Clock::now();
  GstElement* source = gst_bin_get_by_name(GST_BIN(bin), spec.source.c_str());
  if (source) {
    watch(*camera, source);
    gst_element_set_locked_state(source, TRUE);  // PAUSED first, then PLAYING from tick()
  }
  if (!gst_bin_add(GST_BIN(pipeline_), bin)) {  // (a name in use: the caller checked)
    if (source) {
      g_signal_handlers_disconnect_by_data(source, camera.get());
      gst_object_unref(source);
    }
    gst_clear_object(&camera->home);
    gst_object_unref(gst_object_ref_sink(bin));
    return "could not add the camera's chain to the pipeline";
  }
  Camera& added = *camera;
  cameras_.push_back(std::move(camera));
  gst_element_sync_state_with_parent(bin);
  if (source) {
    gst_element_set_locked_state(source, FALSE);
    open_then_play(added, source);
    gst_object_unref(source);
  }
  return {};
}

// The source goes first (no more data enters the branch), then the rest of the branch, each
// element locked in its state so that nothing of the pipeline's own changes reaches it, set to
// NULL and taken out. The other branches are not touched.
bool CameraSupervisor::remove(const std::string& id) {
  const auto it = std::find_if(cameras_.begin(), cameras_.end(),
                               [&](const std::unique_ptr<Camera>& c) { return c->spec.id == id; });
  if (it == cameras_.end()) return false;
  std::unique_ptr<Camera> camera = std::move(*it);
  cameras_.erase(it);
  GstElement* source = nullptr;
  {
    std::lock_guard<std::mutex> guard(camera->lock);
    source = camera->source;
    camera->source = nullptr;
  }
  post_state(*camera, source ? source : pipeline_, "removed", "removed by the control API");
  if (source) g_signal_handlers_disconnect_by_data(source, camera.get());
  auto take_out = [](GstElement* element) {
    gst_element_set_locked_state(element, TRUE);
    gst_element_set_state(element, GST_STATE_NULL);
    if (GstObject* parent = gst_object_get_parent(GST_OBJECT(element))) {
      gst_bin_remove(GST_BIN(parent), element);
      gst_object_unref(parent);
    }
  };
  if (source) {
    take_out(source);
    gst_object_unref(source);
  }
  if (camera->own_bin) {
    take_out(GST_ELEMENT(camera->home));
  } else {
    for (const std::string& name : camera->spec.elements) {
      if (name == camera->spec.source) continue;
      if (GstElement* element = gst_bin_get_by_name(GST_BIN(pipeline_), name.c_str())) {
        take_out(element);
        gst_object_unref(element);
      }
    }
  }
  say_("prism: camera '" + id + "' removed");
  std::lock_guard<std::mutex> guard(camera->lock);
  gst_clear_object(&camera->target);
  gst_clear_object(&camera->home);
  return true;
}

}  // namespace prism
