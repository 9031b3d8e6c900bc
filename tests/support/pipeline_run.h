// Running a pipeline to its end in a test: the one place that drives a parsed launch line and reads
// its bus (the first error, warnings, EOS, element messages) and, when the line has an appsink,
// every frame that reaches it. Element tests build their own runners on this (feeding appsrcs,
// reading meta from each sample); nothing here depends on gtest.
#pragma once

#include <gst/gst.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace prism::test {

// What a bus said. Also drains the private bus of a GstHarness.
struct BusLog {
  std::string error;                    // the first ERROR's message ("" when none)
  std::string error_source;             // the name of the element that posted it
  std::string error_debug;              // its debug text
  std::vector<std::string> warnings;    // every WARNING, "<element>: <message>"
  bool eos = false;                     // the pipeline (or the appsink) reached EOS
  std::vector<GstStructure*> messages;  // element messages (owned copies), in order
  std::string message_name;             // when set, only element messages of this name are kept

  BusLog() = default;
  explicit BusLog(std::string name) : message_name(std::move(name)) {}
  BusLog(BusLog&& o) noexcept { *this = std::move(o); }
  BusLog& operator=(BusLog&& o) noexcept;
  BusLog(const BusLog&) = delete;
  BusLog& operator=(const BusLog&) = delete;
  ~BusLog();

  void record(GstMessage* m);  // m stays the caller's
  void drain(GstBus* bus);     // records every queued message
};

// One sample that reached the appsink.
struct Frame {
  std::string caps;
  std::string format;  // the video format ("" for other/x-prism-tensor)
  int width = 0, height = 0;
  int planes = 0;
  int pixel_stride = 0;  // bytes per pixel of the first plane
  std::vector<uint8_t>
      bytes;  // the visible rows of every plane, packed (a tensor: width x channels x element size per row)
  bool cuda_memory = false;  // the buffer's memory is GstCudaMemory
};

struct RunOptions {
  std::string appsink = "out";  // frames are read from the appsink of this name; without one, run to EOS
  std::string message_name;     // element messages kept ("" = all)
  // Gives up after this long without a frame or a bus message (a hang fails the test, not ctest).
  GstClockTime idle_timeout = 60 * GST_SECOND;
  std::function<void(GstElement*)> before_play;  // e.g. pad properties, probes, appsrc caps
  std::function<void(GstElement*)> after_play;   // e.g. pushing buffers into appsrcs
  std::function<void(GstSample*)> on_sample;     // e.g. meta of each collected frame
};

struct RunResult : BusLog {
  std::vector<Frame> frames;
  bool timed_out = false;
};

// Sets `pipeline` to PLAYING and collects until the appsink (or, without one, the pipeline) reaches
// EOS, an error, or idle_timeout. The pipeline stays PLAYING and the caller's; its bus has been read.
RunResult run_to_end(GstElement* pipeline, const RunOptions& options = {});

// Parses `launch`, runs it (run_to_end) and sets it to NULL. A launch line that does not parse gives
// the parser's message as error, from error_source "launch".
RunResult run_launch(const std::string& launch, const RunOptions& options = {});

}  // namespace prism::test
