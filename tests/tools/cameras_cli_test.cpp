// prism run with `cameras:` (README, "Many cameras"): each camera's results name it, a camera that
// fails does not end the run, an RTSP camera whose server is killed goes offline while the
// other camera goes on, and cameras added and removed through --control while the others go on
// (their counts in --control's list and --metrics). Assertions are on counts of result
// lines; waits are bounded (a run that never gets there fails at the bound), never measured.
#include <gtest/gtest.h>
#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
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
      // (without the Prism plugin: gst-launch-1.0 cannot load an AddressSanitizer build's)
      test::run_command("env -u GST_PLUGIN_PATH -u GST_PLUGIN_PATH_1_0 GST_REGISTRY_1_0='" + dir.file("registry.bin") +
                            "' gst-launch-1.0 -q videotestsrc num-buffers=" + std::to_string(frames) +
                            " pattern=" + pattern +
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
  // the end summary: each camera's state, not "1 result; no label"
  EXPECT_NE(r.output.find("(camera door): "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("(camera): "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("no label"), std::string::npos) << r.output;
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

// Every camera failing as the pipeline starts: the run ends (each branch gets EOS from another
// thread; sent from the bus loop's, the sinks' preroll on it held that thread, and the run, forever).
TEST(CamerasCli, EveryCameraFailingEndsTheRun) {
  TempDir dir;
  const std::string config =
      dir.write("cams.yaml", config_with("  - {id: a, uri: missing-a.avi}\n  - {id: b, uri: missing-b.avi}\n"));
  const auto r = test::run_prism({"run", config}, ".", {60});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prism: camera 'a' ended: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prism: camera 'b' ended: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prism: done: 0 frames"), std::string::npos) << r.output;
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
  EXPECT_NE(r.output.find("(camera two): online at the end; offline "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("camera 'one' offline"), std::string::npos) << r.output;
}

// ---- --control and --metrics (README, "Many cameras") ----------------------------------------------

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A port prism printed on its log ("prism: WHAT listening on http://127.0.0.1:PORT"), 0 until then.
int listening_port(const std::string& log, const std::string& what) {
  std::ifstream in(log);
  std::string line;
  const std::string prefix = "prism: " + what + " listening on http://127.0.0.1:";
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return std::atoi(line.c_str() + prefix.size());
  return 0;
}

int wait_for_port(const std::string& log, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (const int port = listening_port(log, what)) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

// One answer of the control API: its status and JSON body (null when none came).
struct Answer {
  int status = 0;
  Json body;
  std::string text;
};

Answer http(int port, const std::string& method, const std::string& path, const std::string& body = "") {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(30);  // an add or remove waits for the pipeline's loop (at most 15 s)
  httplib::Result r = method == "GET"      ? client.Get(path.c_str())
                      : method == "DELETE" ? client.Delete(path.c_str())
                                           : client.Post(path.c_str(), body, "application/json");
  Answer a;
  if (!r) return a;
  a.status = r->status;
  a.text = r->body;
  a.body = Json::parse(r->body, nullptr, false);
  return a;
}

// The cameras' frames by id, from GET /api/v1/cameras (empty when it did not answer).
std::map<std::string, uint64_t> frames_by_camera(int port) {
  std::map<std::string, uint64_t> out;
  const Answer a = http(port, "GET", "/api/v1/cameras");
  if (a.status != 200 || !a.body.is_object()) return out;
  for (const Json& c : a.body.value("cameras", Json::array())) out[c.value("id", "")] = c.value("frames", uint64_t(0));
  return out;
}

// Waits (at most `seconds`) until `pred` holds for the cameras' frames.
bool wait_frames(int port, const std::function<bool(const std::map<std::string, uint64_t>&)>& pred, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(frames_by_camera(port))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

uint64_t at(const std::map<std::string, uint64_t>& frames, const std::string& id) {
  const auto it = frames.find(id);
  return it == frames.end() ? 0 : it->second;
}

// The field a 4xx names ({"error": {"field"}}).
std::string field_of(const Answer& a) {
  if (!a.body.is_object() || !a.body.contains("error")) return "<no error body: " + a.text + ">";
  const Json& f = a.body["error"]["field"];
  return f.is_string() ? f.get<std::string>() : "null";
}

std::string message_of(const Answer& a) {
  return a.body.is_object() && a.body.contains("error") ? a.body["error"].value("message", "") : a.text;
}

TEST(CamerasCli, CamerasAddedAndRemovedWhileRunning) {
  if (std::string(PRISM_RTSP_SERVER_EXE).empty())
    GTEST_SKIP() << "*** SKIPPING: no prism_test_rtsp_server (libgstrtspserver-1.0-dev missing at configure) ***";
  TempDir dir;
  RtspCamera one(dir, "one"), two(dir, "two"), three(dir, "three");
  one.start();
  two.start();
  three.start();
  const std::string config = dir.write("cams.yaml", config_with("  - {id: one, uri: \"" + one.uri() +
                                                                "\"}\n  - {id: two, uri: \"" + two.uri() + "\"}\n"));
  const std::string log = dir.file("prism.log");
  const test::BackgroundPrism run =
      test::start_prism({"run", config, "--control", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}, log);
  const int control = wait_for_port(log, "control API"), metrics = wait_for_port(log, "metrics");
  ASSERT_GT(control, 0) << read_text(log);
  ASSERT_GT(metrics, 0) << read_text(log);
  EXPECT_EQ(http(control, "GET", "/live").status, 200);
  ASSERT_TRUE(wait_frames(
      control, [](const auto& f) { return at(f, "one") >= 5 && at(f, "two") >= 5; }, 60))
      << read_text(log);
  EXPECT_EQ(http(control, "GET", "/ready").status, 200);

  // Bad requests: 4xx naming the field, nothing added.
  struct Bad {
    std::string method, path, body;
    int status;
    std::string field, message;
  };
  const std::vector<Bad> bad = {
      {"POST", "/api/v1/cameras", "{not json", 400, "body", "not JSON"},
      {"POST", "/api/v1/cameras", "[1]", 400, "body", "JSON object"},
      {"POST", "/api/v1/cameras", "{\"id\": \"x\"}", 400, "uri", "'uri' is missing"},
      {"POST", "/api/v1/cameras", "{\"uri\": 5}", 400, "uri", "must be a string"},
      {"POST", "/api/v1/cameras", "{\"url\": \"rtsp://h/s\"}", 400, "url", "unknown field 'url'"},
      {"POST", "/api/v1/cameras", "{\"id\": \"x\", \"uri\": \"" + three.uri() + "\", \"reconnect\": 1}", 400,
       "reconnect", "true or false"},
      {"POST", "/api/v1/cameras", "{\"id\": \"no way\", \"uri\": \"" + three.uri() + "\"}", 400, "id",
       "invalid camera id 'no way'"},
      {"POST", "/api/v1/cameras", "{\"id\": \"x\", \"uri\": \"nosuch://h/s\"}", 400, "uri", "'nosuch://'"},
      {"POST", "/api/v1/cameras", "{\"id\": \"x\", \"uri\": \"relative.avi\"}", 400, "uri", "absolute file path"},
      {"POST", "/api/v1/cameras", "{\"id\": \"one\", \"uri\": \"" + three.uri() + "\"}", 409, "id",
       "camera 'one' exists already"},
      {"POST", "/api/v1/stream/add", "{\"value\": {\"camera_id\": \"x\"}}", 400, "value.camera_url", "missing"},
      {"DELETE", "/api/v1/cameras/nosuch", "", 404, "id", "no camera 'nosuch'"},
      {"GET", "/api/v1/cameras/nosuch", "", 404, "id", "no camera 'nosuch'"},
      {"POST", "/api/v1/stream/remove", "{}", 400, "id", "'id' is missing"},
      {"GET", "/api/v1/nothing", "", 404, "path", "no route"},
  };
  for (const Bad& b : bad) {
    const Answer a = http(control, b.method, b.path, b.body);
    EXPECT_EQ(a.status, b.status) << b.method << " " << b.path << " " << b.body << ": " << a.text;
    EXPECT_EQ(field_of(a), b.field) << b.method << " " << b.path << " " << b.body << ": " << a.text;
    EXPECT_NE(message_of(a).find(b.message), std::string::npos) << b.body << ": " << a.text;
  }
  EXPECT_EQ(frames_by_camera(control).size(), 2u);

  // Add a camera: its frames come, the others' go on.
  const Answer added =
      http(control, "POST", "/api/v1/cameras", "{\"id\": \"three\", \"uri\": \"" + three.uri() + "\"}");
  ASSERT_EQ(added.status, 201) << added.text;
  EXPECT_EQ(added.body.value("id", ""), "three") << added.text;
  EXPECT_EQ(added.body.value("uri", ""), three.uri()) << added.text;
  const auto at_add = frames_by_camera(control);
  ASSERT_TRUE(wait_frames(
      control,
      [&](const auto& f) {
        return at(f, "three") >= 10 && at(f, "one") >= at(at_add, "one") + 10 && at(f, "two") >= at(at_add, "two") + 10;
      },
      60))
      << read_text(log);
  // a second camera by the DeepStream body, its id chosen: the next free camN
  const Answer deepstream =
      http(control, "POST", "/api/v1/stream/add",
           "{\"key\": \"sensor\", \"value\": {\"camera_url\": \"" + one.uri() + "\", \"change\": \"camera_add\"}}");
  ASSERT_EQ(deepstream.status, 201) << deepstream.text;
  const std::string chosen = deepstream.body.value("id", "");
  EXPECT_EQ(chosen, "cam3") << deepstream.text;

  const Answer scrape = http(metrics, "GET", "/metrics");
  ASSERT_EQ(scrape.status, 200);
  for (const char* line :
       {"prism_camera_frames_total{camera=\"three\"} ", "prism_camera_online{camera=\"three\"} 1",
        "prism_camera_analysed_frames_total{camera=\"three\"} ", "prism_camera_reconnects_total{camera=\"one\"} 0",
        "prism_camera_fps{camera=\"two\"} ", "prism_camera_dropped_frames_total{camera=\"one\"} ",
        // three's source was played on rtspsrc's "open" progress, not when its 5 s wait ran out
        "prism_camera_open_waits_total{camera=\"three\"} 0\n",
        "prism_camera_info{camera=\"three\",uri=\"rtspt://127.0.0.1:"})
    EXPECT_NE(scrape.text.find(line), std::string::npos) << line << "\n" << scrape.text;

  // Remove two (DELETE) and the chosen one (DeepStream's remove): gone from the list and the
  // metrics, the others go on.
  const Answer removed = http(control, "DELETE", "/api/v1/cameras/two");
  ASSERT_EQ(removed.status, 200) << removed.text;
  EXPECT_EQ(removed.body.value("removed", ""), "two");
  const Answer removed2 = http(control, "POST", "/api/v1/stream/remove",
                               "{\"key\": \"sensor\", \"value\": {\"camera_id\": \"" + chosen + "\"}}");
  ASSERT_EQ(removed2.status, 200) << removed2.text;
  const auto at_remove = frames_by_camera(control);
  EXPECT_EQ(at_remove.count("two"), 0u);
  EXPECT_EQ(at_remove.count(chosen), 0u);
  EXPECT_EQ(http(control, "DELETE", "/api/v1/cameras/two").status, 404);
  ASSERT_TRUE(wait_frames(
      control,
      [&](const auto& f) {
        return at(f, "one") >= at(at_remove, "one") + 10 && at(f, "three") >= at(at_remove, "three") + 10;
      },
      60))
      << read_text(log);
  const std::string after = http(metrics, "GET", "/metrics").text;
  EXPECT_EQ(after.find("camera=\"two\""), std::string::npos) << after;
  EXPECT_NE(after.find("prism_camera_frames_total{camera=\"three\"} "), std::string::npos) << after;
  EXPECT_NE(after.find("prism_cameras 2\n"), std::string::npos) << after;

  // A removed camera's id (and its elements' names) may be used again.
  const Answer again = http(control, "POST", "/api/v1/cameras", "{\"id\": \"two\", \"uri\": \"" + two.uri() + "\"}");
  ASSERT_EQ(again.status, 201) << again.text;
  EXPECT_TRUE(wait_frames(
      control, [](const auto& f) { return at(f, "two") >= 5; }, 60))
      << read_text(log);

  kill(run.pid, SIGINT);
  const auto r = test::wait_prism(run, 30);
  EXPECT_EQ(r.exit_code, 130) << r.output;
  EXPECT_NE(r.output.find("prism: camera 'three' added"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prism: camera 'two' removed"), std::string::npos) << r.output;
}

// An RTSP camera whose server never answers (a socket that listens and says nothing): rtspsrc
// posts no "open" progress, so its source is played when the wait for it runs out, and the
// metrics count it; the run goes on and ends on Ctrl-C.
TEST(CamerasCli, AnRtspSourceThatNeverOpensIsPlayedWhenItsWaitRunsOut) {
  if (std::string(PRISM_RTSP_SERVER_EXE).empty())
    GTEST_SKIP() << "*** SKIPPING: no prism_test_rtsp_server (libgstrtspserver-1.0-dev missing at configure) ***";
  TempDir dir;
  RtspCamera one(dir, "one");
  one.start();
  const int mute = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(mute, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(mute, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(mute, 4), 0);
  ASSERT_EQ(getsockname(mute, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string mute_uri = "rtspt://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/cam";
  const std::string config = dir.write("cams.yaml", config_with("  - {id: one, uri: \"" + one.uri() + "\"}\n"));
  const std::string log = dir.file("prism.log");
  const test::BackgroundPrism run =
      test::start_prism({"run", config, "--control", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}, log);
  const int control = wait_for_port(log, "control API"), metrics = wait_for_port(log, "metrics");
  ASSERT_GT(control, 0) << read_text(log);
  ASSERT_GT(metrics, 0) << read_text(log);
  ASSERT_TRUE(wait_frames(
      control, [](const auto& f) { return at(f, "one") >= 5; }, 60))
      << read_text(log);
  const Answer added = http(control, "POST", "/api/v1/cameras", "{\"id\": \"mute\", \"uri\": \"" + mute_uri + "\"}");
  ASSERT_EQ(added.status, 201) << added.text;
  auto open_waits = [&] {
    const std::string text = http(metrics, "GET", "/metrics").text;
    const std::string key = "prism_camera_open_waits_total{camera=\"mute\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + key.size());
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (open_waits() < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(open_waits(), 1) << read_text(log);
  const auto at_wait = frames_by_camera(control);
  EXPECT_TRUE(wait_frames(
      control, [&](const auto& f) { return at(f, "one") >= at(at_wait, "one") + 10; }, 60))
      << "camera one stopped";
  kill(run.pid, SIGINT);
  const auto r = test::wait_prism(run, 30);
  EXPECT_EQ(r.exit_code, 130) << r.output;
  close(mute);
}

// A config without cameras: the control API says cameras cannot be added; --control and --metrics
// on one address share a server; a second run on that address is refused, naming it.
TEST(CamerasCli, ControlOfAConfigWithoutCameras) {
  TempDir dir;
  const std::string config =
      dir.write("live.yaml",
                "elements:\n"
                "  src: {element: videotestsrc, properties: {is-live: true}}\n"
                "  sink: {element: fakesink, properties: {sync: false}}\n"
                "links: [[src, {caps: \"video/x-raw,width=64,height=48,framerate=30/1\"}, sink]]\n");
  const std::string log = dir.file("prism.log");
  const std::string address = "127.0.0.1:" + std::to_string(test::free_port());
  const test::BackgroundPrism run = test::start_prism({"run", config, "--control", address, "--metrics", address}, log);
  const int port = wait_for_port(log, "control API");
  ASSERT_GT(port, 0) << read_text(log);
  EXPECT_EQ(listening_port(log, "metrics"), 0) << "one server for both";
  const Answer list = http(port, "GET", "/api/v1/cameras");
  EXPECT_EQ(list.status, 200) << list.text;
  EXPECT_EQ(list.body.value("cameras", Json()).size(), 0u) << list.text;
  Answer add;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {  // 503 until the pipeline plays
    add = http(port, "POST", "/api/v1/cameras", "{\"uri\": \"rtsp://127.0.0.1:1/x\"}");
  } while (add.status == 503 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(add.status, 409) << add.text;
  EXPECT_NE(message_of(add).find("no 'cameras:' and 'per-camera:'"), std::string::npos) << add.text;
  const Answer scrape = http(port, "GET", "/metrics");
  EXPECT_EQ(scrape.status, 200);
  EXPECT_NE(scrape.text.find("prism_cameras 0\n"), std::string::npos) << scrape.text;
  EXPECT_NE(scrape.text.find("prism_http_requests_total{route=\"add\",code=\"409\"} 1"), std::string::npos)
      << scrape.text;

  const auto second = test::run_prism({"run", config, "--control", address}, ".", {30});
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_NE(second.output.find("--control: cannot listen on " + address + ": the port is in use"), std::string::npos)
      << second.output;

  kill(run.pid, SIGINT);
  const auto r = test::wait_prism(run, 30);
  EXPECT_EQ(r.exit_code, 130) << r.output;
}

}  // namespace
}  // namespace prism
