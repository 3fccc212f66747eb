// A fatal signal leaves a report on stderr and the process still dies of that signal.
#include "groupsgd/common/crash_report.h"

#include <doctest/doctest.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "groupsgd/common/log.h"

namespace {

// Runs `crash` in a child whose stderr is a pipe; returns what it wrote and its status.
std::string crashChild(int sig, int* status) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    groupsgd::log::setThreadTag("crash-test");
    groupsgd::installCrashReport("crash-test-program");
    raise(sig);
    _exit(0);  // not reached: the signal's default action ends the child
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  REQUIRE(waitpid(pid, status, 0) == pid);
  return out;
}

}  // namespace

// SIGABRT and SIGILL: the signals sanitizer runtimes leave to the program by default.
TEST_CASE("crash report: a fatal signal writes the program, signal, thread and stack, then kills") {
  for (int sig : {SIGABRT, SIGILL}) {
    int status = 0;
    const std::string out = crashChild(sig, &status);
    CAPTURE(out);
    CHECK(out.find("crash-test-program: fatal signal " + std::to_string(sig)) != std::string::npos);
    CHECK(out.find(sigabbrev_np(sig)) != std::string::npos);
    CHECK(out.find("thread crash-test") != std::string::npos);
    CHECK(out.find("stack:") != std::string::npos);
    std::size_t frames = 0;  // "binary(+offset) [0xaddress]", one line per frame
    for (std::size_t at = out.find("[0x"); at != std::string::npos; at = out.find("[0x", at + 1)) {
      ++frames;
    }
    CHECK(frames >= 3);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);  // the exit status a supervisor sees is unchanged
  }
}
