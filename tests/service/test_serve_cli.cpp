// `prism texture serve` as a user starts it: the binary of this build on a free port of 127.0.0.1,
// requests through a real client, SIGTERM ends it with status 0; refusals of unsafe or wrong
// command lines.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "process.h"
#include "test_env.h"
#include "ppm.h"
#include "texture_cases.h"

extern char** environ;

namespace prism::service {
namespace {

using test::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// The exit status of `pid` within `seconds`, or -1 (then it is killed).
int wait_exit(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 100; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// `prism texture serve ARGS` started in the background, its output in a file; `--device cpu` added
// unless ARGS name a device or `as_given`.
struct Serve {
  pid_t pid = 0;
  std::string out;
  Serve(const TempDir& dir, const std::string& name, const std::string& args, bool as_given = false)
      : out(dir.file(name + ".txt")) {
    const std::string device = as_given || args.find("--device") != std::string::npos ? "" : " --device cpu";
    const std::string cmd = std::string("exec '") + PRISM_EXE + "' texture serve " + args + device +
                            " --host-memory 64M > '" + out + "' 2>&1";
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) pid = 0;
  }
  ~Serve() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // The port it listens on (at most 10 s to start), or 0.
  int port() const {
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 1000 && pid > 0; ++i) {
      std::smatch m;
      const std::string text = read_file(out);
      if (std::regex_search(text, m, listening)) return std::stoi(m[1]);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }
  // Its exit status within `seconds` (-1: still running, then killed).
  int exit_status(int seconds) {
    const int rc = wait_exit(pid, seconds);
    pid = 0;
    return rc;
  }
};

TEST(ServeCli, ServesUntilSigterm) {
  TempDir dir;
  Serve serve(dir, "out", "--gallery '" + dir.file("g") + "' --listen 127.0.0.1:0");
  const int port = serve.port();
  ASSERT_GT(port, 0) << read_file(serve.out);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(std::chrono::seconds(30));
  std::mt19937 rng(1);
  const cv::Mat t = test::random_texture(rng);
  const std::string pgm = test::pgm_bytes(t);
  const httplib::Result r = c.Post("/v1/products/cli-1", pgm, "image/x-portable-graymap");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;
  const httplib::Result s = c.Post("/v1/search", pgm, "image/x-portable-graymap");
  ASSERT_TRUE(s);
  EXPECT_EQ(nlohmann::json::parse(s->body)["id"], "cli-1") << s->body;
  ASSERT_EQ(kill(serve.pid, SIGTERM), 0);
  EXPECT_EQ(serve.exit_status(20), 0) << read_file(serve.out);
  EXPECT_NE(read_file(serve.out).find("stopped"), std::string::npos);
}

// Without --device the server extracts uploads where `auto` says (the GPU when there is one: on a
// GPU machine cv::SIFT took five times as long per request), and says where at start and in
// /v1/stats; --device cpu is cv::SIFT.
TEST(ServeCli, ExtractsWhereDeviceSaysAndTellsWhere) {
  TempDir dir;
  struct Case {
    std::string name, args;
  } cases[] = {{"default", ""}, {"cpu", " --device cpu"}};
  for (const Case& k : cases) {
    Serve serve(dir, k.name, "--gallery '" + dir.file("g-" + k.name) + "' --listen 127.0.0.1:0" + k.args, true);
    const int port = serve.port();
    ASSERT_GT(port, 0) << read_file(serve.out);
    httplib::Client c("127.0.0.1", port);
    const httplib::Result stats = c.Get("/v1/stats");
    ASSERT_TRUE(stats);
    const std::string extraction = nlohmann::json::parse(stats->body)["extraction"].get<std::string>();
    EXPECT_NE(read_file(serve.out).find("features extracted on " + extraction), std::string::npos)
        << read_file(serve.out);
    if (k.name == "cpu")
      EXPECT_EQ(extraction, "cpu (cv::SIFT)");
    else  // auto: the GPU, or the CPU saying why not
      EXPECT_TRUE(extraction.rfind("cuda:", 0) == 0 || extraction.rfind("cpu (cv::SIFT; no GPU: ", 0) == 0)
          << extraction;
    ASSERT_EQ(kill(serve.pid, SIGTERM), 0);
    EXPECT_EQ(serve.exit_status(20), 0) << read_file(serve.out);
  }
}

// cpp-httplib's SO_REUSEPORT let a second server share the port, and the kernel split
// the requests between two galleries. The second is refused, and every answer is the first's.
TEST(ServeCli, SecondServerOnAPortInUseIsRefused) {
  TempDir dir;
  Serve first(dir, "first", "--gallery '" + dir.file("g1") + "' --listen 127.0.0.1:0");
  const int port = first.port();
  ASSERT_GT(port, 0) << read_file(first.out);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(std::chrono::seconds(30));
  std::mt19937 rng(2);
  const std::string pgm = test::pgm_bytes(test::random_texture(rng));
  const httplib::Result r = c.Post("/v1/products/only-in-g1", pgm, "image/x-portable-graymap");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;

  Serve second(dir, "second", "--gallery '" + dir.file("g2") + "' --listen 127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(second.exit_status(30), 2) << read_file(second.out);
  EXPECT_NE(read_file(second.out).find("cannot listen on 127.0.0.1:" + std::to_string(port) + ": the port is in use"),
            std::string::npos)
      << read_file(second.out);
  for (int i = 0; i < 8; ++i) {  // fresh connections: each one could have gone to either server
    httplib::Client fresh("127.0.0.1", port);
    fresh.set_keep_alive(false);
    const httplib::Result g = fresh.Get("/v1/products/only-in-g1");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->status, 200) << g->body;
  }
}

// A gallery written behind its server's back (the server never saw it: a deleted
// product still identified). While `serve` owns the gallery, every other writer is refused naming
// it, a second owner too; readers keep working; once it stops, writers work again.
TEST(ServeCli, GalleryOwnedByAServerRefusesOtherWriters) {
  TempDir dir;
  const std::string g = dir.file("g");
  std::mt19937 rng(3);
  const std::string a = dir.file("a.pgm"), b = dir.file("b.pgm");
  write_file(a, test::pgm_bytes(test::random_texture(rng)));
  write_file(b, test::pgm_bytes(test::random_texture(rng)));
  const std::string prism = std::string("'") + PRISM_EXE + "' texture ";
  std::string output;
  ASSERT_EQ(test::run_command(prism + "enroll --device cpu --gallery '" + g + "' --id a '" + a + "' 2>&1", output), 0)
      << output;

  Serve serve(dir, "serve", "--gallery '" + g + "' --listen 127.0.0.1:0");
  const int port = serve.port();
  ASSERT_GT(port, 0) << read_file(serve.out);
  // The port it bound, not the 0 it was given.
  const std::string holder = "is held by prism texture serve on 127.0.0.1:" + std::to_string(port) + " (pid ";
  struct Case {
    std::string cmd;
  } writers[] = {
      {prism + "enroll --device cpu --gallery '" + g + "' --id b '" + b + "'"},
      {prism + "update --device cpu --gallery '" + g + "' --id a '" + b + "'"},
      {prism + "delete --gallery '" + g + "' a"},
      {prism + "migrate --gallery '" + g + "'"},
      {prism + "serve --device cpu --host-memory 64M --gallery '" + g + "' --listen 127.0.0.1:0"},
  };
  for (const Case& k : writers) {
    ASSERT_EQ(test::run_command(k.cmd + " 2>&1", output), 2) << k.cmd << "\n" << output;
    EXPECT_NE(output.find(holder), std::string::npos) << k.cmd << "\n" << output;
  }
  ASSERT_EQ(test::run_command(prism + "list --gallery '" + g + "' 2>&1", output), 0) << output;
  EXPECT_NE(output.find("a"), std::string::npos) << output;
  ASSERT_EQ(test::run_command(prism + "search --device cpu --gallery '" + g + "' '" + a + "' 2>&1", output), 0)
      << output;

  // Nothing changed under the server: a is still enrolled with its own image, b is not.
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(std::chrono::seconds(30));
  const httplib::Result got_b = c.Get("/v1/products/b");
  ASSERT_TRUE(got_b);
  EXPECT_EQ(got_b->status, 404) << got_b->body;
  const httplib::Result s = c.Post("/v1/search", read_file(a), "image/x-portable-graymap");
  ASSERT_TRUE(s);
  EXPECT_EQ(nlohmann::json::parse(s->body)["id"], "a") << s->body;

  ASSERT_EQ(kill(serve.pid, SIGTERM), 0);
  ASSERT_EQ(serve.exit_status(20), 0) << read_file(serve.out);
  ASSERT_EQ(test::run_command(prism + "delete --gallery '" + g + "' a 2>&1", output), 0) << output;

  // Killed, not stopped: the kernel releases the claim with the process.
  Serve killed(dir, "killed", "--gallery '" + g + "' --listen 127.0.0.1:0");
  ASSERT_GT(killed.port(), 0) << read_file(killed.out);
  ASSERT_EQ(test::run_command(prism + "enroll --device cpu --gallery '" + g + "' --id b '" + b + "' 2>&1", output), 2)
      << output;
  kill(killed.pid, SIGKILL);
  killed.exit_status(20);
  ASSERT_EQ(test::run_command(prism + "enroll --device cpu --gallery '" + g + "' --id b '" + b + "' 2>&1", output), 0)
      << output;
}

// A full disk answered 500 with the server's file path. The real server on a real full
// disk: a 1.5 MB tmpfs, mounted in a user and mount namespace of its own (unshare -rm, util-linux),
// holds the gallery. Products are enrolled until the disk is full: that one is 507 with
// Retry-After and no path (the server's log has it), health and reads go on, and a second server
// on the same disk, after the first stopped, holds exactly the products answered 201.
TEST(ServeCli, AFullDiskIs507AndLosesNothingAcknowledged) {
  TempDir dir;
  const std::string mnt = dir.file("mnt"), out1 = dir.file("serve1.txt"), out2 = dir.file("serve2.txt"),
                    pid1 = dir.file("serve1.pid");
  std::filesystem::create_directory(mnt);
  const std::string serve =
      "\"$1\" texture serve --gallery \"$0/g\" --listen 127.0.0.1:0 --device cpu --host-memory 64M";
  const std::string script = "mount -t tmpfs -o size=1536k prism-full \"$0\" || exit 90\n" + serve +
                             " > \"$2\" 2>&1 & echo $! > \"$3\"; wait\nexec " + serve + " > \"$4\" 2>&1";
  const char* argv[] = {"unshare",   "--user",  "--map-root-user", "--mount",    "/bin/sh",    "-c",   script.c_str(),
                        mnt.c_str(), PRISM_EXE, out1.c_str(),      pid1.c_str(), out2.c_str(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawnp(&pid, "unshare", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  struct Reaper {  // the first server too, should the test end before it was stopped
    pid_t pid;
    std::string first_pid_file;
    ~Reaper() {
      const std::string first = read_file(first_pid_file);
      if (!first.empty()) kill(pid_t(std::stol(first)), SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{pid, pid1};
  const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  const auto port_in = [&](const std::string& out) {
    for (int i = 0; i < 1000; ++i) {
      std::smatch m;
      const std::string text = read_file(out);
      if (std::regex_search(text, m, listening)) return std::stoi(m[1]);
      if (waitpid(pid, nullptr, WNOHANG) == pid) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  };
  const int port = port_in(out1);
  if (port < 0) GTEST_SKIP() << "SKIPPED: no tmpfs in a user namespace here (unshare -rm): " << read_file(out1);
  ASSERT_GT(port, 0) << read_file(out1);

  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(std::chrono::seconds(30));
  std::mt19937 rng(41);
  std::vector<std::string> pgms, stored;
  std::string refused;
  for (int i = 0; i < 24 && refused.empty(); ++i) {
    const std::string id = "p" + std::to_string(i);
    pgms.push_back(test::pgm_bytes(test::random_texture(rng)));
    const httplib::Result r = c.Post(("/v1/products/" + id).c_str(), pgms.back(), "image/x-portable-graymap");
    ASSERT_TRUE(r);
    if (r->status == 201) {
      stored.push_back(id);
      continue;
    }
    ASSERT_EQ(r->status, 507) << r->body;
    refused = id;
    EXPECT_EQ(r->get_header_value("Retry-After"), "60");
    EXPECT_EQ(r->body.find(mnt), std::string::npos) << "the server's path in " << r->body;
    EXPECT_EQ(r->body.find("/g/"), std::string::npos) << r->body;
    EXPECT_NE(r->body.find("disk is full"), std::string::npos) << r->body;
  }
  ASSERT_FALSE(refused.empty()) << "24 products fitted on 1.5 MB?";
  ASSERT_GE(stored.size(), 2u);
  EXPECT_NE(read_file(out1).find("No space left on device"), std::string::npos)
      << "the log says why: " << read_file(out1);
  ASSERT_EQ(c.Get("/healthz")->status, 200);
  for (const std::string& id : stored) EXPECT_EQ(c.Get(("/v1/products/" + id).c_str())->status, 200) << id;
  EXPECT_EQ(c.Get(("/v1/products/" + refused).c_str())->status, 404);
  const httplib::Result s = c.Post("/v1/search", pgms[0], "image/x-portable-graymap");
  ASSERT_TRUE(s);
  EXPECT_EQ(nlohmann::json::parse(s->body)["id"], stored[0]) << s->body;

  // The same disk, a second server: what was acknowledged, and nothing else.
  ASSERT_EQ(kill(std::stoi(read_file(pid1)), SIGTERM), 0);
  const int port2 = port_in(out2);
  ASSERT_GT(port2, 0) << read_file(out1) << read_file(out2);
  std::filesystem::remove(pid1);  // the first has exited (the second starts after it): no pid to reap
  httplib::Client c2("127.0.0.1", port2);
  c2.set_read_timeout(std::chrono::seconds(30));
  for (const std::string& id : stored) EXPECT_EQ(c2.Get(("/v1/products/" + id).c_str())->status, 200) << id;
  EXPECT_EQ(c2.Get(("/v1/products/" + refused).c_str())->status, 404) << "answered 507, enrolled after a restart";
  const httplib::Result stats = c2.Get("/v1/stats");
  ASSERT_TRUE(stats);
  EXPECT_EQ(nlohmann::json::parse(stats->body)["images"], stored.size()) << stats->body;
}

TEST(ServeCli, RefusesUnsafeAndWrongCommandLines) {
  TempDir dir;
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"--gallery G --listen 0.0.0.0:0", "reachable from other hosts: give --keys FILE"},
      {"", "give one of --gallery DIR and --redis URL"},
      {"--gallery G --listen nowhere", "--listen takes HOST:PORT"},
      {"--gallery G --listen 127.0.0.1:70000", "port"},
      {"--gallery G --keys " + dir.file("absent"), "cannot read the API key file"},
      {"--gallery G --threads 0", "--threads"},
      {"--gallery G --shards 2", "--shards goes with --redis"},
      {"--gallery G --digest-rows 100", "--digest-rows: 100 is not a divisor of 768"},
      {"--gallery G --digest-candidates -1", "--digest-candidates"},
      {"--gallery G --stream-digests", "--stream-digests needs --digest-rows"},
      {"--redis redis://127.0.0.1:1 --digest-rows 256", "--digest-rows goes with --gallery"},
      {"--gallery G --bogus", "unknown option '--bogus'"},
      {"--gallery G --gpu-extractors 0", "--gpu-extractors takes an integer in 1..64, not '0'"},
      {"--gallery G --gpu-extractors 65", "--gpu-extractors takes an integer in 1..64"},
      {"--gallery G --gpu-wait sleep", "--gpu-wait: 'sleep' is not a GPU wait (auto, spin, yield or block)"},
      {"--gallery G --verify-lanes 0", "--verify-lanes takes an integer in 1..64, not '0'"},
      {"--redis redis://127.0.0.1:1 --verify-lanes 2", "--verify-lanes goes with --gallery"},
      {"--sentinel 127.0.0.1:26379 --master prism --gallery G", "give one of --gallery DIR and --redis URL"},
  };
  for (const Case& k : cases) {
    std::string output;
    const int rc = test::run_command(
        "cd '" + dir.path().string() + "' && '" + PRISM_EXE + "' texture serve " + k.args + " 2>&1", output);
    EXPECT_EQ(rc, 2) << k.args << "\n" << output;
    EXPECT_NE(output.find(k.expect), std::string::npos) << k.args << "\n" << output;
  }
}

// --sentinel HOST:PORT,... --master NAME (a Redis that fails over) instead of --redis URL, on the
// front and the worker alike: each mistake is refused before anything starts, naming the flag.
TEST(ServeCli, SentinelFlagsAreCheckedNamingTheFlag) {
  TempDir dir;
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"--sentinel 127.0.0.1:26379", "--sentinel needs --master NAME"},
      {"--redis redis://127.0.0.1:6379 --sentinel 127.0.0.1:26379 --master prism",
       "give one of --redis URL and --sentinel HOST:PORT,... --master NAME, not both"},
      {"--sentinel 127.0.0.1 --master prism", "--sentinel takes HOST:PORT[,HOST:PORT...]"},
      {"--sentinel 127.0.0.1:26379,10.0.0.6:0 --master prism", "'10.0.0.6:0': port '0' is not in 1..65535"},
      {"--sentinel 127.0.0.1:26379,,127.0.0.1:26380 --master prism", "--sentinel takes HOST:PORT"},
      {"--master prism --redis redis://127.0.0.1:6379", "--master goes with --sentinel"},
      {"--sentinel 127.0.0.1:26379 --master 'a b'", "--master: invalid name 'a b'"},
      {"--redis redis://127.0.0.1:6379 --redis-user prism-front", "--redis-user goes with --sentinel"},
      {"--redis redis://127.0.0.1:6379 --redis-db 2", "--redis-db goes with --sentinel"},
      {"--sentinel 127.0.0.1:26379 --master prism --redis-db x", "--redis-db takes an integer"},
      // A user and no password anywhere: named before Redis is asked.
      {"--sentinel 127.0.0.1:26379 --master prism --redis-user prism-front", "without a password"},
  };
  for (const char* command : {"serve", "shard --shard 0 --gallery G"})
    for (const Case& k : cases) {
      std::string output;
      const int rc = test::run_command("cd '" + dir.path().string() + "' && env -u PRISM_REDIS_PASSWORD '" + PRISM_EXE +
                                           "' texture " + command + " " + k.args + " 2>&1",
                                       output);
      EXPECT_EQ(rc, 2) << command << " " << k.args << "\n" << output;
      EXPECT_NE(output.find(k.expect), std::string::npos) << command << " " << k.args << "\n" << output;
      EXPECT_NE(output.find("--sentinel HOST:PORT[,HOST:PORT...]"), std::string::npos) << "usage shown\n" << output;
    }
}

}  // namespace
}  // namespace prism::service
