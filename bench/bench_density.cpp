// Cameras per GPU: K copies of one branch (a camera's decode and analysis) in one pipeline, one
// process, as `prism run` runs a cameras: YAML. Counts the buffers reaching every sink and reports
// the steady aggregate rate (after each stream's first WARMUP frames, so that CUDA context,
// decoder and pool start-up are left out), the process's CPU use over the same span (cores), and
// the frames the analysis elements skipped (their frames-skipped property, async mode).
//   bench_density [--context shared|element] [--warmup W] LABEL K BRANCH
// BRANCH is a gst-launch description with {i} standing for the stream's index; it must end each
// branch in a sink (fakesink sync=false) and hold its own frame count (identity eos-after=N + 1).
// --context shared (the default) answers the elements' need-context with one blocking-sync CUDA
// context, as prism run does (GstPrismCudaContextSharer); element: GstCudaContext's own,
// made by the first element that needs one and shared through the bin (gst-launch).
// Prints one markdown row: | LABEL | K | fps | fps per stream | cores | skipped | frames | wall |.
#include <gst/gst.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gst/prism/gstprismcuda.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Counter {
  std::atomic<guint64> frames{0};
  guint64 warm_at = 0;  // total frames at which the steady span starts
  std::atomic<bool> warm{false};
  Clock::time_point t_warm;
  double cpu_warm = 0;
  std::atomic<gint64> last_ns{0};
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

GstPadProbeReturn count(GstPad*, GstPadProbeInfo*, gpointer data) {
  auto* c = static_cast<Counter*>(data);
  const guint64 n = ++c->frames;
  const auto now = Clock::now();
  c->last_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  if (n == c->warm_at) {
    c->t_warm = now;
    c->cpu_warm = cpu_seconds();
    c->warm = true;
  }
  return GST_PAD_PROBE_OK;
}

std::string expand(const std::string& branch, int k) {
  std::string all;
  for (int i = 0; i < k; i++) {
    std::string b = branch;
    for (size_t p; (p = b.find("{i}")) != std::string::npos;) b.replace(p, 3, std::to_string(i));
    all += b + " ";
  }
  return all;
}

guint64 skipped_frames(GstBin* bin) {
  guint64 total = 0;
  GstIterator* it = gst_bin_iterate_recurse(bin);
  GValue v = G_VALUE_INIT;
  while (gst_iterator_next(it, &v) == GST_ITERATOR_OK) {
    GObject* e = G_OBJECT(g_value_get_object(&v));
    if (g_object_class_find_property(G_OBJECT_GET_CLASS(e), "frames-skipped")) {
      guint64 s = 0;
      g_object_get(e, "frames-skipped", &s, nullptr);
      total += s;
    }
    g_value_reset(&v);
  }
  g_value_unset(&v);
  gst_iterator_free(it);
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  bool shared = true;
  int warmup = 30;
  int a = 1;
  for (; a < argc && std::strncmp(argv[a], "--", 2) == 0; a += 2) {
    if (a + 1 >= argc) break;
    if (!std::strcmp(argv[a], "--context"))
      shared = std::strcmp(argv[a + 1], "element") != 0;
    else if (!std::strcmp(argv[a], "--warmup"))
      warmup = std::atoi(argv[a + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[a]);
      return 2;
    }
  }
  if (argc - a != 3 || warmup < 1) {
    std::fprintf(stderr, "usage: %s [--context shared|element] [--warmup W] LABEL K BRANCH\n", argv[0]);
    return 2;
  }
  const char* label = argv[a];
  const int k = std::atoi(argv[a + 1]);
  GError* err = nullptr;
  GstElement* pipe = gst_parse_launch(expand(argv[a + 2], k).c_str(), &err);
  if (!pipe || err) {
    std::fprintf(stderr, "bad pipeline: %s\n", err ? err->message : "?");
    return 2;
  }
  GstPrismCudaContextSharer* sharer = shared ? gst_prism_cuda_context_sharer_new() : nullptr;
  GstBus* bus = gst_element_get_bus(pipe);
  if (sharer) gst_prism_cuda_context_sharer_watch(sharer, bus);
  Counter c;
  c.warm_at = static_cast<guint64>(k) * warmup;
  int sinks = 0;
  GstIterator* it = gst_bin_iterate_sinks(GST_BIN(pipe));
  GValue v = G_VALUE_INIT;
  while (gst_iterator_next(it, &v) == GST_ITERATOR_OK) {
    GstPad* pad = gst_element_get_static_pad(GST_ELEMENT(g_value_get_object(&v)), "sink");
    if (pad) {
      gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, count, &c, nullptr);
      gst_object_unref(pad);
      sinks++;
    }
    g_value_reset(&v);
  }
  g_value_unset(&v);
  gst_iterator_free(it);
  if (sinks != k) std::fprintf(stderr, "%d sinks for %d streams\n", sinks, k);
  const auto t0 = Clock::now();
  gst_element_set_state(pipe, GST_STATE_PLAYING);
  GstMessage* msg =
      gst_bus_timed_pop_filtered(bus, GST_CLOCK_TIME_NONE, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_end = cpu_seconds();
  int rc = 0;
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError* e = nullptr;
    gchar* dbg = nullptr;
    gst_message_parse_error(msg, &e, &dbg);
    std::fprintf(stderr, "error from %s: %s (%s)\n", GST_OBJECT_NAME(GST_MESSAGE_SRC(msg)), e->message, dbg ? dbg : "");
    g_clear_error(&e);
    g_free(dbg);
    rc = 1;
  }
  gst_message_unref(msg);
  const guint64 skipped = skipped_frames(GST_BIN(pipe));
  gst_element_set_state(pipe, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(pipe);
  if (sharer && gst_prism_cuda_context_sharer_answered(sharer) == 0)
    std::fprintf(stderr, "no element was given the shared CUDA context (no GPU?)\n");
  gst_prism_cuda_context_sharer_free(sharer);
  const guint64 total = c.frames;
  if (!c.warm || total <= c.warm_at) {
    std::printf("| %s | %d | failed (%llu frames) | | | | | %.1f s |\n", label, k, (unsigned long long)total, wall);
    return 1;
  }
  const Clock::time_point t_last{std::chrono::nanoseconds(c.last_ns.load())};
  const double span = std::chrono::duration<double>(t_last - c.t_warm).count();
  const double fps = (total - c.warm_at) / span;
  std::printf("| %s | %d | %.0f | %.1f | %.1f | %llu | %llu | %.1f s |\n", label, k, fps, fps / k,
              (cpu_end - c.cpu_warm) / span, (unsigned long long)skipped, (unsigned long long)total, wall);
  std::fflush(stdout);
  return rc;
}
