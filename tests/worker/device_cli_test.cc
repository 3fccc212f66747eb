// groupsgd-worker --device from the command line: a device it cannot use is refused before
// it registers (exit 2, one clear line), and the binary never links cuBLAS, cuDNN or libcuda
// (the CUDA models are dlopen()ed), so it starts on any machine.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "groupsgd/kernels/model_device.h"

namespace {

struct Run {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command, stdout and stderr together.
Run run(const std::string& command) {
  Run r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, got);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// An endpoint nothing listens on: a worker that got past the device check would retry
// registering for --connect-timeout-ms (1 s here) and exit 1, not 2.
const std::string kArgs = " --coordinator tcp://127.0.0.1:1 --connect-timeout-ms 1000";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("worker cli: a malformed --device exits 2 naming the option") {
  const Run r = run(std::string(WORKER_PATH) + " --device tpu" + kArgs);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "--device"));
  CHECK(contains(r.output, "'tpu'"));
}

TEST_CASE("worker cli: --device cuda without a usable GPU exits 2 with one clear line") {
  groupsgd::kernels::KernelStatus st =
      groupsgd::kernels::checkModelDevice({groupsgd::kernels::Backend::kCuda, 0});
  if (st.ok()) {
    MESSAGE("a usable GPU is present; checking an absent device number instead");
    const Run r = run(std::string(WORKER_PATH) + " --device cuda:1023" + kArgs);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "groupsgd-worker: --device cuda:1023: "));
    CHECK(contains(r.output, "does not exist"));
    return;
  }
  const Run r = run(std::string(WORKER_PATH) + " --device cuda" + kArgs);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.output, "groupsgd-worker: --device cuda:0: "));
  CHECK(contains(r.output, st.message));  // the reason, as checkModelDevice gives it
  CHECK(contains(r.output, "use --device cpu"));
  // One line, not a log of retries.
  CHECK(r.output.find('\n') == r.output.size() - 1);
}

TEST_CASE("worker cli: the worker binary links no cuBLAS, cuDNN or CUDA driver") {
  const Run r = run(std::string("ldd ") + WORKER_PATH);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(contains(r.output, "libcublas"));
  CHECK_FALSE(contains(r.output, "libcudnn"));
  CHECK_FALSE(contains(r.output, "libcuda.so"));
}

TEST_CASE("worker cli: --device cuda with the model library missing exits 2 saying so") {
  const Run r = run("GROUPSGD_GPU_MODELS_LIB=/nonexistent/libgroupsgd-gpu-models.so " +
                    std::string(WORKER_PATH) + " --device cuda" + kArgs);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  // A build without the CUDA models never looks for the library.
  const bool says = contains(r.output, "cannot load libgroupsgd-gpu-models.so: /nonexistent") ||
                    contains(r.output, "no CUDA models");
  CHECK(says);
}
