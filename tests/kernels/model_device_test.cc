// model_device.h on any machine: parsing, the CPU path, and the answers without a GPU.
#include "groupsgd/kernels/model_device.h"

#include <doctest/doctest.h>

#include <string>

#include "groupsgd/kernels/device.h"

using namespace groupsgd::kernels;

TEST_CASE("model device: names round-trip and bad names are refused") {
  for (const char* name : {"cpu", "cuda:0", "cuda:7", "cuda:1023"}) {
    ModelDevice d;
    REQUIRE(parseModelDevice(name, &d).ok());
    CHECK(modelDeviceName(d) == name);
  }
  ModelDevice d{Backend::kCuda, 5};
  REQUIRE(parseModelDevice("cuda", &d).ok());
  CHECK(modelDeviceName(d) == "cuda:0");
  for (const char* bad : {"", "gpu", "cuda:", "cuda:+1", "cuda:1024", "cuda:99999", " cpu"}) {
    INFO("'" << bad << "'");
    const KernelStatus st = parseModelDevice(bad, &d);
    CHECK(st.code == KernelStatus::Code::kInvalidArgument);
    CHECK(st.message.find("cpu, cuda or cuda:N") != std::string::npos);
  }
}

TEST_CASE("model device: the CPU makes the reference models") {
  CHECK(checkModelDevice(ModelDevice{}).ok());
  std::unique_ptr<Model> m;
  REQUIRE(makeModelOn(ModelDevice{}, ModelKind::kMlp, 784, 10, &m).ok());
  REQUIRE(m != nullptr);
  CHECK(m->paramCount() == makeModel(ModelKind::kMlp)->paramCount());
  CHECK(m->deviceStatus().ok());
  m.reset();
  const KernelStatus st = makeModelOn(ModelDevice{}, ModelKind::kCnn, 20, 10, &m);
  CHECK(st.code == KernelStatus::Code::kInvalidArgument);
  CHECK(st.message.find("square images") != std::string::npos);
  CHECK(m == nullptr);
}

TEST_CASE("model device: without a usable GPU, cuda is unavailable with the reason") {
  std::string why;
  if (cudaAvailable(&why)) {
    MESSAGE("a GPU is present: test_kernels_cuda_models covers this machine");
    return;
  }
  const KernelStatus st = checkModelDevice(ModelDevice{Backend::kCuda, 0});
  INFO(st.message);
  CHECK(st.code == KernelStatus::Code::kUnavailable);
  const bool says_why = st.message.find("no usable GPU: " + why) != std::string::npos ||
                        st.message.find("no CUDA models") != std::string::npos;
  CHECK(says_why);
  std::unique_ptr<Model> m;
  CHECK(makeModelOn(ModelDevice{Backend::kCuda, 0}, ModelKind::kMlp, 784, 10, &m).code ==
        KernelStatus::Code::kUnavailable);
  CHECK(m == nullptr);
}
