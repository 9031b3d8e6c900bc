// prism run with `cameras:` (README, "Many cameras"): each camera's results name it, a camera that
// fails does not end the run, and an RTSP camera whose server is killed goes offline while the
// other camera goes on. Assertions are on counts of result
// lines; waits are bounded (a run that never gets there fails at the bound), never measured.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_support.h"
#include "process.h"
#include "redis_server.h"  // ChildProcess
#include "test_env.h"

namespace prism {
namespace {

using Json = nlohmann::json;
using test::TempDir;

// An MJPEG AVI of `frames` 160x120 frames at 15 fps, made by gst-launch-1.0.
std::string make_video(const TempDir& dir, const std::string& name, int frames, const std::string& pattern) {
  const std::string path = dir.file(name);
  std::string output;
  const int rc =
      test::run_command("gst-launch-1.0 -q videotestsrc num-buffers=" + std::to_string(frames) + " pattern=" + pattern +
                            " ! video/x-raw,width=160,height=120,framerate=15/1 ! jpegenc ! avimux ! "
                            "filesink location='" +
                            path + "'",
                        output);
  EXPECT_EQ(rc, 0) << output;
  return path;
}

// The per-camera chain of every test: emdtracker on the CPU, one result line per frame.
std::string config_with(const std::string& cameras) {
  return "cameras:\n" + cameras +
         "per-camera:\n"
         "  elements:\n"
         "    conv: {element: videoconvert}\n"
         "    track: {element: emdtracker, properties: {device: cpu, target-rect: \"2,2,12,60\", threshold: 1,"
         " min-area: 64}}\n"
         "    sink: {element: fakesink, properties: {sync: false}}\n"
         "  links:\n"
         "    - [source, conv, {caps: \"video/x-raw,format=GRAY8\"}, track, sink]\n";
}

std::vector<Json> read_lines(const std::string& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty()) continue;
    lines.push_back(Json::parse(text, nullptr, false));
  }
  return lines;
}

size_t count(const std::vector<Json>& lines, const std::function<bool(const Json&)>& pred) {
  size_t n = 0;
  for (const Json& line : lines) n += line.is_object() && pred(line);
  return n;
}

bool result_of(const Json& line, const std::string& camera) {
  return line.value("factory", "") == "emdtracker" && line.value("camera", "") == camera;
}

bool state_of(const Json& line, const std::string& camera, const std::string& state) {
  return line.value("factory", "") == "camera" && line.value("camera", "") == camera &&
         line["info"].value("state", "") == state;
}

TEST(CamerasCli, FileCamerasNameTheirResults) {
  TempDir dir;
  const std::string a = make_video(dir, "a.avi", 12, "ball");
  const std::string b = make_video(dir, "b.avi", 7, "snow");
  const std::string config =
      dir.write("cams.yaml", config_with("  - {id: door, uri: a.avi}\n  - {id: yard, uri: \"file://" + b + "\"}\n"));
  const auto r = test::run_prism({"run", config, "--results", dir.file("r.jsonl")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<Json> lines = read_lines(dir.file("r.jsonl"));
  EXPECT_EQ(count(lines, [](const Json& l) { return result_of(l, "door"); }), 12u) << r.output;
  EXPECT_EQ(count(lines, [](const Json& l) { return result_of(l, "yard"); }), 7u) << r.output;
  for (const Json& line : lines) {
    ASSERT_TRUE(line.is_object());
    if (line.value("factory", "") != "emdtracker") continue;
    const std::string camera = line.value("camera", "");
    EXPECT_EQ(line.value("element", ""), camera + "-track");
    EXPECT_EQ(line.value("camera_uri", ""), "file://" + (camera == "door" ? a : b));
    EXPECT_FALSE(line["info"].contains("camera")) << line;  // the line's own field, not info
  }
  // each camera went online once, and the progress line names both
  EXPECT_EQ(count(lines, [](const Json& l) { return state_of(l, "door", "online"); }), 1u);
  EXPECT_EQ(count(lines, [](const Json& l) { return state_of(l, "yard", "online"); }), 1u);
  EXPECT_NE(r.output.find("; door 12 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", yard 7 "), std::string::npos) << r.output;
}

// A camera whose file is missing fails as the pipeline starts: it ends, the other runs to its end.
TEST(CamerasCli, AFailingCameraDoesNotEndTheRun) {
  TempDir dir;
  make_video(dir, "a.avi", 9, "ball");
  const std::string config =
      dir.write("cams.yaml", config_with("  - {id: good, uri: a.avi}\n  - {id: gone, uri: missing.avi}\n"));
  const auto r = test::run_prism({"run", config, "--results", dir.file("r.jsonl")}, ".", {60});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<Json> lines = read_lines(dir.file("r.jsonl"));
  EXPECT_EQ(count(lines, [](const Json& l) { return result_of(l, "good"); }), 9u) << r.output;
  EXPECT_EQ(count(lines, [](const Json& l) { return result_of(l, "gone"); }), 0u);
  EXPECT_EQ(count(lines, [](const Json& l) { return state_of(l, "gone", "ended"); }), 1u) << r.output;
  EXPECT_NE(r.output.find("prism: camera 'gone' ended: "), std::string::npos) << r.output;
}

// An RTSP server on loopback (prism_test_rtsp_server): started, killed, started again on its port.
class RtspCamera {
 public:
  RtspCamera(const TempDir& dir, const std::string& name) : log_(dir.file(name + ".log")) {}
  void start(int port = 0) {
    std::remove(log_.c_str());
    child_ = std::make_unique<test::ChildProcess>(std::vector<std::string>{PRISM_RTSP_SERVER_EXE, std::to_string(port)},
                                                  log_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(log_);
      std::string word;
      if (in >> word && word == "ready" && in >> port_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "the RTSP server did not start; its log: " << log_;
  }
  void kill() { child_.reset(); }  // SIGKILL, reaped
  std::string uri() const { return "rtspt://127.0.0.1:" + std::to_string(port_) + "/cam"; }
  int port() const { return port_; }

 private:
  std::string log_;
  int port_ = 0;
  std::unique_ptr<test::ChildProcess> child_;
};

// Waits (at most `seconds`) until `pred` holds for the lines of `path`.
bool wait_for(const std::string& path, const std::function<bool(const std::vector<Json>&)>& pred, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(read_lines(path))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(CamerasCli, RtspCameraDropsWhileTheOtherGoesOn) {
  if (std::string(PRISM_RTSP_SERVER_EXE).empty())
    GTEST_SKIP() << "*** SKIPPING: no prism_test_rtsp_server (libgstrtspserver-1.0-dev missing at configure) ***";
  TempDir dir;
  RtspCamera one(dir, "one"), two(dir, "two");
  one.start();
  two.start();
  const std::string results = dir.file("r.jsonl");
  const std::string config = dir.write("cams.yaml", config_with("  - {id: one, uri: \"" + one.uri() +
                                                                "\"}\n  - {id: two, uri: \"" + two.uri() + "\"}\n"));
  const test::BackgroundPrism run = test::start_prism({"run", config, "--results", results}, dir.file("prism.log"));
  auto frames = [](const std::string& camera) { return [camera](const Json& l) { return result_of(l, camera); }; };
  ASSERT_TRUE(wait_for(
      results, [&](const auto& l) { return count(l, frames("two")) >= 10; }, 60));

  two.kill();
  ASSERT_TRUE(wait_for(
      results, [](const auto& l) { return count(l, [](const Json& x) { return state_of(x, "two", "offline"); }) >= 1; },
      60));
  const std::vector<Json> at_offline = read_lines(results);
  const size_t one_at_offline = count(at_offline, frames("one"));
  // the other camera goes on while this one is away
  EXPECT_TRUE(wait_for(
      results, [&](const auto& l) { return count(l, frames("one")) >= one_at_offline + 10; }, 60));

  // Its server back on the same port: the camera rejoins (an "online" line after a reconnect) and
  // its frames resume.
  const size_t two_at_offline = count(read_lines(results), frames("two"));
  two.start(two.port());
  EXPECT_TRUE(wait_for(
      results,
      [](const auto& l) {
        return count(l, [](const Json& x) {
                 return state_of(x, "two", "online") && x["info"].value("reconnects", 0) >= 1;
               }) >= 1;
      },
      60))
      << "camera two did not come back";
  EXPECT_TRUE(wait_for(
      results, [&](const auto& l) { return count(l, frames("two")) >= two_at_offline + 10; }, 60));
  kill(run.pid, SIGINT);
  const auto r = test::wait_prism(run, 30);
  EXPECT_EQ(r.exit_code, 130) << r.output;
  EXPECT_NE(r.output.find("prism: camera 'two' offline: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("camera 'one' offline"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace prism
