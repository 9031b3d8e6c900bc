// The sharded deployment as docs/SERVICE.md sets it up: the systemd units of deploy/systemd (their
// ExecStart and EnvironmentFile lines) run as written, against a redis-server given the ACL users of
// deploy/redis/prism.conf, with loopback for the hosts and a folder of the test for /srv and /etc
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
#include "process.h"
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

// A redis-server given deploy/redis/prism.conf's ACL lines (`user NAME ... >NAME-PASSWORD ...`), each
// user's password "NAME-secret-0123"; the test logs in as the documented admin.
std::string password_of(const std::string& user) { return user + "-secret-0123"; }
std::unique_ptr<test::RedisServer> documented_redis(const std::filesystem::path& dir) {
  const std::vector<std::string> users = test::source_lines("deploy/redis/prism.conf", "user ");
  EXPECT_GE(users.size(), 4u) << "deploy/redis/prism.conf: the ACL lines (default, prism-front, prism-worker, admin)";
  std::vector<std::string> config;
  for (const std::string& line : users) {
    config.push_back("--user");
    for (std::string w : words(line)) {
      if (w.size() > 10 && w[0] == '>' && w.compare(w.size() - 9, 9, "-PASSWORD") == 0)
        w = ">" + password_of(words(line)[0]);
      config.push_back(w);
    }
  }
  return std::make_unique<test::RedisServer>(dir, config, "admin", password_of("admin"));
}

// The URL a documented unit's user logs in with, on `server`: its password in the URL.
std::string url_as(const test::RedisServer& server, const std::string& user) {
  return "redis://" + user + ":" + password_of(user) + "@127.0.0.1:" + std::to_string(server.port());
}

// The one line of a unit file that starts with `key` (without it), "" (and a failure) unless there
// is exactly one.
std::string unit_line(const std::string& unit, const std::string& key) {
  const std::vector<std::string> lines = test::source_lines(unit, key);
  EXPECT_EQ(lines.size(), 1u) << unit << ": one " << key << " line";
  return lines.size() == 1 ? lines[0] : "";
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
  const std::unique_ptr<test::RedisServer> redis = documented_redis(dir.path() / "redis");
  test::RedisServer& server = *redis;
  const std::vector<std::string> units = {unit_line("deploy/systemd/prism-front.service", "ExecStart="),
                                          unit_line("deploy/systemd/prism-shard@.service", "ExecStart=")};
  ASSERT_NE(units[0].find(" texture serve "), std::string::npos) << units[0];
  ASSERT_NE(units[1].find(" texture shard "), std::string::npos) << units[1];
  std::smatch m;
  ASSERT_TRUE(std::regex_search(units[1], m, std::regex(" --shards ([0-9]+) "))) << units[1];
  const int shards = std::stoi(m[1]);
  ASSERT_TRUE(units[0].find(" --shards " + std::to_string(shards) + " ") != std::string::npos) << units[0];
  const std::string key = "deployment-test-key-0123";
  std::ofstream(dir.file("keys")) << key << " write test\n";
  // The units' EnvironmentFile: PRISM_REDIS_PASSWORD for their user (redis://USER@...).
  EXPECT_NE(unit_line("deploy/systemd/prism-front.service", "EnvironmentFile="), "");
  EXPECT_NE(unit_line("deploy/systemd/prism-shard@.service", "EnvironmentFile="), "");
  auto env_of = [&](const std::string& unit) {
    std::smatch user;
    EXPECT_TRUE(std::regex_search(unit, user, std::regex("--redis redis://([a-z-]+)@"))) << unit;
    return std::vector<std::string>{"PRISM_REDIS_PASSWORD=" + password_of(user[1])};
  };
  auto as_here = [&](std::string line) {
    line = replace_all(line, "/usr/local/bin/prism", PRISM_EXE);
    line = replace_all(line, "@10.0.0.5:6379", "@127.0.0.1:" + std::to_string(server.port()));
    line = replace_all(line, "0.0.0.0:8080", "127.0.0.1:0");
    line = replace_all(line, "%d/keys", dir.file("keys"));  // %d: LoadCredential's folder
    line = replace_all(line, "/srv/prism", dir.path().string());
    return replace_all(line, "cuda:%i", "cpu");
  };

  // A worker started before anyone has set the count waits for it (and says so) instead of exiting:
  // shard 0's unit without its --shards, stopped before the units start (it made no group yet).
  const std::string early_log = dir.file("early.txt");
  {
    const std::string line = replace_all(as_here(units[1]), "%i", "0");
    test::ChildProcess early(words(replace_all(line, " --shards " + std::to_string(shards) + " ", " ")), early_log,
                             env_of(units[1]));
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
                                             dir.file("shard" + std::to_string(k) + ".txt"), env_of(units[1])));
  const std::string front_log = dir.file("front.txt");
  test::ChildProcess front(words(as_here(units[0])), front_log, env_of(units[0]));
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
  // No log shows a password.
  EXPECT_EQ(logs().find("-secret-0123"), std::string::npos) << logs();
}

// docs/SERVICE.md shows the shipped files it explains as they are: the front's unit whole, the
// ACL users and the Sentinel lines (the tests run the files, not the docs).
TEST(Deployment, TheDocsShowTheShippedFilesAsTheyAre) {
  const std::string doc = read_file(std::string(PRISM_SOURCE_DIR_STR) + "/docs/SERVICE.md");
  EXPECT_NE(doc.find("```ini\n" + read_file(std::string(PRISM_SOURCE_DIR_STR) + "/deploy/systemd/prism-front.service") +
                     "```"),
            std::string::npos)
      << "docs/SERVICE.md: the ini block of deploy/systemd/prism-front.service differs from the file";
  EXPECT_EQ(test::source_lines("docs/SERVICE.md", "user "), test::source_lines("deploy/redis/prism.conf", "user "))
      << "docs/SERVICE.md and deploy/redis/prism.conf: the ACL users differ";
  EXPECT_EQ(test::source_lines("docs/SERVICE.md", "  sentinel "),
            test::source_lines("deploy/redis/sentinel.conf", "sentinel "))
      << "docs/SERVICE.md and deploy/redis/sentinel.conf: the sentinel lines differ";
  const std::vector<std::string> dropin =
      test::source_lines("deploy/systemd/sentinel/prism-front.service.d/sentinel.conf", "ExecStart=");
  ASSERT_EQ(dropin.size(), 2u) << "the front's Sentinel drop-in: ExecStart= (empty) and the command";
  EXPECT_EQ(test::source_lines("docs/SERVICE.md", "  ExecStart="), std::vector<std::string>{dropin[1]})
      << "docs/SERVICE.md: the front's Sentinel command line differs from its drop-in's";
}

// Sentinel reconfigures each Redis with CONFIG REWRITE, which rewrites redis.conf alone. With
// deploy/redis/prism.conf's lines in redis.conf itself (as docs/SERVICE.md says), a rewritten
// server starts again and its users log in; with them in an included file (what an earlier draft
// said), the rewrite wrote the users into redis.conf a second time and Redis 7.0 refused to start.
TEST(Deployment, TheShippedRedisLinesSurviveSentinelsConfigRewrite) {
  PRISM_NEED_REDIS();
  test::TempDir dir;
  std::string lines;
  for (const std::string& prefix : {"user ", "masteruser ", "masterauth "})
    for (std::string line : test::source_lines("deploy/redis/prism.conf", prefix)) {
      std::string user = prefix == "user " ? words(line)[0] : "prism-replica";
      for (const std::string w : words(line))
        if (w.size() > 9 && w.compare(w.size() - 9, 9, "-PASSWORD") == 0)
          line = replace_all(line, w, (w[0] == '>' ? ">" : "") + password_of(user));
      lines += prefix + line + "\n";
    }
  ASSERT_NE(lines.find("user prism-front on >" + password_of("prism-front")), std::string::npos) << lines;
  // Starts redis-server on `conf`, rewrites it, stops it, starts it again: "" when the second start
  // answers the admin's PING, else what went wrong.
  auto rewrite_and_restart = [&](const std::string& name, const std::string& conf_text) -> std::string {
    const std::filesystem::path d = dir.path() / name;
    std::filesystem::create_directories(d);
    const int port = test::free_port();
    std::ofstream((d / "redis.conf").string())
        << "port " << port << "\nbind 127.0.0.1\ndir " << d.string() << "\nsave \"\"\n"
        << conf_text;
    const std::string url = "redis://admin:" + password_of("admin") + "@127.0.0.1:" + std::to_string(port);
    auto ping = [&] {
      try {
        Redis r(url, Redis::ms(500));
        return r.command({"PING"}).str == "PONG";
      } catch (const std::exception&) {
        return false;
      }
    };
    const std::string log = (d / "log.txt").string();
    {
      test::ChildProcess server({test::redis_server_path(), (d / "redis.conf").string()}, log);
      bool up = false;
      for (int i = 0; i < 100 && !(up = ping()); ++i) std::this_thread::sleep_for(100ms);
      if (!up) return "the first start: " + read_file(log);
      Redis r(url);
      const Reply rewrite = r.command({"CONFIG", "REWRITE"});
      if (rewrite.str != "OK") return "CONFIG REWRITE: " + rewrite.str;
      server.signal(SIGTERM);
      if (server.wait(20) != 0) return "the first stop: " + read_file(log);
    }
    test::ChildProcess again({test::redis_server_path(), (d / "redis.conf").string()}, log);
    bool up = false;
    for (int i = 0; i < 100 && !(up = ping()) && again.running(); ++i) std::this_thread::sleep_for(100ms);
    if (!up) return "after the rewrite: " + read_file(log);
    Redis front("redis://prism-front:" + password_of("prism-front") + "@127.0.0.1:" + std::to_string(port));
    const Reply pong = front.command({"PING"});
    return pong.str == "PONG" ? "" : "prism-front after the rewrite: " + pong.str;
  };
  EXPECT_EQ(rewrite_and_restart("in-redis-conf", lines), "");
  std::ofstream(dir.file("prism.conf")) << lines;
  const std::string included = rewrite_and_restart("included", "include " + dir.file("prism.conf") + "\n");
  EXPECT_NE(included.find("Duplicate user"), std::string::npos)
      << "the included file's users survived the rewrite: " << included;
}

// Redis was a back door: whoever reached it could add a delete to a shard's writes
// stream. With deploy/redis/prism.conf's ACL lines a client without a password can do nothing, a front
// cannot read or acknowledge the streams (nor delete or script), a worker cannot add requests, and
// neither reaches keys outside prism:* or administrative commands. A wrong password is named at
// the first command, and no message shows a password.
TEST(Deployment, TheDocumentedAclUsersMayDoTheirPartOnly) {
  PRISM_NEED_REDIS();
  test::TempDir dir;
  const std::unique_ptr<test::RedisServer> server = documented_redis(dir.path() / "redis");
  const std::string plain = "redis://127.0.0.1:" + std::to_string(server->port());
  const std::string writes = "prism:shard:0:writes";
  auto refused = [](Redis& r, const std::vector<std::string>& argv) {
    const Reply reply = r.command(argv);
    return reply.error() ? reply.error_code() : "accepted: " + reply.str;
  };
  {
    Redis anyone(plain);
    EXPECT_EQ(refused(anyone, {"XADD", writes, "*", "op", "delete", "id", "p1"}), "NOAUTH");
    EXPECT_EQ(refused(anyone, {"GET", "prism:shards"}), "NOAUTH");
  }
  {
    Redis front(url_as(*server, "prism-front"));
    EXPECT_EQ(front.command({"XADD", writes, "*", "op", "stats"}).type, Reply::Type::kString);
    EXPECT_EQ(front.command({"SET", "prism:shards", "1", "NX"}).str, "OK");
    EXPECT_TRUE(front.command({"BLMOVE", "prism:reply:x", "prism:reply:x:taken", "LEFT", "RIGHT", "0.1"}).nil());
    EXPECT_TRUE(front.command({"LINDEX", "prism:reply:x:taken", "0"}).nil());
    EXPECT_EQ(front.command({"EXPIRE", "prism:reply:x:taken", "60"}).integer, 0);
    for (const std::vector<std::string>& c :
         std::vector<std::vector<std::string>>{{"XREADGROUP", "GROUP", "g", "c", "STREAMS", writes, ">"},
                                               {"XACK", writes, "g", "0-1"},
                                               {"DEL", writes},
                                               {"XTRIM", writes, "MAXLEN", "0"},
                                               {"EVAL", "return 1", "0"},
                                               {"SET", "other", "x"},
                                               {"FLUSHALL"},
                                               {"CONFIG", "GET", "*"},
                                               {"KEYS", "*"},
                                               {"XGROUP", "DESTROY", writes, "g"}})
      EXPECT_EQ(refused(front, c), "NOPERM") << c[0];
  }
  {
    Redis worker(url_as(*server, "prism-worker"));
    EXPECT_EQ(worker.command({"XGROUP", "CREATE", writes, "replica:a", "0", "MKSTREAM"}).str, "OK");
    EXPECT_EQ(worker.command({"XREADGROUP", "GROUP", "replica:a", "a", "STREAMS", writes, ">"}).type,
              Reply::Type::kArray);
    EXPECT_EQ(worker.command({"EVAL", "return redis.call('GET', KEYS[1])", "1", "prism:shards"}).str, "1");
    for (const std::vector<std::string>& c :
         std::vector<std::vector<std::string>>{{"XADD", writes, "*", "op", "delete", "id", "p1"},
                                               {"XGROUP", "DESTROY", writes, "replica:a"},
                                               {"EVAL", "return redis.call('GET', KEYS[1])", "1", "other"},
                                               {"LPUSH", "other", "x"},
                                               {"FLUSHALL"},
                                               {"CONFIG", "SET", "appendonly", "no"},
                                               {"SHUTDOWN"}})
      EXPECT_EQ(refused(worker, c), "NOPERM") << c[0];
  }
  // A wrong password: refused at the first command, naming the user and not the password.
  Redis wrong("redis://prism-front:not-the-password@127.0.0.1:" + std::to_string(server->port()));
  try {
    wrong.command({"PING"});
    ADD_FAILURE() << "a wrong password was accepted";
  } catch (const RedisError& e) {
    EXPECT_NE(std::string(e.what()).find("refused AUTH as 'prism-front': WRONGPASS"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prism-front:***@"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("not-the-password"), std::string::npos) << e.what();
  }
  // The password from PRISM_REDIS_PASSWORD when the URL names the user alone.
  setenv("PRISM_REDIS_PASSWORD", password_of("prism-front").c_str(), 1);
  Redis from_env("redis://prism-front@127.0.0.1:" + std::to_string(server->port()));
  EXPECT_EQ(from_env.command({"PING"}).str, "PONG");
  unsetenv("PRISM_REDIS_PASSWORD");
  EXPECT_THROW(Redis("redis://prism-front@127.0.0.1:6379"), std::invalid_argument);
}

// A front whose Redis user has the ACL of earlier versions (+blpop, none of +blmove +lindex +expire,
// which a front now takes its answers with) does not start: it names the refused command and what the
// user needs, instead of failing every request.
TEST(Deployment, AFrontOnTheEarlierAclIsRefusedNamingWhatItLacks) {
  PRISM_NEED_REDIS();
  test::TempDir dir;
  const std::unique_ptr<test::RedisServer> server = documented_redis(dir.path() / "redis");
  Redis admin(server->url());
  const Reply made =
      admin.command({"ACL",           "SETUSER",  "prism-front-old", "on",    ">" + password_of("prism-front-old"),
                     "resetchannels", "~prism:*", "-@all",           "+ping", "+select",
                     "+role",         "+get",     "+mget",           "+set",  "+scan",
                     "+hmget",        "+xadd",    "+blpop",          "+wait", "+watch",
                     "+multi",        "+exec",    "+xinfo|groups"});
  ASSERT_EQ(made.str, "OK") << made.str;
  std::string output;
  const int rc = test::run_command("timeout 30 '" + std::string(PRISM_EXE) + "' texture serve --redis '" +
                                       url_as(*server, "prism-front-old") +
                                       "' --shards 1 --normalise none --listen 127.0.0.1:0 2>&1",
                                   output);
  EXPECT_NE(rc, 0) << output;
  EXPECT_NE(rc, 124) << "the front started and served: " << output;
  const std::string wording =
      " (a front takes its answers with BLMOVE, LINDEX and EXPIRE: its Redis user needs +blmove +lindex +expire, "
      "docs/SERVICE.md)";
  EXPECT_NE(output.find("refused LINDEX: NOPERM"), std::string::npos) << output;
  EXPECT_NE(output.find(wording), std::string::npos) << output;
  EXPECT_EQ(output.find(password_of("prism-front-old")), std::string::npos) << output;
  // A front whose user loses one of them once started (its ACL changed under it): each request
  // fails with 503 in the same words.
  ShardedOptions o;
  o.redis = url_as(*server, "prism-front");
  o.shards = 1;
  ShardedBackend front(o);
  ASSERT_EQ(admin.command({"ACL", "SETUSER", "prism-front", "-blmove"}).str, "OK");
  std::string message;
  EXPECT_EQ(test_support::service_status([&] { front.get("p1", Clock::now() + 5s); }, &message), 503);
  EXPECT_NE(message.find("refused BLMOVE: NOPERM"), std::string::npos) << message;
  EXPECT_NE(message.find(wording), std::string::npos) << message;
}

}  // namespace
}  // namespace prism::service
