// The texture service's contract checked under faults (issue 46, part 4; docs/SERVICE.md, "The
// contract under faults"), as Jepsen checks the systems it tests: a real deployment on loopback
// (2 fronts, 2 shards x 2 replicas of `prism texture shard`, a Redis master and its replica, 3
// redis-sentinels) serves a bounded history of enrolments, updates, deletes, gets, verifies and
// searches from 3 clients while a nemesis injects faults: kill -9 of workers, fronts and the Redis
// master, SIGSTOP of a worker or of a whole shard, and on the links (every connection to a front
// and to each Redis server passes through a FaultProxy of the test, tests/support/fault_proxy.h):
// partitions of the Redis master from everybody (the sentinels fail over), of one worker or one
// front from Redis, and of a front from its clients, stalls, delays, refused connections; and a
// full disk under one replica (a tmpfs in a user namespace; skipped loudly where there is none).
// Then everything is healed, every product is read once more through each front and in each
// replica's gallery, and the history is checked against the documented contract
// (tests/support/history_check.h). Violations must be 0.
//
// PRISM_FAULT_TRIALS (default 1), PRISM_FAULT_SECONDS (of operations per trial, default 16) and
// PRISM_FAULT_SEED (default: the time) make longer runs, PRISM_FAULT_KIND=N[,M...] injects those
// kinds of fault only (one_fault's); every trial prints its seed, faults, operations and violations. Skips
// loudly without redis-server or redis-sentinel unless PRISM_REQUIRE_REDIS=1.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "fault_proxy.h"
#include "history_check.h"
#include "ppm.h"
#include "process.h"
#include "redis.h"
#include "redis_server.h"
#include "shard_protocol.h"
#include "test_env.h"
#include "texture_cases.h"

namespace prism::service {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace h = test::history;
using SteadyClock = std::chrono::steady_clock;

constexpr int kShards = 2;
constexpr int kFronts = 2;
constexpr int kClients = 3;
constexpr int kProductsPerShard = 3;

// The first `name` on PATH, else /usr/bin/NAME; "" when neither is executable.
std::string on_path(const std::string& name) {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string d; std::getline(dirs, d, ':');)
      if (!d.empty()) candidates.push_back(d + "/" + name);
  }
  candidates.push_back("/usr/bin/" + name);
  for (const std::string& c : candidates)
    if (access(c.c_str(), X_OK) == 0) return c;
  return "";
}

// The redis-sentinel to use ($PRISM_REDIS_SENTINEL, else the first on PATH, else Debian's), "" when
// absent (as tests/service/test_sentinel.cpp).
std::string sentinel_path() {
  if (const char* env = std::getenv("PRISM_REDIS_SENTINEL"); env && *env) return access(env, X_OK) == 0 ? env : "";
  return on_path("redis-sentinel");
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool within(std::chrono::milliseconds limit, const std::function<bool()>& ok) {
  for (const auto give_up = SteadyClock::now() + limit;;) {
    if (ok()) return true;
    if (SteadyClock::now() >= give_up) return false;
    std::this_thread::sleep_for(100ms);
  }
}

Reply ask(int port, const std::vector<std::string>& argv, int timeout_ms = 1000) {
  try {
    Redis r("redis://127.0.0.1:" + std::to_string(port), Redis::ms(timeout_ms));
    return r.command(argv);
  } catch (const RedisError& e) {
    Reply none;
    none.type = Reply::Type::kError;
    none.str = std::string("UNREACHABLE ") + e.what();
    return none;
  }
}

std::string field(const Reply& r, const std::string& name) {
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2)
    if (r.elements[i].str == name) return r.elements[i + 1].str;
  return "";
}

// Version v's image: its own random texture, (160 + v % 64) x (120 + v / 64) pixels, so that a
// product's width and height (answered by a get) name the version it holds.
std::string image_of(int v, uint32_t seed) {
  std::mt19937 rng(seed * 7919u + uint32_t(v));
  return test::pgm_bytes(test::random_texture(rng, 160 + v % 64, 120 + v / 64));
}
int version_of(int width, int height) { return (height - 120) * 64 + (width - 160); }

// redis-sentinel on 127.0.0.1 (a free port), its config and log in `dir`.
class Sentinel {
 public:
  Sentinel(const std::filesystem::path& dir, const std::vector<std::string>& lines) {
    std::filesystem::create_directories(dir);
    for (int attempt = 1;; ++attempt) {
      port_ = test::free_port();
      std::ofstream conf((dir / "sentinel.conf").string());
      conf << "port " << port_ << "\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir " << dir.string()
           << "\nsentinel resolve-hostnames no\n";
      for (const std::string& line : lines) conf << line << "\n";
      conf.close();
      child_ = std::make_unique<test::ChildProcess>(
          std::vector<std::string>{sentinel_path(), (dir / "sentinel.conf").string()}, (dir / "log.txt").string());
      if (within(5s, [&] { return !child_->running() || ask(port_, {"PING"}).str == "PONG"; }) && child_->running())
        return;
      if (attempt == 3)
        throw std::runtime_error("redis-sentinel did not start: " + read_file((dir / "log.txt").string()));
    }
  }
  int port() const { return port_; }
  std::string ended() { return child_->ended(); }

 private:
  int port_ = 0;
  std::unique_ptr<test::ChildProcess> child_;
};

// One trial's deployment: every process and every proxy.
struct Deployment {
  test::TempDir dir;
  uint32_t seed = 0;
  // Disk full (declared before the workers: it outlives them): replica b of shard 0 (worker
  // kFullWorker) keeps its gallery on a 64 MB tmpfs of its own, mounted in a user and mount
  // namespace held by `disk` (unshare -rm, as ServeCli's full-disk test) and reached from here
  // through /proc/PID/root; the nemesis fills it with a file and deletes the file again. disk_dir
  // is "" when unshare or tmpfs is unavailable: the fault is then not injected.
  static constexpr int kFullWorker = 1;
  std::unique_ptr<test::ChildProcess> disk;
  std::string disk_dir;  // the tmpfs, as this process reaches it

  // Redis: server i behind proxy i, which is the address everybody (sentinels, the other server's
  // replication, fronts, workers) knows it by (replica-announce-port).
  std::unique_ptr<test::FaultProxy> redis_proxy[2];
  std::unique_ptr<test::RedisServer> redis[2];
  std::vector<std::unique_ptr<Sentinel>> sentinels;
  std::string sentinel_list;
  // Workers: shard k replica r at [k * 2 + r].
  std::unique_ptr<test::ChildProcess> workers[kShards * 2];
  // Fronts: front i listens on front_port[i], clients reach it through front_proxy[i].
  int front_port[kFronts] = {};
  int front_starts[kFronts] = {};
  std::unique_ptr<test::FaultProxy> front_proxy[kFronts];
  std::unique_ptr<test::ChildProcess> fronts[kFronts];

  std::string gallery(int w) const {
    return w == kFullWorker && !disk_dir.empty() ? disk_dir + "/gallery" : dir.file("gallery" + std::to_string(w));
  }
  std::string worker_log(int w) const { return dir.file("worker" + std::to_string(w) + ".txt"); }
  std::string front_log(int f) const { return dir.file("front" + std::to_string(f) + ".txt"); }

  void start_worker(int w) {
    const int shard = w / 2;
    const std::string replica = w % 2 ? "b" : "a";
    workers[w] = std::make_unique<test::ChildProcess>(std::vector<std::string>{PRISM_EXE,
                                                                               "texture",
                                                                               "shard",
                                                                               "--sentinel",
                                                                               sentinel_list,
                                                                               "--master",
                                                                               "prism",
                                                                               "--shards",
                                                                               std::to_string(kShards),
                                                                               "--shard",
                                                                               std::to_string(shard),
                                                                               "--replica",
                                                                               replica,
                                                                               "--gallery",
                                                                               gallery(w),
                                                                               "--device",
                                                                               "cpu",
                                                                               "--host-memory",
                                                                               "20M",
                                                                               "--repair-every",
                                                                               "2"},
                                                      worker_log(w));
  }
  // Starts front f on a port of its choosing (no race for a free port with parallel tests) and
  // points its proxy there once it listens: whether it did within 60 s.
  bool start_front(int f) {
    fronts[f] = std::make_unique<test::ChildProcess>(
        std::vector<std::string>{PRISM_EXE, "texture", "serve", "--sentinel", sentinel_list, "--master", "prism",
                                 "--shards", std::to_string(kShards), "--listen", "127.0.0.1:0", "--device", "cpu",
                                 "--deadline", "4000", "--threads", "16"},
        front_log(f));
    const int start = ++front_starts[f];  // its log is appended to: this start's line is the start-th
    return within(60s, [&] {
      const std::string log = read_file(front_log(f));
      const std::string line = "listening on http://127.0.0.1:";
      size_t at = std::string::npos;
      for (int i = 0; i < start; ++i)
        if ((at = log.find(line, at == std::string::npos ? 0 : at + 1)) == std::string::npos) return false;
      front_port[f] = std::atoi(log.c_str() + at + line.size());
      front_proxy[f]->set_target(front_port[f]);
      return true;
    });
  }
  bool front_healthy(int f) {
    httplib::Client c("127.0.0.1", front_port[f]);
    c.set_connection_timeout(1s);
    c.set_read_timeout(5s);
    const httplib::Result r = c.Get("/healthz");
    return r && r->status == 200;
  }
  // The Redis server (0 or 1) the sentinels name as master now, -1 when none answers.
  int master() {
    for (const auto& s : sentinels) {
      const Reply a = ask(s->port(), {"SENTINEL", "get-master-addr-by-name", "prism"});
      if (a.elements.size() != 2) continue;
      for (int i = 0; i < 2; ++i)
        if (a.elements[1].str == std::to_string(redis_proxy[i]->port())) return i;
    }
    return -1;
  }
  // Each front's prism_redis_unreplicated_writes_total (-1: no answer), read past its proxy.
  std::vector<long long> unreplicated() {
    std::vector<long long> out;
    for (int f = 0; f < kFronts; ++f) {
      httplib::Client c("127.0.0.1", front_port[f]);
      c.set_connection_timeout(1s);
      c.set_read_timeout(3s);
      const httplib::Result r = c.Get("/metrics");
      long long n = -1;
      if (r && r->status == 200) {
        const std::string key = "prism_redis_unreplicated_writes_total{master=\"prism\"} ";
        const size_t at = r->body.find(key);
        if (at != std::string::npos) n = std::atoll(r->body.c_str() + at + key.size());
      }
      out.push_back(n);
    }
    return out;
  }
  // The processes of the deployment that ended although the test did not end them (each one the
  // nemesis kills it restarts before its fault is over), each named with how it ended and the last
  // lines of its log; "" when every one runs.
  std::string ended_by_themselves() {
    std::string out;
    auto check = [&](const std::string& name, const std::string& ended) {
      if (!ended.empty()) out += name + " ended by itself " + ended + "\n";
    };
    for (int i = 0; i < 2; ++i)
      if (redis[i]) check("redis-server " + std::to_string(i), redis[i]->ended());
    for (size_t s = 0; s < sentinels.size(); ++s) check("sentinel " + std::to_string(s), sentinels[s]->ended());
    for (int w = 0; w < kShards * 2; ++w)
      if (workers[w]) check("worker " + std::to_string(w), workers[w]->ended());
    for (int f = 0; f < kFronts; ++f)
      if (fronts[f]) check("front " + std::to_string(f), fronts[f]->ended());
    if (disk && !disk_dir.empty()) check("the full-disk fault's tmpfs holder", disk->ended());
    return out;
  }
  std::string logs() {
    std::string all;
    for (int w = 0; w < kShards * 2; ++w) all += "--- worker " + std::to_string(w) + "\n" + read_file(worker_log(w));
    for (int f = 0; f < kFronts; ++f) all += "--- front " + std::to_string(f) + "\n" + read_file(front_log(f));
    for (int s = 0; s < 3; ++s)
      all +=
          "--- sentinel " + std::to_string(s) + "\n" + read_file(dir.file("sentinel" + std::to_string(s) + "/log.txt"));
    return all.size() > 60000 ? all.substr(all.size() - 60000) : all;
  }
};

// Starts the deployment; "" when it is up and healthy, else why not.
std::string start(Deployment& d) {
  for (int i = 0; i < 2; ++i) d.redis_proxy[i] = std::make_unique<test::FaultProxy>(0);
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> config = {"--replica-announce-ip", "127.0.0.1", "--replica-announce-port",
                                       std::to_string(d.redis_proxy[i]->port())};
    if (i == 1) config.insert(config.end(), {"--replicaof", "127.0.0.1", std::to_string(d.redis_proxy[0]->port())});
    d.redis[i] = std::make_unique<test::RedisServer>(d.dir.path() / ("redis" + std::to_string(i)), config);
    d.redis_proxy[i]->set_target(d.redis[i]->port());
  }
  if (!within(15s, [&] {
        return ask(d.redis[1]->port(), {"INFO", "replication"}).str.find("master_link_status:up") != std::string::npos;
      }))
    return "the Redis replica did not sync: " + read_file(d.dir.file("redis1/redis.log"));
  const std::vector<std::string> lines = {
      "sentinel monitor prism 127.0.0.1 " + std::to_string(d.redis_proxy[0]->port()) + " 2",
      "sentinel down-after-milliseconds prism 1000", "sentinel failover-timeout prism 3000"};
  for (int i = 0; i < 3; ++i)
    d.sentinels.push_back(std::make_unique<Sentinel>(d.dir.path() / ("sentinel" + std::to_string(i)), lines));
  if (!within(30s, [&] {
        for (const auto& s : d.sentinels) {
          const Reply m = ask(s->port(), {"SENTINEL", "MASTER", "prism"});
          if (field(m, "num-slaves") != "1" || field(m, "num-other-sentinels") != "2") return false;
        }
        return true;
      }))
    return "the sentinels did not find each other and the replica\n" + d.logs();
  for (size_t i = 0; i < d.sentinels.size(); ++i)
    d.sentinel_list += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(d.sentinels[i]->port());
  // The tmpfs of the full-disk fault, when this machine lets a user namespace mount one.
  const std::string mnt = d.dir.file("tmpfs");
  std::filesystem::create_directories(mnt);
  d.disk = std::make_unique<test::ChildProcess>(
      std::vector<std::string>{on_path("unshare"), "--user", "--map-root-user", "--mount", "/bin/sh", "-c",
                               "mount -t tmpfs -o size=64m prism-faults \"$0\" && echo mounted && exec sleep 100000",
                               mnt},
      d.dir.file("tmpfs.txt"));
  if (within(10s, [&] { return read_file(d.dir.file("tmpfs.txt")).find("mounted") != std::string::npos; }))
    d.disk_dir = "/proc/" + std::to_string(d.disk->pid()) + "/root" + mnt;
  else
    std::cerr << "*** NOT INJECTED: disk full (no tmpfs in a user namespace here: unshare -rm: "
              << read_file(d.dir.file("tmpfs.txt")) << ") ***\n";
  for (int w = 0; w < kShards * 2; ++w) d.start_worker(w);
  for (int f = 0; f < kFronts; ++f) {
    d.front_proxy[f] = std::make_unique<test::FaultProxy>(0);
    if (!d.start_front(f)) return "front " + std::to_string(f) + " did not start\n" + d.logs();
  }
  for (int f = 0; f < kFronts; ++f)
    if (!within(90s, [&] { return d.front_healthy(f); }))
      return "front " + std::to_string(f) + " is not healthy\n" + d.logs();
  return "";
}

// The product ids: kProductsPerShard on each shard.
std::vector<std::string> product_ids() {
  std::vector<std::string> ids;
  int per[kShards] = {};
  for (int i = 0; int(ids.size()) < kShards * kProductsPerShard; ++i) {
    const std::string id = "f" + std::to_string(i);
    const int k = shard::shard_of(id, kShards);
    if (per[k] < kProductsPerShard) ++per[k], ids.push_back(id);
  }
  return ids;
}

// The clients' history, shared.
struct History {
  std::mutex mutex;
  std::vector<h::Op> ops;
  SteadyClock::time_point zero = SteadyClock::now();
  std::atomic<int> next_version{1};
  double now() const { return std::chrono::duration<double>(SteadyClock::now() - zero).count(); }
  void add(h::Op op) {
    std::lock_guard lock(mutex);
    ops.push_back(std::move(op));
  }
};

std::string excerpt(const httplib::Result& r) {
  if (!r) return httplib::to_string(r.error());
  return std::to_string(r->status) + " " + r->body.substr(0, 160);
}

// Sleeps `ms` unless the run stops first.
void nap(int ms, const std::atomic<bool>& stop) {
  for (int i = 0; i < ms / 50 && !stop; ++i) std::this_thread::sleep_for(50ms);
}

// One operation `what` on `key` through front `f`'s proxy, recorded; its outcome.
h::Outcome operate(History& hist, Deployment& d, int client, int f, const std::string& what, const std::string& key,
                   int query_version, std::mt19937& rng) {
  httplib::Client c("127.0.0.1", d.front_proxy[f]->port());
  c.set_connection_timeout(2s);
  c.set_read_timeout(8s);  // the fronts' deadline is 4 s
  c.set_write_timeout(8s);
  h::Op op;
  op.client = client;
  op.what = what;
  op.key = key;
  const std::string path = "/v1/products/" + key;
  const std::string pgm = "image/x-portable-graymap";
  if (what == "enrol" || what == "update") {
    op.value = hist.next_version++;
    const std::string image = image_of(op.value, d.seed);
    op.invoke = hist.now();
    const httplib::Result r = what == "enrol" ? c.Post(path.c_str(), image, pgm) : c.Put(path.c_str(), image, pgm);
    op.complete = hist.now();
    op.note = excerpt(r);
    if (r && (r->status == 200 || r->status == 201)) {
      op.outcome = h::Outcome::kOk;
    } else if (r && r->status >= 400 && r->status < 500) {
      op.outcome = h::Outcome::kFail;
      if (r->status == 404 && what == "update") op.observed = true, op.seen = h::kAbsent;
      if (r->status == 409 && what == "enrol") op.observed = true, op.equals = false, op.seen = h::kAbsent;
    }
  } else if (what == "delete") {
    op.invoke = hist.now();
    const httplib::Result r = c.Delete(path.c_str());
    op.complete = hist.now();
    op.note = excerpt(r);
    if (r && r->status == 200) op.outcome = h::Outcome::kOk;
    if (r && r->status >= 400 && r->status < 500) {
      op.outcome = h::Outcome::kFail;
      if (r->status == 404) op.observed = true, op.seen = h::kAbsent;
    }
  } else if (what == "get") {
    op.invoke = hist.now();
    const httplib::Result r = c.Get(path.c_str());
    op.complete = hist.now();
    op.note = excerpt(r);
    if (r && r->status == 404) op.outcome = h::Outcome::kOk, op.observed = true, op.seen = h::kAbsent;
    if (r && r->status == 200) {
      const json j = json::parse(r->body);
      op.outcome = h::Outcome::kOk;
      op.observed = true;
      op.seen = version_of(j.at("width").get<int>(), j.at("height").get<int>());
    }
  } else if (what == "verify") {
    op.value = query_version;
    const std::string image = image_of(op.value, d.seed);
    op.invoke = hist.now();
    const httplib::Result r = c.Post((path + "/verify").c_str(), image, pgm);
    op.complete = hist.now();
    op.note = excerpt(r);
    if (r && r->status == 404) op.outcome = h::Outcome::kOk, op.observed = true, op.seen = h::kAbsent;
    if (r && r->status == 200) {
      const json j = json::parse(r->body);
      op.outcome = h::Outcome::kOk;
      op.observed = true;
      op.equals = j.at("decision") == "accepted";
      op.seen = query_version;
    }
  } else {  // search
    op.value = query_version;
    op.allow_partial = rng() % 2 == 0;
    const std::string image = image_of(op.value, d.seed);
    op.invoke = hist.now();
    // A partial search waits for the shards 3/4 of its deadline: 1.5 s here, so that a shard
    // paused for longer is missing from some.
    const httplib::Result r =
        c.Post(op.allow_partial ? "/v1/search?allow_partial=true&deadline_ms=2000" : "/v1/search", image, pgm);
    op.complete = hist.now();
    op.note = excerpt(r);
    if (r && r->status == 200) {
      const json j = json::parse(r->body);
      op.outcome = h::Outcome::kOk;
      op.shards = j.at("shards").get<int>();
      op.shards_answered = j.at("shards_answered").get<int>();
      op.searched_share = j.at("searched_share").get<double>();
      op.missing_shards = j.at("missing_shards").get<std::vector<int>>();
      for (const json& m : j.at("candidates")) {
        op.candidates.push_back(m.at("id").get<std::string>());
        if (m.at("accepted").get<bool>()) op.accepted.push_back(m.at("id").get<std::string>());
      }
    }
  }
  op.note = "front " + std::to_string(f) + ": " + op.note;
  const h::Outcome outcome = op.outcome;
  hist.add(std::move(op));
  return outcome;
}

// A random operation of a client.
void client_loop(History& hist, Deployment& d, int client, const std::vector<std::string>& ids,
                 const std::atomic<bool>& stop) {
  std::mt19937 rng(d.seed * 31u + uint32_t(client));
  while (!stop) {
    const std::string key = ids[rng() % ids.size()];
    const int f = int(rng() % kFronts);
    // Reads ask with a version written to that product so far (any, or the latest few).
    // Writes mostly follow what the history last acknowledged of it (an enrolment where it was
    // deleted, an update or a delete where it was enrolled), so that most are applied.
    int query = 0;
    bool enrolled = false;
    {
      std::lock_guard lock(hist.mutex);
      std::vector<int> written;
      for (const h::Op& op : hist.ops) {
        if (op.key != key) continue;
        if (op.value > 0 && (op.what == "enrol" || op.what == "update")) written.push_back(op.value);
        if (op.outcome == h::Outcome::kOk && (op.what == "enrol" || op.what == "update" || op.what == "delete"))
          enrolled = op.what != "delete";
      }
      if (!written.empty()) query = written[written.size() - 1 - rng() % std::min<size_t>(written.size(), 3)];
    }
    const int roll = int(rng() % 100);
    std::string what = roll < 45 ? "write" : roll < 63 ? "get" : roll < 81 ? "verify" : "search";
    if (what == "write") {
      const int r = int(rng() % 10);
      what = r == 0 ? "enrol" : r == 1 ? "update" : !enrolled ? "enrol" : r < 7 ? "update" : "delete";
    }
    if ((what == "verify" || what == "search") && query == 0) continue;  // nothing written yet
    const h::Outcome outcome = operate(hist, d, client, f, what, key, query, rng);
    // After a failure, a pause (as a client honouring Retry-After would): unknown writes weaken what
    // later reads can be checked against, and a client failing fast would add hundreds of them.
    if (outcome == h::Outcome::kUnknown) nap(200 + int(rng() % 300), stop);
  }
}

// What the nemesis did, for the report.
struct Faults {
  std::map<std::string, int> count;
  std::vector<std::string> log;
  int failovers = 0, skipped = 0;
  // Intervals in which a write may have been answered before a Redis replica held it and then
  // lost by a failover (docs/SERVICE.md, "What a failover may lose"): [from, to] in history seconds.
  std::vector<std::pair<double, double>> losable;
};

// One fault of the nemesis, healed before it returns.
void one_fault(Deployment& d, History& hist, Faults& faults, std::mt19937& rng, const std::atomic<bool>& stop) {
  // PRISM_FAULT_KIND=N[,M...]: these kinds only (0..12, below), a debugging aid.
  std::vector<int> only;
  if (const char* v = std::getenv("PRISM_FAULT_KIND")) {
    std::stringstream list(v);
    for (std::string k; std::getline(list, k, ',');)
      if (!k.empty()) only.push_back(std::atoi(k.c_str()));
  }
  const int kind = only.empty() ? int(rng() % 13) : only[rng() % only.size()];
  auto note = [&](const std::string& what) {
    faults.log.push_back(std::to_string(hist.now()).substr(0, 6) + " s: " + what);
    ++faults.count[what.substr(0, what.find(' ', what.find(' ') + 1))];
  };
  if (kind == 0) {  // kill -9 a worker, restart it
    const int w = int(rng() % (kShards * 2));
    d.workers[w]->signal(SIGKILL);
    d.workers[w]->wait(5);
    note("kill-9 worker " + std::to_string(w));
    nap(500 + int(rng() % 1500), stop);
    d.start_worker(w);
  } else if (kind == 1) {  // SIGSTOP a worker (a stalled process), then SIGCONT
    const int w = int(rng() % (kShards * 2));
    d.workers[w]->signal(SIGSTOP);
    note("pause worker " + std::to_string(w));
    nap(500 + int(rng() % 2000), stop);
    d.workers[w]->signal(SIGCONT);
  } else if (kind == 2) {  // kill -9 a front, restart it (its proxy refuses meanwhile: the port is closed)
    const int f = int(rng() % kFronts);
    d.fronts[f]->signal(SIGKILL);
    d.fronts[f]->wait(5);
    note("kill-9 front " + std::to_string(f));
    nap(300 + int(rng() % 1000), stop);
    if (!d.start_front(f)) faults.log.push_back("front " + std::to_string(f) + " did not restart");
  } else if (kind == 3 || kind == 4) {  // the Redis master: kill -9 it, or partition it away
    const int m = d.master();
    const int other = 1 - m;
    if (m < 0 || !d.redis[0]->running() || !d.redis[1]->running()) {
      ++faults.skipped;
      return;
    }
    // Only with its replica in sync: two failovers in a row with a replica behind would lose what
    // the documentation says they lose, which this test does not exercise (see `losable`).
    const double from = hist.now();
    const std::vector<long long> before = d.unreplicated();
    const Reply set = ask(d.redis[m]->port(), {"SET", "prism-faults:sync", std::to_string(from)});
    const Reply wait = ask(d.redis[m]->port(), {"WAIT", "1", "3000"}, 4000);
    if (set.error() || wait.type != Reply::Type::kInteger || wait.integer < 1) {
      ++faults.skipped;
      faults.log.push_back(std::to_string(hist.now()).substr(0, 6) + " s: skipped a master fault: no replica in sync");
      return;
    }
    if (kind == 3) {
      d.redis[m]->kill();
      note("kill-9 redis-master " + std::to_string(m));
    } else {
      d.redis_proxy[m]->partition();
      note("partition redis-master " + std::to_string(m));
    }
    const double to = hist.now() + 0.2;
    std::this_thread::sleep_for(200ms);
    if (d.unreplicated() != before) faults.losable.emplace_back(from, to);
    // The sentinels promote the other (down after 1 s, then the election).
    if (within(15s, [&] { return d.master() == other; })) ++faults.failovers;
    nap(500 + int(rng() % 1000), stop);
    if (kind == 3)
      d.redis[m]->start();  // comes back as a master, then Sentinel demotes it
    else
      d.redis_proxy[m]->heal();
  } else if (kind == 5) {  // stall a Redis server's link shortly (below down-after-milliseconds)
    const int i = int(rng() % 2);
    d.redis_proxy[i]->stall();
    note("stall redis " + std::to_string(i));
    nap(300 + int(rng() % 300), stop);
    d.redis_proxy[i]->forward();
  } else if (kind == 6) {  // delay on a Redis server's link
    const int i = int(rng() % 2);
    d.redis_proxy[i]->delay(std::chrono::milliseconds(20 + rng() % 80));
    note("delay redis " + std::to_string(i));
    nap(1000 + int(rng() % 1000), stop);
    d.redis_proxy[i]->delay(0ms);
  } else if (kind == 7) {  // a front's clients: cut, refused, then forwarded again
    const int f = int(rng() % kFronts);
    d.front_proxy[f]->refuse();
    note("refuse front " + std::to_string(f));
    nap(300 + int(rng() % 700), stop);
    d.front_proxy[f]->forward();
  } else if (kind == 9) {  // both replicas of a shard paused: it answers nothing (partial searches)
    const int k = int(rng() % kShards);
    d.workers[2 * k]->signal(SIGSTOP);
    d.workers[2 * k + 1]->signal(SIGSTOP);
    note("pause shard " + std::to_string(k));
    nap(2000 + int(rng() % 1500), stop);
    d.workers[2 * k]->signal(SIGCONT);
    d.workers[2 * k + 1]->signal(SIGCONT);
  } else if (kind == 10) {  // one worker cut off from Redis (both servers), its sibling going on
    const int w = int(rng() % (kShards * 2));
    const pid_t pid = d.workers[w]->pid();
    for (auto& p : d.redis_proxy) p->partition_process(pid);
    note("partition worker-redis " + std::to_string(w));
    nap(1000 + int(rng() % 2000), stop);
    for (auto& p : d.redis_proxy) p->heal_process(pid);
  } else if (kind == 11) {  // one front cut off from Redis: its requests time out
    const int f = int(rng() % kFronts);
    const pid_t pid = d.fronts[f]->pid();
    for (auto& p : d.redis_proxy) p->partition_process(pid);
    note("partition front-redis " + std::to_string(f));
    nap(1000 + int(rng() % 2000), stop);
    for (auto& p : d.redis_proxy) p->heal_process(pid);
  } else if (kind == 12) {  // the disk of one replica full: it retries its write, its sibling answers
    if (d.disk_dir.empty()) {
      ++faults.skipped;
      return;
    }
    const std::string filler = d.disk_dir + "/filler";
    const int fd = open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const std::string block(1 << 20, 'x');
    while (fd >= 0 && write(fd, block.data(), block.size()) == ssize_t(block.size())) {
    }
    if (fd >= 0) close(fd);
    note("disk-full worker " + std::to_string(Deployment::kFullWorker));
    nap(1000 + int(rng() % 2000), stop);
    std::filesystem::remove(filler);
  } else {  // a front's clients: partitioned (held, then cut)
    const int f = int(rng() % kFronts);
    d.front_proxy[f]->partition();
    note("partition front " + std::to_string(f));
    nap(500 + int(rng() % 1000), stop);
    d.front_proxy[f]->heal();
  }
}

struct TrialResult {
  h::Result checked;
  Faults faults;
  double seconds = 0;
  int unapplied = 0;       // "cannot apply write" lines in the workers' logs
  bool converged = false;  // the replicas of each shard held the same entries after healing
};

// One trial: `seconds` of operations under faults, healing, final reads, the check. A process of
// the deployment that ends by itself meanwhile (one the nemesis did not kill) fails the trial, named
// with how it ended and its last log lines. `rogue` (a test of that): worker `rogue` is ended
// behind the nemesis' back (SIGTERM: it stops as if by itself) after the first fault.
TrialResult trial(uint32_t seed, int seconds, int rogue = -1) {
  TrialResult out;
  const auto began = SteadyClock::now();
  Deployment d;
  d.seed = seed;
  const std::string why = start(d);
  if (!why.empty()) {
    ADD_FAILURE() << why;
    return out;
  }
  History hist;
  const std::vector<std::string> ids = product_ids();
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&hist, &d, c, &ids, &stop] { client_loop(hist, d, c, ids, stop); });
  std::mt19937 rng(seed);
  const double end = hist.now() + seconds;
  nap(1000, stop);  // some writes before the first fault
  std::string ended;
  while (hist.now() < end && ended.empty()) {
    one_fault(d, hist, out.faults, rng, stop);
    if (rogue >= 0 && d.workers[rogue]->running()) {
      d.workers[rogue]->signal(SIGTERM);
      within(10s, [&] { return !d.workers[rogue]->running(); });
    }
    nap(300 + int(rng() % 700), stop);
    ended = d.ended_by_themselves();  // every process the fault ended is running again
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  if (ended.empty()) ended = d.ended_by_themselves();
  if (!ended.empty()) {
    std::string nemesis;
    for (const std::string& l : out.faults.log) nemesis += l + "\n";
    ADD_FAILURE() << "a process of the deployment ended by itself (seed " << seed << "):\n"
                  << ended << "--- faults\n"
                  << nemesis;
    out.seconds = std::chrono::duration<double>(SteadyClock::now() - began).count();
    return out;
  }

  // Healed: every link forwards, every process runs, both fronts healthy; then each product is read
  // once more through each front (quiescent reads, checked as the others).
  for (int i = 0; i < 2; ++i) d.redis_proxy[i]->heal(), d.redis_proxy[i]->delay(0ms);
  for (int f = 0; f < kFronts; ++f) d.front_proxy[f]->heal();
  for (int i = 0; i < 2; ++i)
    if (!d.redis[i]->running()) d.redis[i]->start();
  for (int w = 0; w < kShards * 2; ++w) d.workers[w]->signal(SIGCONT);
  if (!d.disk_dir.empty()) std::filesystem::remove(d.disk_dir + "/filler");
  EXPECT_TRUE(within(60s, [&] { return d.front_healthy(0) && d.front_healthy(1); })) << d.logs();
  std::mt19937 final_rng(seed + 1);
  for (const std::string& id : ids)
    for (int f = 0; f < kFronts; ++f)
      for (int attempt = 0; attempt < 10; ++attempt) {  // a failed read is recorded, and seen nothing
        operate(hist, d, 99, f, "get", id, 0, final_rng);
        if (hist.ops.back().outcome == h::Outcome::kOk) break;
        std::this_thread::sleep_for(500ms);
      }

  // Every replica: once the replicas of each shard hold the same entries (docs/SERVICE.md, "Replicas
  // repair each other": within two rounds once writes stop), each replica's gallery is read as it
  // is (`prism texture list`, which works on an owned gallery), each product's state there checked
  // as a read: every acknowledged write visible on every replica.
  std::map<int, std::map<std::string, int>> held;   // worker -> product -> version
  std::map<int, std::pair<double, double>> listed;  // worker -> when
  auto list = [&](int w) {
    std::string text;
    const double t0 = hist.now();
    const int rc =
        test::run_command(std::string(PRISM_EXE) + " texture list --json --gallery '" + d.gallery(w) + "' 2>&1", text);
    listed[w] = {t0, hist.now()};
    std::map<std::string, int> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      const json j = json::parse(line);
      out[j.at("id").get<std::string>()] = version_of(j.at("width").get<int>(), j.at("height").get<int>());
    }
    if (rc != 0) out["(list failed: " + text.substr(0, 200) + ")"] = -1;
    return out;
  };
  const bool converged = within(60s, [&] {
    for (int w = 0; w < kShards * 2; ++w) held[w] = list(w);
    for (int k = 0; k < kShards; ++k)
      if (held[2 * k] != held[2 * k + 1]) return false;
    return true;
  });
  out.converged = converged;
  EXPECT_TRUE(converged) << "the replicas of a shard still differ 60 s after the faults healed";
  for (int w = 0; w < kShards * 2; ++w)
    for (const std::string& id : ids) {
      if (shard::shard_of(id, kShards) != w / 2) continue;
      h::Op op;
      op.client = 100 + w;  // replica w's gallery
      op.what = "get";
      op.key = id;
      op.invoke = listed[w].first;
      op.complete = listed[w].second;
      op.outcome = h::Outcome::kOk;
      op.observed = true;
      const auto at = held[w].find(id);
      op.seen = at == held[w].end() ? h::kAbsent : at->second;
      op.note = "worker " + std::to_string(w) + "'s gallery";
      hist.ops.push_back(op);
    }

  // Writes in an interval of `losable` are checked as of unknown outcome (the documented loss).
  for (h::Op& op : hist.ops)
    for (const auto& [from, to] : out.faults.losable)
      if (op.outcome == h::Outcome::kOk && op.complete >= from && op.complete <= to &&
          (op.what == "enrol" || op.what == "update" || op.what == "delete"))
        op.may_be_lost = true;
  out.checked = h::check(hist.ops, kShards, [](const std::string& id) { return shard::shard_of(id, kShards); });
  out.seconds = std::chrono::duration<double>(SteadyClock::now() - began).count();
  // What the faults did to the processes, from their logs: writes a replica could not apply (its
  // disk full) and Redis failovers followed.
  for (int w = 0; w < kShards * 2; ++w) {
    const std::string log = read_file(d.worker_log(w));
    for (size_t at = log.find("cannot apply write"); at != std::string::npos;
         at = log.find("cannot apply write", at + 1))
      ++out.unapplied;
  }
  size_t final_ok = 0;
  for (const h::Op& op : hist.ops)
    if (op.client == 99 && op.outcome == h::Outcome::kOk) ++final_ok;
  EXPECT_EQ(final_ok, ids.size() * kFronts) << "the final reads after healing";
  {
    const std::string late = d.ended_by_themselves();
    EXPECT_EQ(late, "") << "a process of the deployment ended by itself after the faults healed";
  }
  if (!out.checked.violations.empty()) {
    std::string all;
    for (const std::string& v : out.checked.violations) all += v + "\n";
    std::string history;
    for (const h::Op& op : hist.ops) history += h::describe(op) + "\n";
    std::string nemesis;
    for (const std::string& l : out.faults.log) nemesis += l + "\n";
    ADD_FAILURE() << out.checked.violations.size() << " violations (seed " << seed << "):\n"
                  << all << "--- faults\n"
                  << nemesis << "--- history\n"
                  << history << d.logs();
  }
  return out;
}

// A process of the deployment that ends by itself (here a worker stopped behind the nemesis' back)
// fails the trial at once, named with its exit status and the last lines of its log: the trial
// does not go on with one replica less as if nothing had happened.
TEST(Faults, AProcessThatEndsByItselfFailsTheTrial) {
  if (test::redis_server_path().empty() || sentinel_path().empty()) {
    if (test::redis_required()) FAIL() << "PRISM_REQUIRE_REDIS=1 but no redis-server or redis-sentinel";
    GTEST_SKIP() << "no redis-sentinel";
  }
  testing::TestPartResultArray failures;
  {
    testing::ScopedFakeTestPartResultReporter capture(testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS,
                                                      &failures);
    trial(uint32_t(env_int("PRISM_FAULT_SEED", 1)), 30, /*rogue=*/2);
  }
  std::string all;
  for (int i = 0; i < failures.size(); ++i) all += failures.GetTestPartResult(i).message() + std::string("\n");
  std::cerr << "the trial reported:\n" << all;
  EXPECT_NE(all.find("worker 2 ended by itself (pid "), std::string::npos) << all;
  EXPECT_NE(all.find(") exited with status 0; the last lines of its log "), std::string::npos) << all;
  EXPECT_NE(all.find("shard 1 replica a: stopped"), std::string::npos) << all;
}

TEST(Faults, TheContractHoldsUnderFaults) {
  if (test::redis_server_path().empty() || sentinel_path().empty()) {
    if (test::redis_required()) FAIL() << "PRISM_REQUIRE_REDIS=1 but no redis-server or redis-sentinel";
    std::cerr << "*** SKIPPING: redis-server or redis-sentinel not found (apt install redis-sentinel) ***\n";
    GTEST_SKIP() << "no redis-sentinel";
  }
  const int trials = std::max(1, env_int("PRISM_FAULT_TRIALS", 1));
  const int seconds = std::max(2, env_int("PRISM_FAULT_SECONDS", 16));
  const uint32_t seed0 = uint32_t(env_int("PRISM_FAULT_SEED", int(std::time(nullptr) % 100000)));
  size_t ops = 0, observations = 0, violations = 0, faults = 0;
  for (int t = 0; t < trials; ++t) {
    const uint32_t seed = seed0 + uint32_t(t);
    const TrialResult r = trial(seed, seconds);
    const h::Result& c = r.checked;
    size_t n = 0;
    std::string kinds;
    for (const auto& [what, k] : r.faults.count) n += size_t(k), kinds += " " + what + " x" + std::to_string(k) + ";";
    std::cerr << "trial " << t + 1 << "/" << trials << " (PRISM_FAULT_SEED=" << seed << "): " << n << " faults ("
              << kinds << " " << r.faults.failovers << " Redis failovers, " << r.faults.skipped
              << " master faults skipped; " << r.unapplied << " writes a replica could not apply at first), " << c.ops
              << " operations: " << c.writes << " writes (" << c.acknowledged << " acknowledged, " << c.refused
              << " refused, " << c.unknown << " unknown, " << c.may_be_lost << " losable), " << c.reads
              << " reads answered, " << c.observations << " observations checked, " << c.partial_searches
              << " partial searches; replicas " << (r.converged ? "converged" : "still differ") << "; "
              << c.violations.size() << " violations; " << r.seconds << " s\n";
    ops += c.ops, observations += c.observations, violations += c.violations.size(), faults += n;
    EXPECT_GT(c.acknowledged, 0u) << "no write was acknowledged: the trial checked nothing";
    EXPECT_GT(c.observations, 0u);
    EXPECT_GT(n, 0u);
    if (HasFailure()) break;
  }
  std::cerr << trials << " trials, " << faults << " faults, " << ops << " operations, " << observations
            << " observations checked, " << violations << " violations\n";
  EXPECT_EQ(violations, 0u);
}

}  // namespace
}  // namespace prism::service
