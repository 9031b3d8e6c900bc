// `prism texture serve` as a user starts it: the binary of this build on a free port of 127.0.0.1,
// requests through a real client, SIGTERM ends it with status 0; refusals of unsafe or wrong
// command lines.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
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

TEST(ServeCli, ServesUntilSigterm) {
  TempDir dir;
  const std::string out = dir.file("out.txt");
  const std::string cmd = std::string("exec '") + PRISM_EXE + "' texture serve --gallery '" + dir.file("g") +
                          "' --listen 127.0.0.1:0 --device cpu --host-memory 64M > '" + out + "' 2>&1";
  pid_t pid = 0;
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  int port = 0;
  const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  for (int i = 0; i < 1000 && !port; ++i) {  // at most 10 s to start
    std::smatch m;
    const std::string text = read_file(out);
    if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(port, 0) << read_file(out);
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
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(pid, 20), 0) << read_file(out);
  EXPECT_NE(read_file(out).find("stopped"), std::string::npos);
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
  };
  for (const Case& k : cases) {
    std::string output;
    const int rc = test::run_command(
        "cd '" + dir.path().string() + "' && '" + PRISM_EXE + "' texture serve " + k.args + " 2>&1", output);
    EXPECT_EQ(rc, 2) << k.args << "\n" << output;
    EXPECT_NE(output.find(k.expect), std::string::npos) << k.args << "\n" << output;
  }
}

}  // namespace
}  // namespace prism::service
