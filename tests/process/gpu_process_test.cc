// Training end to end with trainers on a GPU (groupsgd-worker --device cuda): the daemon,
// two CUDA trainers (one mlp job, one cnn job) and the CPU evaluator reach the target.
// Skipped (doctest skip) without a usable GPU or without the CUDA models in the build.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "groupsgd/kernels/model_device.h"

using namespace std::chrono_literals;
using nlohmann::json;
using namespace groupsgd::testing;

namespace {

bool noGpu() {
  static const bool none = [] {
    const auto st = groupsgd::kernels::checkModelDevice({groupsgd::kernels::Backend::kCuda, 0});
    if (!st.ok()) std::fprintf(stderr, "gpu process tests skipped: %s\n", st.message.c_str());
    return !st.ok();
  }();
  return none;
}

// Trains `model` with two CUDA trainers until 0.80 test accuracy; returns the summary.
json trainOnGpu(const std::string& model) {
  const std::string dir = makeTempDir();
  auto daemon =
      startDaemon(dir, "daemon.log",
                  {"--progress-ms", "0", "--heartbeat-ms", "300", "--mode", "sync", "--workers",
                   "2", "--model", model, "--target-acc", "0.80", "--max-seconds", "120"},
                  DaemonFiles{.control_socket = false});
  const std::string endpoint = endpointIn(dir);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", endpoint, "--device", "cuda"},
        dir + "/worker-" + std::to_string(i) + ".log"));
  }
  Process evaluator(
      {WORKER_PATH, "--coordinator", endpoint, "--evaluate", "--eval-interval-ms", "200"},
      dir + "/evaluator.log");
  const auto rc = daemon->wait(150000ms);
  REQUIRE_MESSAGE(rc.has_value(), "the daemon did not stop in time");
  CHECK(*rc == 0);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const std::string log = readFile(dir + "/worker-" + std::to_string(i) + ".log");
    CHECK_MESSAGE(workers[i]->wait(15000ms) == std::optional<int>(0),
                  "worker " << i << ": " << log);
    CHECK_MESSAGE(log.find("runs on cuda:0") != std::string::npos, log);
  }
  json s = readSummary(dir);
  removeTestDir(dir);
  return s;
}

}  // namespace

TEST_CASE("process: mlp trainers on the GPU reach 0.80 test accuracy" * doctest::skip(noGpu())) {
  const json s = trainOnGpu("mlp");
  INFO("summary: " << s.dump());
  CHECK(s["reached"].get<bool>());
}

TEST_CASE("process: cnn trainers on the GPU reach 0.80 test accuracy" * doctest::skip(noGpu())) {
  const json s = trainOnGpu("cnn");
  INFO("summary: " << s.dump());
  CHECK(s["reached"].get<bool>());
}
