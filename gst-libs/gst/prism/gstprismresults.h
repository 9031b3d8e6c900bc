/* Prism's results as JSON lines (schema "prism.results/1", docs/RESULTS.md): the one converter from
 * an analysis element's per-frame bus message (gstprismmessage.h) to a line of JSON, the writer that
 * appends those lines to a file or standard output, and the bus tap of the `prismresults` element.
 * `prism run --results` and `prismresults` both write through here, so their lines are the same.
 *
 * Why a converter of the message, not of each element's results: the message is already the one
 * per-frame record every analysis element makes (names and time fields unified in
 * gst_prism_frame_message_new), so one function maps every element, a field an element adds later
 * comes out (its name with '_' for '-') instead of being lost, and the elements stay unaware of JSON.
 *
 * The mapping (docs/RESULTS.md has the schema and an example line per element):
 *  - a message is a result when it is an element message whose structure is named "prism-KIND";
 *  - timestamp, running-time, stream-time, duration and frame become pts, running_time,
 *    stream_time, duration and frame (integers, nanoseconds; null when GST_CLOCK_TIME_NONE);
 *    element and factory come from the message's source; `camera` and `camera-uri` (set by an
 *    element that has a camera, gstprismcudafilter.h) become the line's camera and camera_uri;
 *  - kind "camera" (prism run's camera state: online, offline, with the reason and the reconnects)
 *    has factory "camera", no results and every field in `info`;
 *  - `results`: one object per detection for a kind whose results are a list (emdtracker's
 *    `detections`), else one object of the message's own result fields (textureid, bowclassify);
 *  - `info`: the per-frame fields that are not a result (emdtracker's target-known and stats,
 *    textureid's mode, latency-ms and sharpness, bowclassify's latency-ms);
 *  - in results: x, y, width, height become box {x, y, w, h} (pixels of the element's frame),
 *    track-id becomes id (a string, as textureid's product id is), bowclassify's confidence becomes
 *    score; every other name keeps its meaning with '_' for '-'.
 */
#pragma once

#include <gst/gst.h>

#include <mutex>
#include <string>

namespace prism {

/* The version written in every line's "schema"; a change of a field's name, type or meaning makes
 * it prism.results/2 (fields may be added within a version). */
constexpr char kResultsSchema[] = "prism.results/1";

/* TRUE when `msg` is a Prism analysis result: an element message named "prism-KIND". */
gboolean results_message_is_result(GstMessage *msg);

/* The JSON line (without its newline) for a result message; "" for any other message. Never throws;
 * strings that are not UTF-8 are written with U+FFFD in place of the bad bytes. */
std::string results_json_line(GstMessage *msg);

/* Writes whole JSON lines to a file or to standard output ("-"). Each line goes out in one write(2)
 * of the line and its newline on a descriptor opened with O_APPEND, with no user-space buffer: what
 * a reader sees, even after the writing process is killed, is a sequence of whole lines (a power
 * loss may lose the last ones: nothing is fsynced). Thread-safe: lines from several threads never
 * interleave. */
class ResultsWriter {
 public:
  ResultsWriter() = default;
  ~ResultsWriter() { close(); }
  ResultsWriter(const ResultsWriter &) = delete;
  ResultsWriter &operator=(const ResultsWriter &) = delete;

  /* Opens `location` (a file, created or emptied unless `append`; "-": standard output). FALSE with
   * `error` naming the location and the system's reason (a folder, a missing parent folder, no
   * permission). */
  gboolean open(const std::string &location, gboolean append, std::string *error);
  /* Appends `line` and a newline. FALSE with `error` naming the location (a full disk, a closed
   * pipe); the writer stays open. A pipe whose reader has gone (`prism run --results - | head -1`)
   * is that error (EPIPE), not a death by SIGPIPE: the signal is blocked in the writing thread
   * around the write and the one it raises is taken back; the process's disposition is untouched. */
  gboolean write_line(const std::string &line, std::string *error);
  void close();
  gboolean is_open() const;

 private:
  mutable std::mutex mutex_;
  int fd_ = -1;
  gboolean owns_fd_ = FALSE;
  std::string location_;
};

/* The prismresults element's way to the results: it attaches to the bus of its top-level bin (the
 * pipeline) with gst_bus_enable_sync_message_emission and the "sync-message::element" signal, and
 * writes each result message there, in the thread that posts it. Why the bus and not the buffers:
 * the message is the whole result (emdtracker's frames without a detection and its stats,
 * textureid's attempts that identify nothing) while meta is partial and lost by elements such as
 * videoconvert; the sync-message signal is GStreamer's documented way for several listeners to see
 * every message of a bus (as video overlays do), so the application's own bus handling (gst-launch's
 * included) is untouched and nothing waits in a queue. So it writes every Prism result of its
 * pipeline, whichever branch the analysis element is in. A write error is posted as an ERROR of
 * `element` naming its property 'location'; later results are then dropped. */
class ResultsBusTap {
 public:
  ResultsBusTap() = default;
  ~ResultsBusTap() { stop(); }
  ResultsBusTap(const ResultsBusTap &) = delete;
  ResultsBusTap &operator=(const ResultsBusTap &) = delete;

  /* Opens `location` and attaches to the bus of `element`'s top-level bin. FALSE with an ERROR
   * posted on `element` (naming property 'location') when the file cannot be opened or no bus is
   * set. */
  gboolean start(GstElement *element, const gchar *location, gboolean append);
  /* Detaches and closes. Idempotent. */
  void stop();

 private:
  static void on_sync_message(GstBus *bus, GstMessage *msg, gpointer self);
  void write(GstMessage *msg);

  std::mutex mutex_;              /* guards the fields below against the posting threads */
  GstElement *element_ = nullptr; /* not owned: the tap is the element's */
  GstBus *bus_ = nullptr;
  gulong handler_ = 0;
  gboolean failed_ = FALSE;
  std::string location_;
  ResultsWriter writer_;
};

}  // namespace prism
