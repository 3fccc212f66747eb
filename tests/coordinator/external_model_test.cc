// Model "external": the configuration key and the check every registration passes.
#include "groupsgd/coordinator/external_model.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <capnp/message.h>
#include <nlohmann/json.hpp>

#include "groupsgd/daemon/config.h"

using namespace groupsgd;
using namespace groupsgd::daemon;
using namespace groupsgd::coordinator;

namespace {

Status check(const DaemonConfig& cfg, proto::Role role, std::uint64_t count, const char* fp) {
  Topology topo;
  topo.param_count = 100;
  topo.model_fingerprint = cfg.external_model ? "abc" : "";
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<proto::Register>();
  r.setRole(role);
  r.setParamCount(count);
  r.setModelFingerprint(fp);
  return checkWorkerModel(cfg, topo, r.asReader());
}

}  // namespace

TEST_CASE("external model: the config key and flag, its JSON form, with every role") {
  DaemonConfig cfg;
  REQUIRE(applyJson(nlohmann::json{{"model", "external"}}, &cfg).isOk());
  CHECK(cfg.external_model);
  CHECK(toJson(cfg)["model"] == "external");
  CHECK(validate(cfg).isOk());
  // Nodes learn the model's size from the head, whose first worker brought it.
  cfg.role = "coordinator";
  CHECK(validate(cfg).isOk());
  cfg.role = "node";
  cfg.coordinator = "tcp://127.0.0.1:5555";
  cfg.node_groups = 1;
  CHECK(validate(cfg).isOk());
  DaemonConfig flags;
  bool help = false;
  REQUIRE(applyFlags({"--model", "external"}, &flags, &help).isOk());
  CHECK(flags.external_model);
  REQUIRE(applyFlags({"--model", "mlp"}, &flags, &help).isOk());
  CHECK_FALSE(flags.external_model);
  Status bad = applyJson(nlohmann::json{{"model", "resnet"}}, &flags);
  CHECK(bad.message().find("external") != std::string::npos);
}

TEST_CASE("external model: a registration must state the same count and fingerprint") {
  DaemonConfig ext;
  ext.external_model = true;
  CHECK(check(ext, proto::Role::TRAINER, 100, "abc").isOk());
  CHECK(check(ext, proto::Role::EVALUATOR, 100, "abc").isOk());
  Status count = check(ext, proto::Role::TRAINER, 99, "abc");
  CHECK(count.code() == Code::kFailedPrecondition);
  CHECK(count.message().find("model mismatch") != std::string::npos);
  CHECK(check(ext, proto::Role::TRAINER, 100, "abd").message().find("fingerprint abd") !=
        std::string::npos);
  // A built-in worker states nothing: refused with what to use instead.
  CHECK(check(ext, proto::Role::TRAINER, 0, "").message().find("states none") != std::string::npos);
  // Tools and nodes carry no model.
  CHECK(check(ext, proto::Role::TOOL, 0, "").isOk());
}

TEST_CASE("external model: a built-in daemon refuses a worker stating another size") {
  DaemonConfig builtin;  // mlp
  CHECK(check(builtin, proto::Role::TRAINER, 0, "").isOk());
  CHECK(check(builtin, proto::Role::TRAINER, 100, "x").isOk());
  Status s = check(builtin, proto::Role::TRAINER, 7, "x");
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message().find("built-in model 'mlp'") != std::string::npos);
}

TEST_CASE("external model: the model file is read, and a bad one refused with the reason") {
  const std::string path = "/tmp/groupsgd_external_model_test_" + std::to_string(::getpid());
  auto write = [&](const std::string& head, std::vector<float> values) {
    std::ofstream f(path, std::ios::binary);
    f << head;
    f.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  };
  write("groupsgd-model 1 3 abc\n", {1.f, 2.f, 3.f});
  auto m = loadExternalModelFile(path);
  REQUIRE(m);
  CHECK(m->initial == std::vector<float>{1.f, 2.f, 3.f});
  CHECK(m->fingerprint == "abc");
  write("groupsgd-model 1 4 abc\n", {1.f, 2.f, 3.f});
  CHECK(loadExternalModelFile(path).status().message().find("different amount") !=
        std::string::npos);
  write("groupsgd-model 1 2 abc\n", {1.f, 2.f, 3.f});
  CHECK_FALSE(loadExternalModelFile(path));
  write("not a model\n", {1.f});
  CHECK(loadExternalModelFile(path).status().message().find("not a groupsgd model file") !=
        std::string::npos);
  write("groupsgd-model 1 2 abc\n", {1.f, std::nanf("")});
  CHECK(loadExternalModelFile(path).status().message().find("finite") != std::string::npos);
  ExternalModel saved;
  saved.initial = {0.5f, -1.f, 4.f, 1e-7f};
  saved.fingerprint = "f00d";
  REQUIRE(saveExternalModelFile(path, saved).isOk());
  auto again = loadExternalModelFile(path);
  REQUIRE(again);
  CHECK(again->initial == saved.initial);
  CHECK(again->fingerprint == "f00d");
  std::remove(path.c_str());
  CHECK(loadExternalModelFile(path).status().code() == Code::kNotFound);
  DaemonConfig cfg;
  cfg.external_model_file = path;
  CHECK(validate(cfg).message().find("needs model external") != std::string::npos);
}

TEST_CASE("external model: a mismatch names the first parameter that differs") {
  const std::string daemon = "0.weight:8x784:float32\n0.bias:8:float32\n1.weight:10x8:float32";
  CHECK(firstLayoutDifference(daemon, daemon).empty());
  CHECK(firstLayoutDifference("", daemon).empty());  // a model file states no layout
  CHECK(firstLayoutDifference(daemon, "0.weight:9x784:float32\n0.bias:9:float32") ==
        "parameter '0.weight' is 9x784 in this worker, 8x784 in the daemon's model");
  CHECK(firstLayoutDifference(daemon, "0.weight:8x784:float32\nb:8:float32") ==
        "parameter 1 is 'b' (8) in this worker, '0.bias' (8) in the daemon's model");
  CHECK(firstLayoutDifference(daemon, "0.weight:8x784:float32\n0.bias:8:float32") ==
        "parameter '1.weight' (10x8) of the daemon's model is missing in this worker");
  CHECK(firstLayoutDifference(daemon, daemon + "\nscale::float32") ==
        "parameter 'scale' (scalar) of this worker is not in the daemon's model");
  CHECK(firstLayoutDifference(daemon, "0.weight:8x784:float64") ==
        "parameter '0.weight' is 8x784 float64 in this worker, 8x784 in the daemon's model");
}
