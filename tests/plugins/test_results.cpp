// Results as JSON lines (prism.results/1, docs/RESULTS.md): the converter of gst-libs/gst/prism/gstprismresults
// on hand-made messages, and the prismresults element in real CPU pipelines of each analysis element, every line
// checked against the bus message it comes from. Bad locations are rows of test_bad_input.cpp.
#include <fcntl.h>
#include <gst/gst.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bowclassify_util.h"
#include "gst/prism/gstprismmessage.h"
#include "gst/prism/gstprismresults.h"
#include "pipeline_run.h"
#include "process.h"
#include "prism_test.h"
#include "test_env.h"
#include "textureid_util.h"

namespace prism {
namespace {

using Json = nlohmann::json;

class Results : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  test::TempDir dir;
};

// The structure's time field as the schema writes it: null for GST_CLOCK_TIME_NONE.
Json time_of(const GstStructure* s, const char* name) {
  guint64 t = 0;
  EXPECT_TRUE(gst_structure_get_uint64(s, name, &t)) << name;
  return GST_CLOCK_TIME_IS_VALID(t) ? Json(t) : Json(nullptr);
}

// The fields every line has, against the message (gst_prism_frame_message_new's fields).
void expect_common(const Json& line, const GstStructure* m, const std::string& element, const std::string& factory) {
  EXPECT_EQ(line.at("schema"), "prism.results/1");
  EXPECT_EQ(line.at("element"), element);
  EXPECT_EQ(line.at("factory"), factory);
  EXPECT_EQ(line.at("pts"), time_of(m, "timestamp"));
  EXPECT_EQ(line.at("running_time"), time_of(m, "running-time"));
  EXPECT_EQ(line.at("stream_time"), time_of(m, "stream-time"));
  EXPECT_EQ(line.at("duration"), time_of(m, "duration"));
  guint64 frame = 0;
  ASSERT_TRUE(gst_structure_get_uint64(m, "frame", &frame));
  EXPECT_EQ(line.at("frame"), frame);
  EXPECT_TRUE(line.at("results").is_array());
  EXPECT_TRUE(line.at("info").is_object());
}

// Every line of `path`, each parsed (a line that is not JSON fails the test).
std::vector<Json> read_lines(const std::string& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  std::string text;
  while (std::getline(in, text)) {
    try {
      lines.push_back(Json::parse(text));
    } catch (const std::exception& e) {
      ADD_FAILURE() << path << ": not JSON: " << e.what() << ": " << text;
    }
  }
  return lines;
}

// An element message with structure `s` (taken) from a new element of `factory` named `name`, and its line.
Json line_of(const char* factory, const char* name, GstStructure* s) {
  GstElement* e = gst_element_factory_make(factory, name);
  EXPECT_NE(e, nullptr) << factory;
  GstMessage* msg = gst_message_new_element(GST_OBJECT(e), s);
  const std::string text = results_json_line(msg);
  gst_message_unref(msg);
  gst_object_unref(e);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.find('\n'), std::string::npos);
  return Json::parse(text);
}

GstStructure* frame_message(const char* name, guint64 pts, guint64 frame) {
  return gst_structure_new(name, "timestamp", G_TYPE_UINT64, pts, "stream-time", G_TYPE_UINT64, GST_CLOCK_TIME_NONE,
                           "running-time", G_TYPE_UINT64, pts + 5, "duration", G_TYPE_UINT64, (guint64)40, "frame",
                           G_TYPE_UINT64, frame, nullptr);
}

TEST_F(Results, TheConverterMapsAnEmdtrackerMessage) {
  GstStructure* s = frame_message("prism-emdtracker", 1000, 7);
  gst_structure_set(s, "target-known", G_TYPE_BOOLEAN, TRUE, nullptr);
  GValue list = G_VALUE_INIT;
  g_value_init(&list, GST_TYPE_LIST);
  for (int i = 0; i < 2; ++i) {
    GstStructure* d =
        gst_structure_new("detection", "x", G_TYPE_INT, 10 + i, "y", G_TYPE_INT, 20, "width", G_TYPE_INT, 30, "height",
                          G_TYPE_INT, 40 + i, "distance", G_TYPE_DOUBLE, 0.25 * i, "track-id", G_TYPE_INT64,
                          (gint64)(5 + i), "pixels", G_TYPE_INT64, (gint64)99, nullptr);
    GValue v = G_VALUE_INIT;
    g_value_init(&v, GST_TYPE_STRUCTURE);
    gst_value_set_structure(&v, d);
    gst_structure_free(d);
    gst_value_list_append_and_take_value(&list, &v);
  }
  gst_structure_take_value(s, "detections", &list);
  GstStructure* stats =
      gst_structure_new("stats", "hit-rate", G_TYPE_DOUBLE, 0.5, "solved", G_TYPE_INT64, (gint64)3, nullptr);
  gst_structure_set(s, "stats", GST_TYPE_STRUCTURE, stats, nullptr);
  gst_structure_free(stats);

  const Json line = line_of("emdtracker", "tracker", s);
  const Json expected = R"({"schema":"prism.results/1","element":"tracker","factory":"emdtracker","pts":1000,
    "running_time":1005,"stream_time":null,"duration":40,"frame":7,
    "results":[{"id":"5","box":{"x":10,"y":20,"w":30,"h":40},"distance":0.0,"pixels":99},
               {"id":"6","box":{"x":11,"y":20,"w":30,"h":41},"distance":0.25,"pixels":99}],
    "info":{"target_known":true,"stats":{"hit_rate":0.5,"solved":3}}})"_json;
  EXPECT_EQ(line, expected) << line.dump();
}

TEST_F(Results, TheConverterMapsTextureidAndBowclassifyMessages) {
  GstStructure* s = frame_message("prism-textureid", 0, 0);
  gst_structure_set(s, "mode", G_TYPE_STRING, "search", "id", G_TYPE_STRING, "box", "identified", G_TYPE_BOOLEAN, TRUE,
                    "inliers", G_TYPE_INT, 12, "matches", G_TYPE_INT, 20, "score", G_TYPE_DOUBLE, 9.5, "latency-ms",
                    G_TYPE_DOUBLE, 3.0, "x", G_TYPE_INT, 1, "y", G_TYPE_INT, 2, "width", G_TYPE_INT, 3, "height",
                    G_TYPE_INT, 4, "sharpness", G_TYPE_DOUBLE, 150.0, nullptr);
  const double homography[9] = {2, 0, 10, 0, 2, 20, 0, 0, 1}, quad[8] = {9, 19, 209, 19, 209, 119, 9, 119};
  gst_prism_structure_set_doubles(s, "homography", homography, 9);
  gst_prism_structure_set_doubles(s, "quad", quad, 8);
  Json line = line_of("textureid", "tid", s);
  EXPECT_EQ(line.at("results"),
            R"([{"id":"box","score":9.5,"box":{"x":1,"y":2,"w":3,"h":4},"identified":true,"inliers":12,"matches":20,
                 "homography":[2.0,0.0,10.0,0.0,2.0,20.0,0.0,0.0,1.0],
                 "quad":[9.0,19.0,209.0,19.0,209.0,119.0,9.0,119.0]}])"_json)
      << line.dump();
  EXPECT_EQ(line.at("info"), R"({"mode":"search","latency_ms":3.0,"sharpness":150.0})"_json);
  EXPECT_EQ(line.at("stream_time"), nullptr);

  // not identified: no box, the best candidate's id
  s = frame_message("prism-textureid", 0, 3);
  gst_structure_set(s, "mode", G_TYPE_STRING, "verify", "id", G_TYPE_STRING, "graf1", "identified", G_TYPE_BOOLEAN,
                    FALSE, "inliers", G_TYPE_INT, 4, "matches", G_TYPE_INT, 9, "score", G_TYPE_DOUBLE, 1.5,
                    "latency-ms", G_TYPE_DOUBLE, 2.0, nullptr);
  line = line_of("textureid", "tid", s);
  EXPECT_EQ(line.at("results"), R"([{"id":"graf1","score":1.5,"identified":false,"inliers":4,"matches":9}])"_json)
      << line.dump();

  s = frame_message("prism-bowclassify", 0, 30);
  gst_structure_set(s, "latency-ms", G_TYPE_DOUBLE, 12.5, "label", G_TYPE_STRING, "vertical", "class-index", G_TYPE_INT,
                    1, "confidence", G_TYPE_DOUBLE, 0.75, nullptr);
  GValue scores = G_VALUE_INIT;  // as bowclassify makes them: an array of "class" structures
  g_value_init(&scores, GST_TYPE_ARRAY);
  const std::pair<const char*, double> classes[] = {{"horizontal", -0.5}, {"vertical", 1.25}, {"blobs", HUGE_VAL}};
  for (const auto& [label, score] : classes) {
    GValue v = G_VALUE_INIT;
    g_value_init(&v, GST_TYPE_STRUCTURE);
    g_value_take_boxed(
        &v, gst_structure_new("class", "label", G_TYPE_STRING, label, "score", G_TYPE_DOUBLE, score, nullptr));
    gst_value_array_append_and_take_value(&scores, &v);
  }
  gst_structure_take_value(s, "scores", &scores);
  line = line_of("bowclassify", "bow", s);
  EXPECT_EQ(line.at("results"), R"([{"label":"vertical","score":0.75,"class_index":1,"scores":[
                {"label":"horizontal","score":-0.5},{"label":"vertical","score":1.25},{"label":"blobs","score":null}]}])"_json)
      << line.dump();
  EXPECT_EQ(line.at("info"), R"({"latency_ms":12.5})"_json);
  EXPECT_EQ(line.at("frame"), 30);
}

// A kind the converter has no rule for still comes out (one result of its fields); other messages do not.
TEST_F(Results, OtherKindsAreKeptAndOtherMessagesAreNotResults) {
  GstStructure* s = frame_message("prism-future", 0, 1);
  gst_structure_set(s, "some-value", G_TYPE_INT, 3, "ratio", GST_TYPE_FRACTION, 30, 1, "not-finite", G_TYPE_DOUBLE,
                    std::nan(""), nullptr);
  // GStreamer refuses a string field that is not UTF-8, but not such an element name
  const Json line = line_of("identity", "caf\xe9", s);
  EXPECT_EQ(line.at("factory"), "identity");
  EXPECT_EQ(line.at("element"), "caf\ufffd");
  EXPECT_EQ(line.at("results"), R"([{"some_value":3,"ratio":"30/1","not_finite":null}])"_json) << line.dump();

  GstElement* e = gst_element_factory_make("identity", nullptr);
  for (GstMessage* m : {gst_message_new_element(GST_OBJECT(e), gst_structure_new_empty("level")),
                        gst_message_new_element(GST_OBJECT(e), gst_structure_new_empty("prism-")),
                        gst_message_new_eos(GST_OBJECT(e))}) {
    EXPECT_FALSE(results_message_is_result(m));
    EXPECT_EQ(results_json_line(m), "");
    gst_message_unref(m);
  }
  gst_object_unref(e);
}

// Runs `launch` (with @OUT@ = a file of the test's folder), returns its lines and keeps its messages of `name`.
struct ResultsRun {
  test::RunResult bus;
  std::vector<Json> lines;
};
ResultsRun run_with_results(const test::TempDir& dir, std::string launch, const std::string& name) {
  const std::string out = dir.file("results.jsonl");
  launch.replace(launch.find("@OUT@"), 5, out);
  test::RunOptions options;
  options.appsink = "";
  options.message_name = name;
  ResultsRun r{test::run_launch(launch, options), {}};
  EXPECT_EQ(r.bus.error, "") << launch;
  EXPECT_TRUE(r.bus.eos);
  r.lines = read_lines(out);
  return r;
}

constexpr char kEmd[] =
    "videotestsrc num-buffers=3 ! video/x-raw,format=GRAY8,width=160,height=120 ! emdtracker name=emd device=cpu "
    "target-rect=2,2,12,60 threshold=1 min-area=64 ";

void expect_emd_lines(const ResultsRun& r) {
  ASSERT_EQ(r.bus.messages.size(), 3u);
  ASSERT_EQ(r.lines.size(), r.bus.messages.size());
  size_t boxes = 0;
  for (size_t i = 0; i < r.lines.size(); ++i) {
    const Json& line = r.lines[i];
    const GstStructure* m = r.bus.messages[i];
    expect_common(line, m, "emd", "emdtracker");
    gboolean known = FALSE;
    gst_structure_get_boolean(m, "target-known", &known);
    EXPECT_EQ(line.at("info").at("target_known"), bool(known));
    const GstStructure* stats = nullptr;
    ASSERT_TRUE(gst_structure_get(m, "stats", GST_TYPE_STRUCTURE, &stats, nullptr));
    gint64 solved = 0;
    gst_structure_get_int64(stats, "solved", &solved);
    EXPECT_EQ(line.at("info").at("stats").at("solved"), solved);
    gst_structure_free(const_cast<GstStructure*>(stats));
    const GValue* list = gst_structure_get_value(m, "detections");
    ASSERT_EQ(line.at("results").size(), gst_value_list_get_size(list));
    for (guint k = 0; k < gst_value_list_get_size(list); ++k, ++boxes) {
      const GstStructure* d = gst_value_get_structure(gst_value_list_get_value(list, k));
      const Json& res = line.at("results")[k];
      int x, y, w, h;
      gint64 track, pixels;
      double distance;
      ASSERT_TRUE(gst_structure_get(d, "x", G_TYPE_INT, &x, "y", G_TYPE_INT, &y, "width", G_TYPE_INT, &w, "height",
                                    G_TYPE_INT, &h, "track-id", G_TYPE_INT64, &track, "pixels", G_TYPE_INT64, &pixels,
                                    "distance", G_TYPE_DOUBLE, &distance, nullptr));
      EXPECT_EQ(res.at("id"), std::to_string(track));
      EXPECT_EQ(res.at("box"), (Json{{"x", x}, {"y", y}, {"w", w}, {"h", h}}));
      EXPECT_EQ(res.at("pixels"), pixels);
      EXPECT_EQ(res.at("distance").get<double>(), distance);
    }
  }
  EXPECT_GE(boxes, 3u) << "the colour bar of the target should be found in every frame";
}

TEST_F(Results, PrismresultsWritesEmdtrackerResults) {
  const ResultsRun r =
      run_with_results(dir, std::string(kEmd) + "! prismresults location=\"@OUT@\" ! fakesink", "prism-emdtracker");
  expect_emd_lines(r);
}

// The results are read from the bus: prismresults in another branch of a tee writes them all too.
TEST_F(Results, PrismresultsInAnotherBranchWritesThemToo) {
  const ResultsRun r =
      run_with_results(dir,
                       "videotestsrc num-buffers=3 ! video/x-raw,format=GRAY8,width=160,height=120 ! tee "
                       "name=t t. ! queue ! emdtracker name=emd device=cpu target-rect=2,2,12,60 threshold=1 "
                       "min-area=64 ! fakesink t. ! queue ! prismresults location=\"@OUT@\" ! fakesink",
                       "prism-emdtracker");
  expect_emd_lines(r);
}

// A file is emptied at start unless append=true.
TEST_F(Results, AppendAddsToTheFileAndOtherwiseItIsEmptied) {
  const std::string launch = std::string(kEmd) + "! prismresults location=\"@OUT@\" ";
  EXPECT_EQ(run_with_results(dir, launch + "! fakesink", "prism-emdtracker").lines.size(), 3u);
  EXPECT_EQ(run_with_results(dir, launch + "append=true ! fakesink", "prism-emdtracker").lines.size(), 6u);
  EXPECT_EQ(run_with_results(dir, launch + "! fakesink", "prism-emdtracker").lines.size(), 3u);
}

// location=- writes to standard output: gst-launch-1.0 -q prints nothing else there.
TEST_F(Results, LocationDashWritesToStandardOutput) {
#if defined(__SANITIZE_ADDRESS__)
  // The system's gst-launch-1.0 is not instrumented: it cannot load the sanitizer build's plugin
  // (the ASan runtime must come first). The regular build runs this test.
  std::cerr << "*** SKIPPING under AddressSanitizer: gst-launch-1.0 cannot load an ASan plugin ***\n";
  GTEST_SKIP() << "gst-launch-1.0 cannot load the ASan plugin";
#endif
  std::string out;
  const std::string err = dir.file("stderr.txt");
  // a subshell: run_command adds 2>&1 to the whole command
  const int status = test::run_command(
      std::string("(gst-launch-1.0 -q ") + kEmd + "! prismresults location=- ! fakesink 2>\"" + err + "\")", out);
  ASSERT_EQ(status, 0) << out;
  std::istringstream lines(out);
  std::string text;
  int n = 0;
  while (std::getline(lines, text)) {
    const Json line = Json::parse(text);  // throws, failing the test, on anything but JSON
    EXPECT_EQ(line.at("factory"), "emdtracker");
    EXPECT_EQ(line.at("frame"), n++);
  }
  EXPECT_EQ(n, 3);
}

// A reader that has gone is a write error naming the output (EPIPE), not a death by SIGPIPE; the
// process's disposition and the thread's mask are as they were, and no SIGPIPE is left pending.
TEST_F(Results, AClosedReaderIsAnErrorNotASignal) {
  const std::string fifo = dir.file("r.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  ResultsWriter writer;
  std::string error;
  ASSERT_TRUE(writer.open(fifo, FALSE, &error)) << error;
  ASSERT_TRUE(writer.write_line("{\"a\":1}", &error)) << error;
  ::close(reader);
  struct sigaction before;
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &before), 0);
  ASSERT_EQ(before.sa_handler, SIG_DFL) << "the test needs SIGPIPE's default (fatal) disposition";
  EXPECT_FALSE(writer.write_line("{\"a\":2}", &error));  // without the block, SIGPIPE ends the test here
  EXPECT_NE(error.find("results file '" + fifo + "': cannot write: Broken pipe"), std::string::npos) << error;
  EXPECT_FALSE(writer.write_line("{\"a\":3}", &error));  // again: still an error, still no signal
  struct sigaction after;
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, SIG_DFL);
  sigset_t mask, pending;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask), 0);
  EXPECT_FALSE(sigismember(&mask, SIGPIPE));
  ASSERT_EQ(sigpending(&pending), 0);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));
}

// prismresults location=- with its standard output closed (gst-launch-1.0 ... | head -1): the
// pipeline ends with the element's error naming its property, not killed by SIGPIPE.
TEST_F(Results, PrismresultsToAClosedPipeEndsWithAnError) {
#if defined(__SANITIZE_ADDRESS__)
  std::cerr << "*** SKIPPING under AddressSanitizer: gst-launch-1.0 cannot load an ASan plugin ***\n";
  GTEST_SKIP() << "gst-launch-1.0 cannot load the ASan plugin";
#endif
  std::string errors;
  const int status = test::run_command_to_closed_pipe(
      std::string("gst-launch-1.0 -q ") + kEmd + "! prismresults location=- ! fakesink", errors);
  EXPECT_EQ(status, 1) << "141 is a death by SIGPIPE\n" << errors;
  EXPECT_NE(errors.find("prismresults: property 'location': results file 'standard output': cannot write: Broken pipe"),
            std::string::npos)
      << errors;
}

// bowclassify: one line per classified frame (interval=2: frames 0 and 2), label and score.
class ResultsBow : public test::bowclassify::BowClassify {
 protected:
  test::TempDir dir;
};

TEST_F(ResultsBow, PrismresultsWritesBowclassifyResults) {
  const ResultsRun r =
      run_with_results(dir,
                       "videotestsrc num-buffers=3 pattern=ball ! video/x-raw,format=GRAY8,width=96,height=64 "
                       "! bowclassify name=bow device=cpu async=false interval=2 model=\"" +
                           model_ + "\" ! prismresults location=\"@OUT@\" ! fakesink",
                       "prism-bowclassify");
  ASSERT_EQ(r.bus.messages.size(), 2u);
  ASSERT_EQ(r.lines.size(), 2u);
  for (size_t i = 0; i < r.lines.size(); ++i) {
    const GstStructure* m = r.bus.messages[i];
    const Json& line = r.lines[i];
    expect_common(line, m, "bow", "bowclassify");
    EXPECT_EQ(line.at("frame"), 2 * i);
    ASSERT_EQ(line.at("results").size(), 1u);
    const Json& res = line.at("results")[0];
    int index = -1;
    double confidence = -1, latency = -1;
    ASSERT_TRUE(gst_structure_get(m, "class-index", G_TYPE_INT, &index, "confidence", G_TYPE_DOUBLE, &confidence,
                                  "latency-ms", G_TYPE_DOUBLE, &latency, nullptr));
    EXPECT_EQ(res.at("label"), gst_structure_get_string(m, "label"));
    EXPECT_EQ(res.at("label"), test::bowclassify::kClasses.at(index));
    EXPECT_EQ(res.at("class_index"), index);
    EXPECT_EQ(res.at("score").get<double>(), confidence);
    EXPECT_FALSE(res.contains("box"));  // about the whole frame
    EXPECT_EQ(line.at("info").at("latency_ms").get<double>(), latency);
    // every class's score in the model's order; the label's is the largest
    const Json& scores = res.at("scores");
    const auto want = test::bowclassify::scores_of(m);
    ASSERT_EQ(scores.size(), test::bowclassify::kClasses.size()) << res.dump();
    ASSERT_EQ(want.size(), scores.size());
    for (size_t c = 0; c < scores.size(); ++c) {
      EXPECT_EQ(scores[c].at("label"), test::bowclassify::kClasses[c]);
      EXPECT_EQ(scores[c].at("score").get<double>(), want[c].second);
      EXPECT_LE(scores[c].at("score").get<double>(), scores[index].at("score").get<double>());
    }
  }
}

// textureid: box_in_scene.png shows the enrolled box: id, score, inliers and the inliers' box.
class ResultsTexture : public test::textureid::TextureId {};

TEST_F(ResultsTexture, PrismresultsWritesTextureidResults) {
  using namespace test::textureid;
  NEED_IMAGES();
  const ResultsRun r =
      run_with_results(dir,
                       "filesrc location=\"" + image_path(kScene) +
                           "\" ! pngdec ! videoconvert ! video/x-raw,format=GRAY8 ! imagefreeze "
                           "num-buffers=1 ! " +
                           element("name=tid interval=0") + " ! prismresults location=\"@OUT@\" ! fakesink",
                       "prism-textureid");
  ASSERT_EQ(r.bus.messages.size(), 1u);
  ASSERT_EQ(r.lines.size(), 1u);
  const GstStructure* m = r.bus.messages[0];
  const Json& line = r.lines[0];
  expect_common(line, m, "tid", "textureid");
  ASSERT_EQ(line.at("results").size(), 1u);
  const Json& res = line.at("results")[0];
  EXPECT_EQ(res.at("id"), "box");
  EXPECT_EQ(res.at("id"), gst_structure_get_string(m, "id"));
  EXPECT_EQ(res.at("identified"), true);
  EXPECT_EQ(res.at("inliers"), integer(m, "inliers"));
  EXPECT_EQ(res.at("matches"), integer(m, "matches"));
  EXPECT_EQ(res.at("score").get<double>(), real(m, "score"));
  EXPECT_EQ(
      res.at("box"),
      (Json{{"x", integer(m, "x")}, {"y", integer(m, "y")}, {"w", integer(m, "width")}, {"h", integer(m, "height")}}));
  // the inliers of box.png lie left of the middle of the 512x384 scene (measured: 119,181 128x101)
  EXPECT_GT(res.at("box").at("w").get<int>(), 50);
  EXPECT_LT(res.at("box").at("x").get<int>() + res.at("box").at("w").get<int>(), 300);
  EXPECT_EQ(line.at("info").at("mode"), "search");
  EXPECT_EQ(line.at("info").at("latency_ms").get<double>(), real(m, "latency-ms"));
  // where box.png lies: its homography (9 numbers, [2][2] = 1) and quad (8), as in the message
  ASSERT_EQ(res.at("homography").size(), 9u) << res.dump();
  ASSERT_EQ(res.at("quad").size(), 8u) << res.dump();
  EXPECT_EQ(res.at("homography").get<std::vector<double>>(), doubles_of(m, "homography"));
  EXPECT_EQ(res.at("quad").get<std::vector<double>>(), doubles_of(m, "quad"));
  EXPECT_EQ(res.at("homography")[8].get<double>(), 1.0);
  // its top-left corner near the inliers' box's (box.png's corner is among its features)
  EXPECT_NEAR(res.at("quad")[0].get<double>(), res.at("box").at("x").get<double>(), 40);
  EXPECT_NEAR(res.at("quad")[1].get<double>(), res.at("box").at("y").get<double>(), 40);
}

}  // namespace
}  // namespace prism
