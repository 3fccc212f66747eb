// The kernels' size contracts hold in release builds: a mismatched call aborts with a
// line naming the broken contract instead of reading or writing past a buffer. Each
// case runs the bad call in a forked child and checks that it died of SIGABRT with the
// message on its stderr.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/ops.h"
#include "groupsgd/kernels/optimizer.h"

using namespace groupsgd::kernels;

namespace {

struct Death {
  bool aborted = false;
  std::string stderr_text;
};

Death runInChild(const std::function<void()>& bad_call) {
  char path[] = "/tmp/groupsgd-contract.XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fd, 2);
    bad_call();
    ::_exit(0);  // survived: the contract was not checked
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Death d;
  d.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0) d.stderr_text.assign(buf, static_cast<std::size_t>(n));
  ::close(fd);
  ::unlink(path);
  return d;
}

}  // namespace

TEST_CASE("kernel contracts: mismatched sizes abort with the contract named") {
  std::vector<float> four(4, 1.0f), three(3, 1.0f), out(4);
  const std::vector<std::pair<const char*, std::function<void()>>> calls = {
      {"axpy", [&] { axpy(1.0f, three, four); }},
      {"copy", [&] { copy(three, four); }},
      {"subtract", [&] { subtract(four, three, out); }},
      {"rebase", [&] { rebase(four, four, three, out); }},
      {"weightedSum",
       [&] {
         const std::vector<std::span<const float>> in = {three};
         const std::vector<float> w = {1.0f};
         weightedSum(in, w, out);
       }},
      {"optimizer step",
       [&] {
         Optimizer opt(OptimizerConfig{}, 4);
         opt.step(out, three);
       }},
      {"model lossAndGrad",
       [&] {
         auto m = makeModel(ModelKind::kSoftmax, 4, 2);
         std::vector<float> params(m->paramCount()), grad(m->paramCount() - 1), x(4, 0.5f);
         std::vector<std::int32_t> y = {1};
         m->lossAndGrad(params, x.data(), y.data(), 1, grad);
       }},
  };
  for (const auto& [name, call] : calls) {
    INFO(name);
    const Death d = runInChild(call);
    CHECK(d.aborted);
    CHECK(d.stderr_text.find("groupsgd kernels: contract violated: ") != std::string::npos);
  }
}

TEST_CASE("kernel contracts: matching sizes pass (the check costs one comparison)") {
  std::vector<float> x(5, 2.0f), y(5, 1.0f);
  axpy(0.5f, x, y);
  CHECK(y[4] == 2.0f);
}
