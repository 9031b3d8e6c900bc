#include "gst/prism/gstprismresults.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

/* GST_ELEMENT_ERROR logs in the default category: made on first use (thread-safe static). */
static GstDebugCategory *results_debug_category() {
  static GstDebugCategory *category =
      _gst_debug_category_new("prismresults", 0, "Prism results as JSON lines (gst-libs/gst/prism)");
  return category;
}
#define GST_CAT_DEFAULT results_debug_category()

namespace prism {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kPrefix[] = "prism-";

/* How one kind of message maps to results: the list field whose items are the results (null: the
 * message's own result fields make one result), the per-frame fields that go to `info` (with a list
 * field, every field but the list does), and renames of result fields. */
struct KindRule {
  const char *kind;
  const char *list_field;
  const char *const *info_fields; /* null-terminated; may be null */
  const char *const *renames;     /* pairs, null-terminated; may be null */
  bool no_results = false;        /* every field is info: a state, not a finding (kind "camera") */
};

const char *const kTextureInfo[] = {"mode", "latency-ms", "sharpness", "skipped", nullptr};
const char *const kBowInfo[] = {"latency-ms", "skipped", nullptr};
const char *const kEmdRenames[] = {"track-id", "id", nullptr};
const char *const kBowRenames[] = {"confidence", "score", nullptr};

const KindRule kRules[] = {
    {"emdtracker", "detections", nullptr, kEmdRenames},
    {"textureid", nullptr, kTextureInfo, nullptr},
    {"bowclassify", nullptr, kBowInfo, kBowRenames},
    /* a camera's state from prism run (gstprismmessage.h, "prism-camera"): its factory is "camera" */
    {"camera", nullptr, nullptr, nullptr, true},
};
const KindRule kOtherKind = {"", nullptr, nullptr, nullptr}; /* a kind added later: one result */

/* The fields every message has, from gst_prism_frame_message_new, and their names in a line. */
const char *const kTimeFields[][2] = {
    {"timestamp", "pts"}, {"running-time", "running_time"}, {"stream-time", "stream_time"}, {"duration", "duration"}};

bool in_list(const char *const *list, const char *name) {
  for (; list && *list; ++list)
    if (std::strcmp(*list, name) == 0) return true;
  return false;
}

const char *renamed(const char *const *renames, const char *name) {
  for (; renames && renames[0]; renames += 2)
    if (std::strcmp(renames[0], name) == 0) return renames[1];
  return nullptr;
}

std::string json_name(const char *name) {
  std::string s = name;
  for (char &c : s)
    if (c == '-') c = '_';
  return s;
}

Json to_json(const GValue *v);

Json structure_to_json(const GstStructure *s) {
  Json o = Json::object();
  const int n = gst_structure_n_fields(s);
  for (int i = 0; i < n; ++i) {
    const char *name = gst_structure_nth_field_name(s, i);
    o[json_name(name)] = to_json(gst_structure_get_value(s, name));
  }
  return o;
}

/* A GValue as JSON: numbers, booleans, strings, structures (objects) and lists/arrays; anything
 * else as GStreamer serialises it (a fraction "30/1"). Non-finite doubles are null. */
Json to_json(const GValue *v) {
  const GType t = G_VALUE_TYPE(v);
  switch (G_TYPE_FUNDAMENTAL(t)) {
    case G_TYPE_BOOLEAN: return bool(g_value_get_boolean(v));
    case G_TYPE_INT: return g_value_get_int(v);
    case G_TYPE_UINT: return g_value_get_uint(v);
    case G_TYPE_LONG: return (gint64)g_value_get_long(v);
    case G_TYPE_ULONG: return (guint64)g_value_get_ulong(v);
    case G_TYPE_INT64: return g_value_get_int64(v);
    case G_TYPE_UINT64: return g_value_get_uint64(v);
    case G_TYPE_FLOAT:
    case G_TYPE_DOUBLE: {
      const double d = t == G_TYPE_FLOAT ? g_value_get_float(v) : g_value_get_double(v);
      return std::isfinite(d) ? Json(d) : Json(nullptr);
    }
    case G_TYPE_STRING: {
      const char *s = g_value_get_string(v);
      return s ? Json(s) : Json(nullptr);
    }
    default: break;
  }
  if (t == GST_TYPE_STRUCTURE) {
    const GstStructure *s = gst_value_get_structure(v);
    return s ? structure_to_json(s) : Json(nullptr);
  }
  if (t == GST_TYPE_LIST || t == GST_TYPE_ARRAY) {
    Json a = Json::array();
    const guint n = t == GST_TYPE_LIST ? gst_value_list_get_size(v) : gst_value_array_get_size(v);
    for (guint i = 0; i < n; ++i)
      a.push_back(to_json(t == GST_TYPE_LIST ? gst_value_list_get_value(v, i) : gst_value_array_get_value(v, i)));
    return a;
  }
  gchar *text = gst_value_serialize(v);
  Json out = text ? Json(text) : Json(nullptr);
  g_free(text);
  return out;
}

/* The integer of an int-typed field, for the box. */
bool int_field(const GstStructure *s, const char *name, gint64 *out) {
  const GValue *v = gst_structure_get_value(s, name);
  if (!v) return false;
  switch (G_VALUE_TYPE(v)) {
    case G_TYPE_INT: *out = g_value_get_int(v); return true;
    case G_TYPE_UINT: *out = g_value_get_uint(v); return true;
    case G_TYPE_INT64: *out = g_value_get_int64(v); return true;
    default: return false;
  }
}

/* A result from `s`'s fields, except those `skip` says are not results: box, id and renames. */
template <typename Skip>
Json result_to_json(const GstStructure *s, const KindRule &rule, Skip skip) {
  Json r = Json::object();
  gint64 x = 0, y = 0, w = 0, h = 0;
  const bool box =
      int_field(s, "x", &x) && int_field(s, "y", &y) && int_field(s, "width", &w) && int_field(s, "height", &h);
  const int n = gst_structure_n_fields(s);
  for (int i = 0; i < n; ++i) {
    const char *name = gst_structure_nth_field_name(s, i);
    if (skip(name)) continue;
    if (box && (!std::strcmp(name, "x") || !std::strcmp(name, "y") || !std::strcmp(name, "width") ||
                !std::strcmp(name, "height")))
      continue;
    const char *to = renamed(rule.renames, name);
    Json value = to_json(gst_structure_get_value(s, name));
    const std::string key = to ? to : json_name(name);
    /* id is a string in every element: a track number and a product id name the same thing */
    if (key == "id" && value.is_number()) value = value.dump();
    r[key] = std::move(value);
  }
  if (box) r["box"] = Json{{"x", x}, {"y", y}, {"w", w}, {"h", h}};
  /* the common names first, then the element's own in the message's order */
  Json out = Json::object();
  for (const char *key : {"id", "label", "score", "box"})
    if (r.contains(key)) out[key] = r[key];
  for (auto &[key, value] : r.items())
    if (!out.contains(key)) out[key] = std::move(value);
  return out;
}

Json time_json(const GstStructure *s, const char *name) {
  guint64 t = GST_CLOCK_TIME_NONE;
  if (!gst_structure_get_uint64(s, name, &t) || !GST_CLOCK_TIME_IS_VALID(t)) return nullptr;
  return t;
}

/* The element's factory name for errors ("prismresults"), its instance name without a factory. */
const char *factory_name(GstElement *element) {
  GstElementFactory *f = gst_element_get_factory(element);
  return f ? GST_OBJECT_NAME(f) : GST_ELEMENT_NAME(element);
}

/* The fields of the line itself, not of results or info: the times, `frame` and the camera. */
bool is_time_field(const char *name) {
  for (const auto &f : kTimeFields)
    if (!std::strcmp(f[0], name)) return true;
  return !std::strcmp(name, "frame") || !std::strcmp(name, "camera") || !std::strcmp(name, "camera-uri");
}

}  // namespace

gboolean results_message_is_result(GstMessage *msg) {
  if (!msg || GST_MESSAGE_TYPE(msg) != GST_MESSAGE_ELEMENT) return FALSE;
  const GstStructure *s = gst_message_get_structure(msg);
  return s && g_str_has_prefix(gst_structure_get_name(s), kPrefix) &&
         std::strlen(gst_structure_get_name(s)) > sizeof kPrefix - 1;
}

std::string results_json_line(GstMessage *msg) {
  if (!results_message_is_result(msg)) return {};
  const GstStructure *s = gst_message_get_structure(msg);
  const char *kind = gst_structure_get_name(s) + sizeof kPrefix - 1;
  const KindRule *rule = &kOtherKind;
  for (const KindRule &r : kRules)
    if (!std::strcmp(r.kind, kind)) rule = &r;

  Json line = Json::object();
  line["schema"] = kResultsSchema;
  GstObject *src = GST_MESSAGE_SRC(msg);
  line["element"] = src ? Json(GST_OBJECT_NAME(src)) : Json(nullptr);
  GstElementFactory *factory = src && GST_IS_ELEMENT(src) ? gst_element_get_factory(GST_ELEMENT(src)) : nullptr;
  line["factory"] = factory && !rule->no_results ? Json(GST_OBJECT_NAME(factory)) : Json(kind);
  /* the camera, when the element has one (gstprismcudafilter.h, "The camera a frame comes from") */
  for (const char *field : {"camera", "camera-uri"})
    if (const char *text = gst_structure_get_string(s, field)) line[json_name(field)] = text;
  for (const auto &f : kTimeFields) line[f[1]] = time_json(s, f[0]);
  guint64 frame = 0;
  line["frame"] = gst_structure_get_uint64(s, "frame", &frame) ? Json(frame) : Json(nullptr);

  Json results = Json::array();
  Json info = Json::object();
  const int n = gst_structure_n_fields(s);
  if (rule->no_results) {
    for (int i = 0; i < n; ++i) {
      const char *name = gst_structure_nth_field_name(s, i);
      if (!is_time_field(name)) info[json_name(name)] = to_json(gst_structure_get_value(s, name));
    }
  } else if (rule->list_field) {
    for (int i = 0; i < n; ++i) {
      const char *name = gst_structure_nth_field_name(s, i);
      if (is_time_field(name)) continue;
      const GValue *v = gst_structure_get_value(s, name);
      if (!std::strcmp(name, rule->list_field) && GST_VALUE_HOLDS_LIST(v)) {
        for (guint k = 0; k < gst_value_list_get_size(v); ++k) {
          const GValue *item = gst_value_list_get_value(v, k);
          if (GST_VALUE_HOLDS_STRUCTURE(item) && gst_value_get_structure(item))
            results.push_back(result_to_json(gst_value_get_structure(item), *rule, [](const char *) { return false; }));
          else
            results.push_back(to_json(item));
        }
      } else {
        info[json_name(name)] = to_json(v);
      }
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const char *name = gst_structure_nth_field_name(s, i);
      if (in_list(rule->info_fields, name)) info[json_name(name)] = to_json(gst_structure_get_value(s, name));
    }
    results.push_back(result_to_json(
        s, *rule, [rule](const char *name) { return is_time_field(name) || in_list(rule->info_fields, name); }));
  }
  line["results"] = std::move(results);
  line["info"] = std::move(info);
  try {
    return line.dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (...) { /* only allocation can fail here */
    return {};
  }
}

/* ResultsWriter */

namespace {

/* SIGPIPE blocked in the calling thread for a scope, so that a write to a pipe or FIFO whose reader
 * has gone fails with EPIPE (an error naming the output) instead of killing the process: a library
 * and an element must not change the process's disposition, and the signal a failed write raises
 * is directed at the writing thread, so blocking it there is enough. The blocked signal stays
 * pending; discard() takes it back (sigtimedwait with no wait) unless one was pending before, which
 * is the process's own. The thread's mask is restored on leaving. The approach of OpenSSL's and
 * libcurl's write paths on systems without MSG_NOSIGNAL for pipes. */
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeBlock() {
    if (blocked_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock &) = delete;
  SigpipeBlock &operator=(const SigpipeBlock &) = delete;

  /* After a write failed with EPIPE: the SIGPIPE it raised is taken back. */
  void discard() {
    if (!blocked_ || was_pending_) return;
    const struct timespec no_wait = {0, 0};
    while (sigtimedwait(&pipe_, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false, blocked_ = false;
};

}  // namespace

gboolean ResultsWriter::open(const std::string &location, gboolean append, std::string *error) {
  close();
  std::lock_guard<std::mutex> lock(mutex_);
  if (location.empty()) {
    *error = "no results file given (a file name, or '-' for standard output)";
    return FALSE;
  }
  if (location == "-") {
    fd_ = STDOUT_FILENO;
    owns_fd_ = FALSE;
    location_ = "standard output";
    return TRUE;
  }
  gchar *shown = g_filename_display_name(location.c_str());
  location_ = shown;
  g_free(shown);
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC);
  int fd = ::open(location.c_str(), flags | O_NONBLOCK, 0644);
  if (fd < 0) {
    *error = "results file '" + location_ + "': cannot open it for writing: " + std::strerror(errno);
    return FALSE;
  }
  /* Only a regular file, a pipe or a character device (/dev/stdout): a FIFO opened without a reader
   * fails above (ENXIO) instead of blocking; writes then block as usual. */
  struct stat st;
  if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
    ::close(fd);
    *error = "results file '" + location_ + "': not a regular file, pipe or device";
    return FALSE;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  fd_ = fd;
  owns_fd_ = TRUE;
  return TRUE;
}

gboolean ResultsWriter::write_line(const std::string &line, std::string *error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) {
    *error = "no results file is open";
    return FALSE;
  }
  const std::string text = line + '\n';
  SigpipeBlock no_sigpipe;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int why = n < 0 ? errno : EIO;
      if (why == EPIPE) no_sigpipe.discard();
      *error = "results file '" + location_ + "': cannot write: " + std::strerror(why) +
               (why == EPIPE ? " (its reader has closed it)" : "");
      return FALSE;
    }
    done += size_t(n);
  }
  return TRUE;
}

void ResultsWriter::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ >= 0 && owns_fd_) ::close(fd_);
  fd_ = -1;
  owns_fd_ = FALSE;
}

gboolean ResultsWriter::is_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fd_ >= 0;
}

/* ResultsBusTap */

gboolean ResultsBusTap::start(GstElement *element, const gchar *location, gboolean append) {
  stop();
  const char *factory = factory_name(element);
  std::string error;
  if (!location || !*location) {
    GST_ELEMENT_ERROR(element, RESOURCE, NOT_FOUND,
                      ("%s: property 'location' is not set (a file name, or '-' for standard output)", factory),
                      (nullptr));
    return FALSE;
  }
  if (!writer_.open(location, append, &error)) {
    GST_ELEMENT_ERROR(element, RESOURCE, OPEN_WRITE, ("%s: property 'location': %s", factory, error.c_str()),
                      (nullptr));
    return FALSE;
  }
  /* the top-level bin: its bus is the application's */
  GstObject *top = GST_OBJECT(gst_object_ref(element));
  while (GstObject *parent = gst_object_get_parent(top)) {
    gst_object_unref(top);
    top = parent;
  }
  GstBus *bus = GST_IS_ELEMENT(top) ? gst_element_get_bus(GST_ELEMENT(top)) : nullptr;
  gst_object_unref(top);
  if (!bus) {
    writer_.close();
    GST_ELEMENT_ERROR(element, CORE, STATE_CHANGE,
                      ("%s: not in a pipeline: there is no bus to read results from", factory), (nullptr));
    return FALSE;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  element_ = element;
  location_ = location;
  failed_ = FALSE;
  bus_ = bus;
  gst_bus_enable_sync_message_emission(bus_);
  handler_ = g_signal_connect(bus_, "sync-message::element", G_CALLBACK(on_sync_message), this);
  return TRUE;
}

void ResultsBusTap::stop() {
  GstBus *bus = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bus_) {
      g_signal_handler_disconnect(bus_, handler_);
      gst_bus_disable_sync_message_emission(bus_);
      bus = bus_;
    }
    bus_ = nullptr;
    handler_ = 0;
    element_ = nullptr;
    writer_.close();
  }
  if (bus) gst_object_unref(bus);
}

void ResultsBusTap::on_sync_message(GstBus *, GstMessage *msg, gpointer self) {
  static_cast<ResultsBusTap *>(self)->write(msg);
}

void ResultsBusTap::write(GstMessage *msg) {
  if (!results_message_is_result(msg)) return;
  const std::string line = results_json_line(msg);
  std::string error;
  GstElement *element = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!bus_ || failed_ || line.empty() || writer_.write_line(line, &error)) return;
    failed_ = TRUE;
    element = GST_ELEMENT(gst_object_ref(element_));
  }
  /* posted outside the lock: an application may act on the error in this very thread */
  GST_ELEMENT_ERROR(element, RESOURCE, WRITE, ("%s: property 'location': %s", factory_name(element), error.c_str()),
                    (nullptr));
  gst_object_unref(element);
}

}  // namespace prism
