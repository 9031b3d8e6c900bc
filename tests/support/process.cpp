#include "process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace prism::test {

int run_command(const std::string& cmd, std::string& output) {
  output.clear();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) output.append(buf, n);
  const int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int run_command_to_closed_pipe(const std::string& cmd, std::string& errors, int seconds) {
  errors.clear();
  int out[2], err[2];
  if (pipe(out) != 0) return -1;
  if (pipe(err) != 0) {
    close(out[0]);
    close(out[1]);
    return -1;
  }
  close(out[0]);  // no reader, ever
  const std::string limit = std::to_string(seconds);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[1]);
    close(err[0]);
    close(err[1]);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // timeout(1) exits with the command's status, 128 + N for a signal
    execlp("timeout", "timeout", "-s", "KILL", limit.c_str(), "/bin/sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(err[0]);
    return -1;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(err[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) errors.append(buf, size_t(n));
  close(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace prism::test
