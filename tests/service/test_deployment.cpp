// The sharded deployment as docs/SERVICE.md sets it up (issue 40.7): its systemd units' ExecStart
// lines run as written, with loopback for the hosts and a folder of the test for /srv and /etc
// (and `--device cpu` for `cuda:%i` on a machine without a GPU), against a real redis-server. A
// worker started before the shard count exists waits for it; Redis emptied under the running
// deployment (FLUSHALL: a restart without its data) costs nobody a restart, and no enrolled
// product is lost.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "ppm.h"
#include "prism_test.h"
#include "redis.h"
#include "redis_server.h"
#include "shard_fixture.h"
#include "test_env.h"
#include "texture_cases.h"

namespace prism::service {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The ExecStart= lines of docs/SERVICE.md, in order.
std::vector<std::string> documented_exec_starts() {
  std::istringstream doc(read_file(std::string(PRISM_SOURCE_DIR_STR) + "/docs/SERVICE.md"));
  std::vector<std::string> out;
  for (std::string line; std::getline(doc, line);)
    if (line.rfind("ExecStart=", 0) == 0) out.push_back(line.substr(10));
  return out;
}

// Waits up to `seconds` for `log` to contain `text`.
bool log_says(const std::string& log, const std::string& text, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (read_file(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST(Deployment, TheDocumentedUnitsStartAndOutliveAnEmptiedRedis) {
  PRISM_NEED_REDIS();
  test::TempDir dir;
  test::RedisServer server(dir.path() / "redis");
  server.start();
  const std::vector<std::string> units = documented_exec_starts();
  ASSERT_EQ(units.size(), 2u) << "docs/SERVICE.md: one front unit and one shard unit";
  ASSERT_NE(units[0].find(" texture serve "), std::string::npos) << units[0];
  ASSERT_NE(units[1].find(" texture shard "), std::string::npos) << units[1];
  std::smatch m;
  ASSERT_TRUE(std::regex_search(units[1], m, std::regex(" --shards ([0-9]+) "))) << units[1];
  const int shards = std::stoi(m[1]);
  ASSERT_TRUE(units[0].find(" --shards " + std::to_string(shards) + " ") != std::string::npos) << units[0];
  const std::string key = "deployment-test-key-0123";
  std::ofstream(dir.file("keys")) << key << " write test\n";
  auto as_here = [&](std::string line) {
    line = replace_all(line, "/usr/local/bin/prism", PRISM_EXE);
    line = replace_all(line, "redis://10.0.0.5:6379", server.url());
    line = replace_all(line, "0.0.0.0:8080", "127.0.0.1:0");
    line = replace_all(line, "/etc/prism/keys", dir.file("keys"));
    line = replace_all(line, "/srv/prism", dir.path().string());
    return replace_all(line, "cuda:%i", "cpu");
  };

  // A worker started before anyone has set the count waits for it (and says so) instead of exiting:
  // shard 0's unit without its --shards, stopped before the units start (it made no group yet).
  const std::string early_log = dir.file("early.txt");
  {
    const std::string line = replace_all(as_here(units[1]), "%i", "0");
    test::ChildProcess early(words(replace_all(line, " --shards " + std::to_string(shards) + " ", " ")), early_log);
    ASSERT_TRUE(log_says(early_log, "--shards N", 60)) << read_file(early_log);
    EXPECT_NE(read_file(early_log).find("waiting for it to be set"), std::string::npos) << read_file(early_log);
    std::this_thread::sleep_for(1s);
    ASSERT_TRUE(early.running()) << read_file(early_log);
    early.signal(SIGTERM);
    EXPECT_EQ(early.wait(30), 0) << read_file(early_log);
  }

  // The units, as written.
  std::vector<std::unique_ptr<test::ChildProcess>> workers;
  for (int k = 0; k < shards; ++k)
    workers.push_back(
        std::make_unique<test::ChildProcess>(words(replace_all(as_here(units[1]), "%i", std::to_string(k))),
                                             dir.file("shard" + std::to_string(k) + ".txt")));
  const std::string front_log = dir.file("front.txt");
  test::ChildProcess front(words(as_here(units[0])), front_log);
  ASSERT_TRUE(log_says(front_log, "listening on", 60)) << read_file(front_log);
  const std::string said = read_file(front_log);
  ASSERT_TRUE(std::regex_search(said, m, std::regex("listening on http://127\\.0\\.0\\.1:([0-9]+)"))) << said;
  httplib::Client c("127.0.0.1", std::stoi(m[1]));
  c.set_read_timeout(120s);
  const httplib::Headers auth = {{"X-API-Key", key}};
  std::string health;  // the last /healthz answer
  auto healthy_within = [&](int seconds) {
    for (int i = 0; i < seconds * 10; ++i) {
      const httplib::Result r = c.Get("/healthz", auth);
      health = r ? r->body : httplib::to_string(r.error());
      if (r && r->status == 200) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  auto logs = [&] {
    std::string all = health + "\n" + read_file(front_log);
    for (int k = 0; k < shards; ++k) all += read_file(dir.file("shard" + std::to_string(k) + ".txt"));
    return all;
  };
  ASSERT_TRUE(healthy_within(60)) << logs();

  std::mt19937 rng(7);
  std::vector<std::string> images;
  for (int i = 0; i < 2 * shards; ++i) images.push_back(test::pgm_bytes(test::random_texture(rng)));
  auto enrol = [&](int i) {
    const std::string path = "/v1/products/p" + std::to_string(i) + "?deadline_ms=60000";
    const httplib::Result r = c.Post(path, auth, images[size_t(i)], "image/x-portable-graymap");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 201) << r->body;
  };
  auto identifies = [&](int i) {
    const httplib::Result r =
        c.Post("/v1/search?deadline_ms=60000", auth, images[size_t(i)], "image/x-portable-graymap");
    if (!r || r->status != 200) return std::string(r ? r->body : httplib::to_string(r.error()));
    return json::parse(r->body).value("id", std::string("(none)"));
  };
  for (int i = 0; i < shards; ++i) enrol(i);
  for (int i = 0; i < shards; ++i) EXPECT_EQ(identifies(i), "p" + std::to_string(i));

  // Redis empties under the running deployment: the workers set the count again and carry on.
  {
    Redis redis(server.url());
    ASSERT_EQ(redis.command({"FLUSHALL"}).str, "OK");
  }
  ASSERT_TRUE(healthy_within(60)) << logs();
  for (int i = shards; i < 2 * shards; ++i) enrol(i);
  for (int i = 0; i < 2 * shards; ++i) EXPECT_EQ(identifies(i), "p" + std::to_string(i)) << "product " << i;
  {
    Redis redis(server.url());
    EXPECT_EQ(redis.command({"GET", "prism:shards"}).str, std::to_string(shards));
  }
  EXPECT_TRUE(front.running()) << read_file(front_log);
  for (int k = 0; k < shards; ++k)
    EXPECT_TRUE(workers[size_t(k)]->running()) << read_file(dir.file("shard" + std::to_string(k) + ".txt"));
}

}  // namespace
}  // namespace prism::service
