// gst-launch line generation: exact --print output, pads, quoting that survives gst_parse_launch
// and a POSIX shell.
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "launch_line.h"
#include "test_support.h"

namespace prism {
namespace {

using test::joined;
using test::TempDir;

TEST(LaunchLine, TeeBranchesAndCaps) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = test::load_text(dir, "t.yaml", R"(variables:
  frames: 120
elements:
  src: {element: videotestsrc, properties: {num-buffers: "${frames}", pattern: ball}}
  t: {element: tee}
  q1: {element: queue}
  a: {element: fakesink}
  q2: {element: queue, properties: {leaky: downstream}}
  b: {element: fakesink, properties: {sync: false}}
links:
  - [src, {caps: "video/x-raw, format=I420, width=640, height=360"}, t, q1, a]
  - [t, q2, b]
)",
                                                errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(to_launch_line(config),
            "videotestsrc name=src num-buffers=120 pattern=ball ! "
            "video/x-raw,format=I420,width=640,height=360 ! tee name=t ! queue name=q1 ! "
            "fakesink name=a t. ! queue name=q2 leaky=downstream ! fakesink name=b sync=false");
  EXPECT_EQ(to_gst_launch_command(config), "gst-launch-1.0 " + to_launch_line(config));
}

TEST(LaunchLine, ElementsFirstSeenWithAPadAreDeclaredOnTheirOwn) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = test::load_text(dir, "d.yaml", R"(elements:
  q: {element: queue}
  sink: {element: fakesink}
  d: {element: qtdemux}
  src: {element: filesrc, properties: {location: /tmp/a b.mp4}}
links:
  - [d.video_0, q, sink]
  - [src, d]
)",
                                                errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(to_launch_line(config),
            "qtdemux name=d d.video_0 ! queue name=q ! fakesink name=sink "
            "filesrc name=src location=\"/tmp/a b.mp4\" ! d.");
  EXPECT_EQ(to_gst_launch_command(config),
            "gst-launch-1.0 qtdemux name=d d.video_0 ! queue name=q ! fakesink name=sink "
            "filesrc name=src 'location=\"/tmp/a b.mp4\"' ! d.");
}

// Values survive gst_parse_launch unchanged, however odd.
TEST(LaunchLine, QuotedValuesRoundTripThroughGstParse) {
  test::init_gst_once();
  const std::vector<std::string> values = {"/plain/path.mp4", "/with space/x.mp4", "quote\"inside", "back\\slash",
                                           "bang!x",          "comma,semi;colon:", "paren(s)",      "brace{s}",
                                           "eq=ual",          "uni\xc3\xa9",       "'single'",      "trailing\\",
                                           "$HOME*?",         "tab\there"};
  for (const auto& value : values) {
    PipelineConfig config;
    config.elements = {{"src", "filesrc", {{"location", value, {}}}, {}}, {"sink", "fakesink", {}, {}}};
    LinkItem src, sink;
    src.element = "src";
    sink.element = "sink";
    config.chains = {{src, sink}};
    const std::string line = to_launch_line(config);
    GError* error = nullptr;
    GstElement* pipeline = gst_parse_launch_full(line.c_str(), nullptr, GST_PARSE_FLAG_FATAL_ERRORS, &error);
    ASSERT_TRUE(pipeline && !error) << line << ": " << (error ? error->message : "");
    GstElement* filesrc = gst_bin_get_by_name(GST_BIN(pipeline), "src");
    ASSERT_TRUE(filesrc);
    gchar* location = nullptr;
    g_object_get(filesrc, "location", &location, nullptr);
    EXPECT_STREQ(location, value.c_str()) << "line: " << line;
    g_free(location);
    gst_object_unref(filesrc);
    gst_object_unref(pipeline);
  }
}

// shell_quote() output read back by /bin/sh gives the original words.
TEST(LaunchLine, ShellQuotingRoundTrips) {
  const std::vector<std::string> words = {
      "plain", "a b", "it's", "$x", "*", "!", "\"q\"", "video/x-raw(memory:CUDAMemory)", "a\\b", ""};
  std::string command = "printf '%s\\n'";
  for (const auto& w : words) command += " " + shell_quote(w);
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_TRUE(pipe);
  std::string output;
  char buffer[256];
  while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
  pclose(pipe);
  std::string expected;
  for (const auto& w : words) expected += w + "\n";
  EXPECT_EQ(output, expected);
}

}  // namespace
}  // namespace prism
