#include "groupsgd/daemon/config.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::daemon;
using groupsgd::testing::TempDir;
using nlohmann::json;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A refusal: kInvalidArgument, its message naming `mentions`.
void checkRefused(const Status& s, const std::string& mentions) {
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), mentions));
}

}  // namespace

TEST_CASE("daemon config: the defaults are valid") {
  DaemonConfig cfg;
  CHECK(validate(cfg).isOk());
  CHECK(cfg.mode == Mode::kGrouped);
  CHECK(cfg.role == "all");
  CHECK(cfg.workers == 4);
  CHECK(cfg.groups == 2);
  CHECK(cfg.batch_size == 32);
}

TEST_CASE("daemon config: mode names parse and round-trip") {
  for (Mode m : {Mode::kSync, Mode::kAsync, Mode::kGrouped}) {
    Mode parsed = m == Mode::kSync ? Mode::kAsync : Mode::kSync;
    REQUIRE(parseMode(modeName(m), &parsed));
    CHECK(parsed == m);
  }
  Mode m = Mode::kAsync;
  CHECK_FALSE(parseMode("Sync", &m));
  CHECK_FALSE(parseMode("", &m));
  CHECK(m == Mode::kAsync);
}

TEST_CASE("daemon config: applyJson sets top-level, optimizer and staleness fields") {
  DaemonConfig cfg;
  const json j = json::parse(R"({
    "job_id": 9, "mode": "async", "workers": 6, "groups": 3, "exchange_period": 4,
    "batch_size": 16, "model": "softmax", "seed": 77, "listen": "tcp://127.0.0.1:0",
    "optimizer": {"kind": "nesterov", "lr": 0.25, "momentum": 0.5, "weight_decay": 0.125},
    "outer_optimizer": {"kind": "momentum", "lr": 0.75},
    "staleness": {"rule": "grace", "max": 8, "grace": 2, "measure": "versions"},
    "target_acc": 0.9, "max_samples": 1000, "json": true, "log_level": "debug"
  })");
  REQUIRE(applyJson(j, &cfg).isOk());
  CHECK(cfg.job_id == 9);
  CHECK(cfg.mode == Mode::kAsync);
  CHECK(cfg.workers == 6);
  CHECK(cfg.groups == 3);
  CHECK(cfg.exchange_period == 4);
  CHECK(cfg.batch_size == 16);
  CHECK(cfg.model == kernels::ModelKind::kSoftmax);
  CHECK(cfg.seed == 77);
  CHECK(cfg.listen == "tcp://127.0.0.1:0");
  CHECK(cfg.optimizer.kind == kernels::OptimizerKind::kNesterov);
  CHECK(cfg.optimizer.lr == 0.25f);
  CHECK(cfg.optimizer.momentum == 0.5f);
  CHECK(cfg.optimizer.weight_decay == 0.125f);
  CHECK(cfg.outer_optimizer.kind == kernels::OptimizerKind::kMomentum);
  CHECK(cfg.outer_optimizer.lr == 0.75f);
  CHECK(cfg.outer_optimizer.momentum == 0.0f);  // untouched: the default outer momentum
  CHECK(cfg.staleness.rule == centralps::StalenessRule::kGrace);
  CHECK(cfg.staleness.max_staleness == 8);
  CHECK(cfg.staleness.grace == 2);
  CHECK(cfg.staleness.measure == centralps::StalenessMeasure::kVersions);
  CHECK(cfg.target_acc == 0.9);
  CHECK(cfg.max_samples == 1000);
  CHECK(cfg.json);
  CHECK(cfg.log_level == "debug");
  CHECK(validate(cfg).isOk());
}

TEST_CASE("daemon config: a nested object only changes the keys it names") {
  DaemonConfig cfg;
  REQUIRE(applyJson(json::parse(R"({"optimizer": {"lr": 0.5}})"), &cfg).isOk());
  CHECK(cfg.optimizer.lr == 0.5f);
  CHECK(cfg.optimizer.kind == kernels::OptimizerKind::kMomentum);
  CHECK(cfg.optimizer.momentum == 0.9f);
}

TEST_CASE("daemon config: an unknown key is refused, naming the key") {
  DaemonConfig cfg;
  checkRefused(applyJson(json::parse(R"({"workers": 2, "grups": 3})"), &cfg), "grups");

  Status nested = applyJson(json::parse(R"({"optimizer": {"learning_rate": 0.1}})"), &cfg);
  CHECK(nested.code() == Code::kInvalidArgument);
  CHECK(contains(nested.message(), "optimizer.learning_rate"));

  Status stale = applyJson(json::parse(R"({"staleness": {"maximum": 3}})"), &cfg);
  CHECK(stale.code() == Code::kInvalidArgument);
  CHECK(contains(stale.message(), "staleness.maximum"));
}

TEST_CASE("daemon config: a value of the wrong type is refused") {
  for (const char* text :
       {R"({"workers": "four"})", R"({"role": 5})", R"({"json": 1})", R"({"mode": 2})",
        R"({"batch_size": {"n": 3}})", R"({"optimizer": {"lr": "fast"}})", R"({"optimizer": 0.1})",
        R"({"staleness": {"max": "many"}})", R"({"staleness": "inverse"})",
        R"({"seed": [1, 2]})"}) {
    CAPTURE(text);
    DaemonConfig cfg;
    Status s = applyJson(json::parse(text), &cfg);
    CHECK(s.code() == Code::kInvalidArgument);
  }
}

TEST_CASE("daemon config: bad enum names are refused") {
  DaemonConfig cfg;
  CHECK(applyJson(json::parse(R"({"mode": "parallel"})"), &cfg).code() == Code::kInvalidArgument);
  CHECK(applyJson(json::parse(R"({"model": "resnet"})"), &cfg).code() == Code::kInvalidArgument);
  CHECK(applyJson(json::parse(R"({"optimizer": {"kind": "lamb"}})"), &cfg).code() ==
        Code::kInvalidArgument);
  CHECK(applyJson(json::parse(R"({"staleness": {"rule": "linear"}})"), &cfg).code() ==
        Code::kInvalidArgument);
  Status measure = applyJson(json::parse(R"({"staleness": {"measure": "steps"}})"), &cfg);
  CHECK(measure.code() == Code::kInvalidArgument);
  CHECK(contains(measure.message(), "samples|versions"));
  CHECK(cfg.staleness.measure == centralps::StalenessMeasure::kSamples);  // untouched
}

TEST_CASE("daemon config: a configuration that is not an object is refused") {
  DaemonConfig cfg;
  CHECK(applyJson(json::parse("[1, 2]"), &cfg).code() == Code::kInvalidArgument);
  CHECK(applyJson(json::parse("3"), &cfg).code() == Code::kInvalidArgument);
}

TEST_CASE("daemon config: a missing configuration file is kNotFound") {
  TempDir dir;
  DaemonConfig cfg;
  Status s = loadConfigFile(dir.file("does-not-exist.json"), &cfg);
  CHECK(s.code() == Code::kNotFound);
  CHECK(contains(s.message(), "does-not-exist.json"));
}

TEST_CASE("daemon config: a file that is not valid JSON is kInvalidArgument") {
  TempDir dir;
  DaemonConfig cfg;
  const auto path = dir.write("bad.json", R"({"workers": 3,, })");
  checkRefused(loadConfigFile(path, &cfg), path);
  CHECK(loadConfigFile(dir.write("empty.json", ""), &cfg).code() == Code::kInvalidArgument);
}

TEST_CASE("daemon config: a file may contain // and /* */ comments") {
  TempDir dir;
  DaemonConfig cfg;
  const auto path = dir.write("c.json", R"(// a grouped run
{
  "workers": 8,   // trainers
  /* groups of two */
  "groups": 4
}
)");
  Status s = loadConfigFile(path, &cfg);
  INFO(s.toString());
  REQUIRE(s.isOk());
  CHECK(cfg.workers == 8);
  CHECK(cfg.groups == 4);
}

TEST_CASE("daemon config: an error inside a file names the file and the key") {
  TempDir dir;
  DaemonConfig cfg;
  const auto path = dir.write("typo.json", R"({"exchange_periodd": 2})");
  Status s = loadConfigFile(path, &cfg);
  checkRefused(s, path);
  CHECK(contains(s.message(), "exchange_periodd"));
}

TEST_CASE("daemon config: flags override a --config file wherever it appears") {
  TempDir dir;
  const auto path = dir.write("c.json", R"({"workers": 8, "groups": 4, "batch_size": 64})");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--workers", "6", "--config", path}, {"--config", path, "--workers", "6"}}) {
    DaemonConfig cfg;
    bool help = false;
    Status s = applyFlags(args, &cfg, &help);
    INFO(s.toString());
    REQUIRE(s.isOk());
    CHECK(cfg.workers == 6);      // the flag wins
    CHECK(cfg.groups == 4);       // from the file
    CHECK(cfg.batch_size == 64);  // from the file
    CHECK_FALSE(help);
  }
}

TEST_CASE("daemon config: flags set string and number fields") {
  DaemonConfig cfg;
  bool help = false;
  Status s = applyFlags(
      {"--mode", "sync", "--model", "softmax", "--batch-size", "8", "--target-acc", "0.85",
       "--listen", "tcp://127.0.0.1:0", "--summary-file", "/tmp/x.json", "--max-seconds", "2.5"},
      &cfg, &help);
  INFO(s.toString());
  REQUIRE(s.isOk());
  CHECK(cfg.mode == Mode::kSync);
  CHECK(cfg.model == kernels::ModelKind::kSoftmax);
  CHECK(cfg.batch_size == 8);
  CHECK(cfg.target_acc == 0.85);
  CHECK(cfg.listen == "tcp://127.0.0.1:0");
  CHECK(cfg.summary_file == "/tmp/x.json");
  CHECK(cfg.max_seconds == 2.5);
}

TEST_CASE("daemon config: --json turns on the JSON summary, --help sets help") {
  DaemonConfig cfg;
  bool help = false;
  REQUIRE(applyFlags({"--json"}, &cfg, &help).isOk());
  CHECK(cfg.json);
  CHECK_FALSE(help);
  REQUIRE(applyFlags({"--help"}, &cfg, &help).isOk());
  CHECK(help);
  CHECK(contains(daemonUsage(), "--config"));
}

TEST_CASE("daemon config: an unknown flag is refused, naming it") {
  DaemonConfig cfg;
  bool help = false;
  checkRefused(applyFlags({"--workers", "2", "--wrokers", "3"}, &cfg, &help), "--wrokers");
}

TEST_CASE("daemon config: a flag without a value, or a non-number, is refused") {
  DaemonConfig cfg;
  bool help = false;
  CHECK(applyFlags({"--workers"}, &cfg, &help).code() == Code::kInvalidArgument);
  CHECK(applyFlags({"--config"}, &cfg, &help).code() == Code::kInvalidArgument);
  checkRefused(applyFlags({"--workers", "many"}, &cfg, &help), "--workers");
  CHECK(cfg.workers == 4);
}

TEST_CASE("daemon config: --config with a missing file passes kNotFound through") {
  TempDir dir;
  DaemonConfig cfg;
  bool help = false;
  CHECK(applyFlags({"--config", dir.file("nope.json")}, &cfg, &help).code() == Code::kNotFound);
}

TEST_CASE("daemon config: validate refuses more groups than workers in grouped mode") {
  DaemonConfig cfg;
  cfg.workers = 3;
  cfg.groups = 4;
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  cfg.groups = 3;
  CHECK(validate(cfg).isOk());
  cfg.groups = 0;
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  // Outside grouped mode the groups field is not used.
  cfg.groups = 10;
  cfg.mode = Mode::kAsync;
  CHECK(validate(cfg).isOk());
}

TEST_CASE("daemon config: validate refuses batch 0 and oversized batches") {
  DaemonConfig cfg;
  cfg.batch_size = 0;
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  cfg.batch_size = 65537;
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  cfg.batch_size = 65536;
  CHECK(validate(cfg).isOk());
}

TEST_CASE("daemon config: validate refuses a role other than all, coordinator or node") {
  DaemonConfig cfg;
  cfg.role = "central";
  Status s = validate(cfg);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), "central"));
}

TEST_CASE("daemon config: validate refuses target_acc outside [0, 1]") {
  DaemonConfig cfg;
  cfg.target_acc = 1.01;
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  cfg.target_acc = -0.1;
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  cfg.target_acc = 1.0;
  CHECK(validate(cfg).isOk());
}

TEST_CASE("daemon config: validate refuses zero workers, periods, deadlines and learning rates") {
  auto refused = [](auto mutate) {
    DaemonConfig cfg;
    mutate(cfg);
    return validate(cfg).code() == Code::kInvalidArgument;
  };
  CHECK(refused([](DaemonConfig& c) { c.workers = 0; }));
  CHECK(refused([](DaemonConfig& c) { c.exchange_period = 0; }));
  CHECK(refused([](DaemonConfig& c) { c.step_deadline_ms = 0; }));
  CHECK(refused([](DaemonConfig& c) { c.heartbeat_ms = 0; }));
  CHECK(refused([](DaemonConfig& c) { c.heartbeat_misses = 0; }));
  CHECK(refused([](DaemonConfig& c) { c.optimizer.lr = 0; }));
  CHECK(refused([](DaemonConfig& c) { c.outer_optimizer.lr = -1; }));
}

TEST_CASE("daemon config: adam and adamw keys, inner and outer") {
  DaemonConfig cfg;
  REQUIRE(applyJson(json::parse(R"({
    "optimizer": {"kind": "adamw", "lr": 0.002, "weight_decay": 0.01, "beta1": 0.8,
                  "beta2": 0.99, "eps": 1e-6, "decay_1d": false},
    "outer_optimizer": {"kind": "adam", "beta1": 0.5, "beta2": 0.9, "eps": 0.001,
                        "decay_1d": false}
  })"),
                    &cfg)
              .isOk());
  CHECK(cfg.optimizer.kind == kernels::OptimizerKind::kAdamW);
  CHECK(cfg.optimizer.beta1 == 0.8f);
  CHECK(cfg.optimizer.beta2 == 0.99f);
  CHECK(cfg.optimizer.eps == 1e-6f);
  CHECK_FALSE(cfg.optimizer_decay_1d);
  CHECK(cfg.outer_optimizer.kind == kernels::OptimizerKind::kAdam);
  CHECK(cfg.outer_optimizer.beta1 == 0.5f);
  CHECK(cfg.outer_optimizer.beta2 == 0.9f);
  CHECK(cfg.outer_optimizer.eps == 0.001f);
  CHECK_FALSE(cfg.outer_optimizer_decay_1d);
  CHECK(validate(cfg).isOk());
  // Round trip through the JSON the daemon prints.
  DaemonConfig back;
  REQUIRE(applyJson(toJson(cfg), &back).isOk());
  CHECK(toJson(back) == toJson(cfg));
  // Defaults: torch's.
  const DaemonConfig d;
  CHECK(d.optimizer.beta1 == 0.9f);
  CHECK(d.optimizer.beta2 == 0.999f);
  CHECK(d.optimizer.eps == 1e-8f);
  CHECK(d.optimizer_decay_1d);
  CHECK(d.outer_optimizer_decay_1d);
}

TEST_CASE("daemon config: betas in [0, 1), eps > 0, decay_1d false needs a built-in model") {
  auto why = [](auto mutate) {
    DaemonConfig cfg;
    mutate(cfg);
    return validate(cfg).message();
  };
  CHECK(contains(why([](DaemonConfig& c) { c.optimizer.beta1 = 1.0f; }),
                 "optimizer.beta1 must be in [0, 1)"));
  CHECK(contains(why([](DaemonConfig& c) { c.optimizer.beta2 = -0.1f; }), "optimizer.beta2"));
  CHECK(contains(why([](DaemonConfig& c) { c.outer_optimizer.beta2 = 1.5f; }),
                 "outer_optimizer.beta2"));
  CHECK(
      contains(why([](DaemonConfig& c) { c.optimizer.eps = 0.0f; }), "optimizer.eps must be > 0"));
  CHECK(contains(why([](DaemonConfig& c) { c.outer_optimizer.eps = -1e-8f; }),
                 "outer_optimizer.eps"));
  CHECK(why([](DaemonConfig& c) { c.optimizer.beta1 = 0.0f; }).empty());  // 0 is allowed
  for (bool inner : {true, false}) {
    const std::string m = why([inner](DaemonConfig& c) {
      c.external_model = true;
      (inner ? c.optimizer_decay_1d : c.outer_optimizer_decay_1d) = false;
    });
    CHECK(contains(m, "decay_1d false needs a built-in model"));
  }
  CHECK(why([](DaemonConfig& c) { c.optimizer_decay_1d = false; }).empty());  // mlp: fine
}

TEST_CASE("daemon config: groups and exchange period per mode") {
  DaemonConfig cfg;
  cfg.workers = 6;
  cfg.groups = 3;
  cfg.exchange_period = 5;
  cfg.mode = Mode::kSync;
  CHECK(cfg.groupCount() == 1);
  CHECK(cfg.exchangePeriod() == 1);
  cfg.mode = Mode::kAsync;
  CHECK(cfg.groupCount() == 6);
  CHECK(cfg.exchangePeriod() == 1);
  cfg.mode = Mode::kGrouped;
  CHECK(cfg.groupCount() == 3);
  CHECK(cfg.exchangePeriod() == 5);
}

TEST_CASE("daemon config: toJson reports the effective groups and period, and reads back") {
  DaemonConfig cfg;
  cfg.mode = Mode::kAsync;
  cfg.workers = 5;
  cfg.exchange_period = 7;
  cfg.staleness.rule = centralps::StalenessRule::kConstant;
  cfg.optimizer.lr = 0.25f;
  const json j = toJson(cfg);
  CHECK(j["mode"] == "async");
  CHECK(j["groups"] == 5);
  CHECK(j["exchange_period"] == 1);
  CHECK(j["staleness"]["rule"] == "constant");
  DaemonConfig back;
  REQUIRE(applyJson(j, &back).isOk());
  CHECK(back.mode == Mode::kAsync);
  CHECK(back.workers == 5);
  CHECK(back.optimizer.lr == 0.25f);
  CHECK(back.staleness.rule == centralps::StalenessRule::kConstant);
}

TEST_CASE("daemon config: a negative count is refused instead of wrapping to 2^32 - 1") {
  DaemonConfig cfg;
  checkRefused(applyJson(json::parse(R"({"workers": -1})"), &cfg), "workers");
  CHECK(cfg.workers == 4);
}

TEST_CASE("daemon config: --batch-size -1 is refused instead of wrapping") {
  DaemonConfig cfg;
  bool help = false;
  checkRefused(applyFlags({"--batch-size", "-1"}, &cfg, &help), "batch_size");
  CHECK(cfg.batch_size == 32);
}

TEST_CASE("daemon config: a fractional count is refused instead of truncated") {
  DaemonConfig cfg;
  CHECK(applyJson(json::parse(R"({"workers": 2.7})"), &cfg).code() == Code::kInvalidArgument);
  CHECK(applyJson(json::parse(R"({"staleness": {"max": 1.5}})"), &cfg).code() ==
        Code::kInvalidArgument);
  CHECK(cfg.workers == 4);
}

TEST_CASE("daemon config: a count too large for its 32-bit field is refused") {
  DaemonConfig cfg;
  CHECK(applyJson(json::parse(R"({"batch_size": 4294967296})"), &cfg).code() ==
        Code::kInvalidArgument);
  CHECK(cfg.batch_size == 32);
  REQUIRE(applyJson(json::parse(R"({"max_samples": 4294967296})"), &cfg).isOk());  // 64-bit
  CHECK(cfg.max_samples == 4294967296ull);
}

TEST_CASE("daemon config: a boolean is refused where a count is expected") {
  DaemonConfig cfg;
  CHECK(applyJson(json::parse(R"({"batch_size": true})"), &cfg).code() == Code::kInvalidArgument);
}

TEST_CASE("daemon config: a boolean is refused where a real number is expected") {
  DaemonConfig cfg;
  CHECK(applyJson(json::parse(R"({"target_acc": true})"), &cfg).code() == Code::kInvalidArgument);
  CHECK(cfg.target_acc == 0.0);
}

// ---- Regression tests for bugs found by these tests and since fixed.

TEST_CASE("daemon config: a boolean optimizer setting is refused") {
  // nlohmann's get<float>() (unlike get<double>()) converts true to 1.0f silently.
  DaemonConfig cfg;
  CHECK(applyJson(json::parse(R"({"optimizer": {"lr": true}})"), &cfg).code() ==
        Code::kInvalidArgument);
}

TEST_CASE("daemon config: a learning rate that overflows float is refused") {
  // 1e39 becomes +inf as a float, and validate() only checks lr > 0.
  DaemonConfig cfg;
  Status s = applyJson(json::parse(R"({"optimizer": {"lr": 1e39}})"), &cfg);
  CHECK((s.code() == Code::kInvalidArgument || validate(cfg).code() == Code::kInvalidArgument));
}

TEST_CASE("daemon config: adaptive.max_period_factor defaults to 2, is set, reported and checked") {
  DaemonConfig cfg;
  CHECK(cfg.adaptive.max_period_factor == 2);
  REQUIRE(applyJson(json::parse(R"({"adaptive": {"max_period_factor": 4}})"), &cfg).isOk());
  CHECK(cfg.adaptive.max_period_factor == 4);
  CHECK(toJson(cfg)["adaptive"]["max_period_factor"] == 4);
  cfg.adaptive.max_period_factor = 0;
  Status s = validate(cfg);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), "max_period_factor"));
}

TEST_CASE("daemon config: the step cutoff defaults to 1.5 x, is set, reported and checked") {
  DaemonConfig cfg;
  CHECK(cfg.adaptive.step_cutoff == doctest::Approx(1.5));
  CHECK(cfg.adaptive.step_cutoff_late_fraction == doctest::Approx(0.25));
  REQUIRE(applyJson(
              json::parse(R"({"adaptive": {"step_cutoff": 0, "step_cutoff_late_fraction": 0.5}})"),
              &cfg)
              .isOk());
  CHECK(cfg.adaptive.step_cutoff == 0);  // off
  CHECK(validate(cfg).isOk());
  CHECK(toJson(cfg)["adaptive"]["step_cutoff_late_fraction"] == 0.5);
  for (double bad : {0.5, 1e6, -1.0}) {
    DaemonConfig c;
    c.adaptive.step_cutoff = bad;
    Status s = validate(c);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(contains(s.message(), "step_cutoff"));
  }
  DaemonConfig c;
  Status s = applyJson(json::parse(R"({"adaptive": {"step_cutoff_late_fraction": 0.9}})"), &c);
  if (s) s = validate(c);
  CHECK_FALSE(s.isOk());
  CHECK(contains(s.message(), "step_cutoff_late_fraction"));
}

TEST_CASE(
    "daemon config: the erratic-straggler thresholds are options, set, reported and checked") {
  DaemonConfig cfg;
  CHECK(cfg.adaptive.straggler.erratic_window == 96);
  CHECK(cfg.adaptive.straggler.erratic_clear_window == 192);
  CHECK(cfg.adaptive.straggler.erratic_spikes == 3);
  REQUIRE(applyJson(json::parse(R"({"adaptive": {"straggler_erratic_window": 48,
      "straggler_erratic_clear_window": 100, "straggler_erratic_spikes": 2}})"),
                    &cfg)
              .isOk());
  CHECK(cfg.adaptive.straggler.erratic_window == 48);
  CHECK(cfg.adaptive.straggler.erratic_clear_window == 100);
  CHECK(cfg.adaptive.straggler.erratic_spikes == 2);
  CHECK(toJson(cfg)["adaptive"]["straggler_erratic_clear_window"] == 100);
  CHECK(validate(cfg).isOk());
  cfg.adaptive.straggler.erratic_clear_window = 47;  // clearing on less than the onset window
  Status s = validate(cfg);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), "straggler_erratic_clear_window"));
  cfg.adaptive.straggler.erratic_clear_window = 100;
  cfg.adaptive.straggler.erratic_spikes = 49;  // more spikes than the window holds
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  cfg.adaptive.straggler.erratic_spikes = 2;
  CHECK(cfg.adaptive.straggler.erratic_early_window == 32);
  CHECK(cfg.adaptive.straggler.erratic_early_ratio == 3.0);
  REQUIRE(applyJson(json::parse(R"({"adaptive": {"straggler_erratic_early_window": 24,
      "straggler_erratic_early_ratio": 4}})"),
                    &cfg)
              .isOk());
  CHECK(cfg.adaptive.straggler.erratic_early_window == 24);
  CHECK(toJson(cfg)["adaptive"]["straggler_erratic_early_ratio"] == 4.0);
  CHECK(validate(cfg).isOk());
  cfg.adaptive.straggler.erratic_early_window = 64;  // longer than the full window (48)
  s = validate(cfg);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), "straggler_erratic_early_window"));
  cfg.adaptive.straggler.erratic_early_window = 24;
  cfg.adaptive.straggler.erratic_early_ratio = 1.5;  // below the enter ratio: looser, not stricter
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  cfg.adaptive.straggler.erratic_early_window = 0;  // no early onsets: its ratio is not used
  CHECK(validate(cfg).isOk());
  cfg.adaptive.straggler.erratic_spikes = 49;
  cfg.adaptive.straggler.erratic_window = 0;  // no erratic rule: the others are not used
  CHECK(validate(cfg).isOk());
  cfg.adaptive.straggler.erratic_clear_window = 0;  // below the option's range
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
}

TEST_CASE("daemon config: the lr schedule keys are read, reported and validated") {
  DaemonConfig cfg;
  REQUIRE(applyJson(json::parse(R"({"optimizer": {"lr": 0.2, "schedule": "cosine",
      "warmup_samples": 1000, "schedule_samples": 50000, "min_lr": 0.002,
      "step_samples": 7, "step_gamma": 0.5}})"),
                    &cfg)
              .isOk());
  CHECK(cfg.lr_schedule.kind == groupps::LrScheduleKind::kCosine);
  CHECK(cfg.lr_schedule.warmup_samples == 1000);
  CHECK(cfg.lr_schedule.schedule_samples == 50000);
  CHECK(cfg.lr_schedule.min_lr == 0.002);
  CHECK(cfg.lr_schedule.step_samples == 7);
  CHECK(cfg.lr_schedule.step_gamma == 0.5);
  CHECK(validate(cfg).isOk());
  CHECK(toJson(cfg)["optimizer"]["schedule"] == "cosine");
  CHECK(toJson(cfg)["optimizer"]["lr"].get<double>() == doctest::Approx(0.2));
  CHECK(DaemonConfig{}.lr_schedule.kind == groupps::LrScheduleKind::kConstant);

  bool help = false;
  DaemonConfig flags;
  REQUIRE(applyFlags({"--lr-schedule", "warmup_linear", "--warmup-samples=10", "--min-lr", "0.01",
                      "--schedule-samples", "100"},
                     &flags, &help)
              .isOk());
  CHECK(flags.lr_schedule.kind == groupps::LrScheduleKind::kWarmupLinear);
  CHECK(flags.lr_schedule.warmup_samples == 10);
  CHECK(flags.lr_schedule.schedule_samples == 100);
  CHECK(flags.lr_schedule.min_lr == 0.01);
  CHECK(validate(flags).isOk());
  checkRefused(applyJson(json::parse(R"({"optimizer": {"schedule": "linear"}})"), &cfg),
               "optimizer.schedule must be one of constant|warmup_linear|cosine|step");
}

TEST_CASE("daemon config: a decaying schedule needs an end: schedule_samples or max_samples") {
  for (const char* kind : {"warmup_linear", "cosine"}) {
    CAPTURE(kind);
    DaemonConfig cfg;
    REQUIRE(applyJson(json{{"optimizer", {{"schedule", kind}}}}, &cfg).isOk());
    checkRefused(validate(cfg), "set schedule_samples or max_samples");
    cfg.max_samples = 20000;  // the run's budget is the end
    CHECK(validate(cfg).isOk());
    cfg.max_samples = 0;
    cfg.lr_schedule.schedule_samples = 20000;
    CHECK(validate(cfg).isOk());
    cfg.lr_schedule.warmup_samples = 20000;
    checkRefused(validate(cfg), "not after its warm-up");
  }
  DaemonConfig constant;
  constant.lr_schedule.warmup_samples = 500;  // a constant schedule needs no end
  CHECK(validate(constant).isOk());
}

TEST_CASE("daemon config: step needs step_samples and a gamma in (0, 1]; min_lr within lr") {
  DaemonConfig cfg;
  cfg.lr_schedule.kind = groupps::LrScheduleKind::kStep;
  checkRefused(validate(cfg), "step_samples");
  cfg.lr_schedule.step_samples = 1000;
  CHECK(validate(cfg).isOk());
  cfg.lr_schedule.step_gamma = 1.5;
  checkRefused(validate(cfg), "optimizer.step_gamma must be in (0, 1]");
  cfg.lr_schedule.step_gamma = 0;
  checkRefused(validate(cfg), "optimizer.step_gamma must be in (0, 1]");
  cfg.lr_schedule.step_gamma = 0.5;
  cfg.lr_schedule.min_lr = -0.1;
  checkRefused(validate(cfg), "optimizer.min_lr must be at least 0");
  cfg.lr_schedule.min_lr = 1;  // above lr 0.05: a `set optimizer.lr` below min_lr is refused too
  checkRefused(validate(cfg), "min_lr must be in [0, lr]");
}

TEST_CASE("daemon config: data_allocation is shards or ranges; anything else is refused") {
  DaemonConfig cfg;
  CHECK_FALSE(cfg.data_ranges);
  CHECK(toJson(cfg)["data_allocation"] == "shards");
  REQUIRE(applyJson(json{{"data_allocation", "ranges"}}, &cfg).isOk());
  CHECK(cfg.data_ranges);
  CHECK(toJson(cfg)["data_allocation"] == "ranges");
  bool help = false;
  DaemonConfig flags;
  REQUIRE(applyFlags({"--data-allocation", "ranges"}, &flags, &help).isOk());
  CHECK(flags.data_ranges);
  checkRefused(applyJson(json{{"data_allocation", "chunks"}}, &cfg),
               "data_allocation must be one of shards|ranges, got \"chunks\"");
  checkRefused(applyFlags({"--data-allocation", "equal"}, &flags, &help), "shards|ranges");
}

TEST_CASE(
    "daemon config: compress_gradients auto (the default) is chosen per group in mode "
    "adaptive and dense elsewhere; its threshold a range") {
  DaemonConfig cfg;
  CHECK(cfg.compress_gradients == "auto");
  cfg.mode = Mode::kAdaptive;
  CHECK(validate(cfg).isOk());
  CHECK(gradientCompressionChosenPerGroup(cfg));
  CHECK(fixedGradientCompression(cfg) == "dense");
  for (Mode m : {Mode::kGrouped, Mode::kSync, Mode::kAsync}) {
    cfg.mode = m;  // no controller to measure the links: dense
    CHECK(validate(cfg).isOk());
    CHECK_FALSE(gradientCompressionChosenPerGroup(cfg));
    CHECK(fixedGradientCompression(cfg) == "dense");
  }
  cfg.mode = Mode::kAdaptive;
  cfg.compress_gradients = "fp16";  // a fixed encoding is never chosen over
  CHECK_FALSE(gradientCompressionChosenPerGroup(cfg));
  CHECK(fixedGradientCompression(cfg) == "fp16");
  cfg.compress_gradients = "autox";  // not a spec either
  CHECK(validate(cfg).code() == Code::kInvalidArgument);
  DaemonConfig t;
  t.mode = Mode::kAdaptive;
  REQUIRE(applyJson(json{{"compression_auto_mbit", 0}}, &t).isOk());
  checkRefused(validate(t), "compression_auto_mbit");
  REQUIRE(applyJson(json{{"compression_auto_mbit", 200}}, &t).isOk());
  CHECK(validate(t).isOk());
  CHECK(t.compression_auto_mbit == 200);
  // compress_deltas is chosen by nobody: auto is not one of its forms.
  DaemonConfig d;
  d.mode = Mode::kAdaptive;
  d.compress_deltas = "auto";
  CHECK(validate(d).code() == Code::kInvalidArgument);
}

TEST_CASE("daemon config: node_central_shard is for a node of a sharded run, within 1..S-1") {
  DaemonConfig node;
  node.role = "node";
  node.coordinator = "tcp://127.0.0.1:5555";
  node.central_shards = 3;
  node.node_central_shard = 2;
  node.node_groups = 0;  // a node hosting the shard only
  CHECK(validate(node).isOk());
  DaemonConfig c = node;
  c.node_central_shard = 3;
  checkRefused(validate(c), "node_central_shard 3 is not between 1 and central_shards-1 (2)");
  c = node;
  c.central_shards = 1;
  checkRefused(validate(c), "node_central_shard needs central_shards > 1");
  c = node;
  c.node_central_shard = 0;  // no shard: group PSes, and at least one
  checkRefused(validate(c), "--node-groups >= 1");
  c.node_groups = 1;
  CHECK(validate(c).isOk());  // a plain node of a sharded run takes the map from the head
  c = node;
  c.role = "all";
  checkRefused(validate(c), "node_central_shard is for role node");
  c = node;
  c.curve_secret_key_file = "node.key";
  c.curve_server_key_file = "head.pub";
  checkRefused(validate(c), "with the head's key pair");
  // A head of 3 shards without endpoints gathers them from nodes; a partial list is refused.
  DaemonConfig head;
  head.central_shards = 3;
  CHECK(validate(head).isOk());
  head.central_shard_endpoints = "tcp://127.0.0.1:7001";
  checkRefused(validate(head), "central_shards 3 needs 2 central_shard_endpoints");
}

TEST_CASE("daemon config: a sharded head's standby: shards listed (the same count) or gathered") {
  DaemonConfig head;
  head.central_shards = 2;
  head.replication_listen = "tcp://127.0.0.1:7100";
  CHECK(validate(head).isOk());  // gathered from nodes, again by the standby once promoted
  head.central_shard_endpoints = "tcp://127.0.0.1:7001";
  CHECK(validate(head).isOk());
  head.role = "coordinator";
  CHECK(validate(head).isOk());
  DaemonConfig standby;
  standby.role = "standby";
  standby.primary = "tcp://127.0.0.1:7100";
  standby.central_shards = 2;
  CHECK(validate(standby).isOk());
  standby.replication_listen = standby.primary;  // its own, for after the takeover
  checkRefused(validate(standby), "must differ from --primary");
  standby.replication_listen = "tcp://127.0.0.1:7101";
  CHECK(validate(standby).isOk());
  standby.replication_listen.clear();
  standby.central_shard_endpoints = "tcp://127.0.0.1:7001|tcp://127.0.0.1:7002";
  CHECK(validate(standby).isOk());
  standby.central_shards = 3;  // the list counts shards 1..S-1 as the head's does
  checkRefused(validate(standby), "central_shards 3 needs 2 central_shard_endpoints");
  // A node-hosted shard has a standby with replication_listen and its standby's endpoint.
  DaemonConfig node;
  node.role = "node";
  node.coordinator = "tcp://127.0.0.1:5555";
  node.central_shards = 2;
  node.node_central_shard = 1;
  node.node_groups = 0;
  node.replication_listen = "tcp://127.0.0.1:7100";
  checkRefused(validate(node), "all three or none of the last two");
  node.node_central_shard_standby = "tcp://127.0.0.1:7200";
  CHECK(validate(node).isOk());
  node.replication_listen.clear();
  checkRefused(validate(node), "all three or none of the last two");
  DaemonConfig groups_only = node;  // no shard of its own: nothing to follow
  groups_only.node_central_shard = 0;
  groups_only.node_groups = 1;
  groups_only.replication_listen = "tcp://127.0.0.1:7100";
  checkRefused(validate(groups_only), "all three or none of the last two");
  DaemonConfig head_with_it = head;
  head_with_it.node_central_shard_standby = "tcp://127.0.0.1:7200";
  checkRefused(validate(head_with_it), "node_central_shard_standby is for role node");
}

TEST_CASE(
    "daemon config: a --serve daemon takes a standby; a --serve standby's own "
    "replication_listen differs from --primary") {
  DaemonConfig primary;
  primary.serve = true;
  primary.state_dir = "/tmp/state";
  primary.control_socket = "/tmp/ctl.sock";
  primary.replication_listen = "tcp://127.0.0.1:7100";
  CHECK(validate(primary).isOk());
  DaemonConfig standby = primary;
  standby.replication_listen.clear();
  standby.role = "standby";
  checkRefused(validate(standby), "role standby needs --primary");
  standby.primary = "tcp://127.0.0.1:7100";
  CHECK(validate(standby).isOk());
  // Opened once it takes over: a new --serve standby follows the promoted daemon there.
  standby.replication_listen = "tcp://127.0.0.1:7200";
  CHECK(validate(standby).isOk());
  standby.replication_listen = standby.primary;
  checkRefused(validate(standby), "must differ from --primary");
  DaemonConfig coordinator = primary;
  coordinator.role = "coordinator";
  checkRefused(validate(coordinator), "serve needs state_dir and control_socket, and role all");
}

TEST_CASE("daemon config: central_cut_interval_s is >= 0 and needs checkpoint_dir") {
  DaemonConfig cfg;
  cfg.central_cut_interval_s = -1;
  Status s = validate(cfg);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("central_cut_interval_s must be >= 0") != std::string::npos);
  cfg.central_cut_interval_s = 5;
  s = validate(cfg);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("central_cut_interval_s needs checkpoint_dir") != std::string::npos);
  cfg.checkpoint_dir = "/tmp/cuts";
  CHECK(validate(cfg).isOk());
}
