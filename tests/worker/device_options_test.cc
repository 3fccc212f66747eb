// --device: where the worker computes its gradients.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "groupsgd/worker/options.h"

using namespace groupsgd;
using namespace groupsgd::worker;

TEST_CASE("worker options: --device defaults to cpu and takes cpu, cuda and cuda:N") {
  auto def = parseWorkerOptions({});
  REQUIRE(def.isOk());
  CHECK(def->device.backend == kernels::Backend::kCpu);
  struct Case {
    const char* text;
    kernels::Backend backend;
    int index;
  };
  for (const Case& c :
       {Case{"cpu", kernels::Backend::kCpu, 0}, Case{"cuda", kernels::Backend::kCuda, 0},
        Case{"cuda:0", kernels::Backend::kCuda, 0}, Case{"cuda:3", kernels::Backend::kCuda, 3},
        Case{"cuda:1023", kernels::Backend::kCuda, 1023}}) {
    INFO(c.text);
    auto o = parseWorkerOptions({"--device", c.text});
    REQUIRE(o.isOk());
    CHECK(o->device.backend == c.backend);
    CHECK(o->device.index == c.index);
  }
}

TEST_CASE("worker options: a bad --device is refused with a message naming it") {
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:1024", "cuda:x", "cuda:1 ",
                          "cuda0", "cpu:0", "cuda:00001"}) {
    INFO("'" << bad << "'");
    auto o = parseWorkerOptions({"--device", bad});
    REQUIRE_FALSE(o.isOk());
    CHECK(o.status().code() == Code::kInvalidArgument);
    CHECK(o.status().message().find("--device") != std::string::npos);
    CHECK(o.status().message().find("'" + std::string(bad) + "'") != std::string::npos);
  }
  auto missing = parseWorkerOptions({"--device"});
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.status().message().find("needs a value") != std::string::npos);
}

TEST_CASE("worker options: --help documents --device") {
  CHECK(std::string(workerUsage()).find("--device D") != std::string::npos);
}
