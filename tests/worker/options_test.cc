#include "groupsgd/worker/options.h"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::worker;

namespace {

WorkerOptions parseOk(const std::vector<std::string>& args) {
  auto r = parseWorkerOptions(args);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return *r;
}

Status parseFails(const std::vector<std::string>& args) {
  auto r = parseWorkerOptions(args);
  REQUIRE_FALSE(r.isOk());
  return r.status();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The fields of the defaults and of the every-flag case, as they should be.
struct Fields {
  std::string coordinator;
  decltype(WorkerOptions::job_id) job_id;
  std::string data_dir;
  double slowdown, device_ms;
  std::string schedule_text;
  bool evaluate;
  decltype(WorkerOptions::eval_interval_ms) eval_interval_ms;
  std::string name;
  decltype(WorkerOptions::max_steps) max_steps;
  decltype(WorkerOptions::timeout_ms) timeout_ms;
  decltype(WorkerOptions::connect_timeout_ms) connect_timeout_ms;
  std::string log_level;
};

// Every field as `f` says, and help off.
void checkFields(const WorkerOptions& o, const Fields& f) {
  CHECK(o.coordinator == f.coordinator);
  CHECK(o.job_id == f.job_id);
  CHECK(o.data_dir == f.data_dir);
  CHECK(o.speed.slowdown == f.slowdown);
  CHECK(o.speed.device_ms == f.device_ms);
  CHECK(o.schedule_text == f.schedule_text);
  CHECK(o.evaluate == f.evaluate);
  CHECK(o.eval_interval_ms == f.eval_interval_ms);
  CHECK(o.name == f.name);
  CHECK(o.max_steps == f.max_steps);
  CHECK(o.timeout_ms == f.timeout_ms);
  CHECK(o.connect_timeout_ms == f.connect_timeout_ms);
  CHECK(o.log_level == f.log_level);
  CHECK_FALSE(o.help);
}

}  // namespace

TEST_CASE("worker options: no arguments give the documented defaults") {
  auto o = parseOk({});
  checkFields(
      o, {"tcp://127.0.0.1:5555", 1, "", 1.0, 0.0, "", false, 500, "", 0, 15000, 30000, "info"});
}

TEST_CASE("worker options: every flag sets its field") {
  auto o = parseOk({"--coordinator",
                    "tcp://10.0.0.1:7000",
                    "--job-id",
                    "42",
                    "--data",
                    "/tmp/d",
                    "--slowdown",
                    "2.5",
                    "--device-ms",
                    "12",
                    "--schedule",
                    "100:slowdown=1",
                    "--evaluate",
                    "--eval-interval-ms",
                    "250",
                    "--name",
                    "w7",
                    "--max-steps",
                    "300",
                    "--timeout-ms",
                    "900",
                    "--connect-timeout-ms",
                    "1200",
                    "--log-level",
                    "debug"});
  checkFields(o, {"tcp://10.0.0.1:7000", 42, "/tmp/d", 2.5, 12.0, "100:slowdown=1", true, 250, "w7",
                  300, 900, 1200, "debug"});
}

TEST_CASE("worker options: a later flag overrides an earlier one") {
  auto o = parseOk({"--job-id", "3", "--job-id", "4"});
  CHECK(o.job_id == 4);
}

TEST_CASE("worker options: --help and -h set help") {
  CHECK(parseOk({"--help"}).help);
  CHECK(parseOk({"-h"}).help);
  CHECK(parseOk({"--job-id", "2", "--help"}).help);
  const std::string usage = workerUsage();
  CHECK(contains(usage, "--coordinator"));
  CHECK(contains(usage, "--schedule"));
  CHECK(contains(usage, "--help"));
}

TEST_CASE("worker options: an unknown option is refused, naming it") {
  auto s = parseFails({"--coordinator", "tcp://x:1", "--frobnicate"});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), "--frobnicate"));
  CHECK(parseFails({"positional"}).code() == Code::kInvalidArgument);
}

TEST_CASE("worker options: a flag without its value is refused, naming the flag") {
  for (const char* flag : {"--coordinator", "--job-id", "--data", "--slowdown", "--device-ms",
                           "--schedule", "--name", "--max-steps", "--timeout-ms",
                           "--connect-timeout-ms", "--eval-interval-ms", "--log-level"}) {
    CAPTURE(flag);
    auto s = parseFails({flag});
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(contains(s.message(), flag));
    CHECK(contains(s.message(), "needs a value"));
  }
}

TEST_CASE("worker options: integer flags refuse negatives and non-numbers") {
  for (const char* v : {"-1", "abc", "", "12x", "1.5"}) {
    CAPTURE(v);
    auto s = parseFails({"--max-steps", v});
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(contains(s.message(), "--max-steps"));
  }
}

TEST_CASE("worker options: --slowdown must be a positive number, --device-ms non-negative") {
  CHECK(parseFails({"--slowdown", "0"}).code() == Code::kInvalidArgument);
  CHECK(parseFails({"--slowdown", "-1"}).code() == Code::kInvalidArgument);
  CHECK(parseFails({"--slowdown", "fast"}).code() == Code::kInvalidArgument);
  CHECK(parseFails({"--slowdown", "inf"}).code() == Code::kInvalidArgument);
  CHECK(parseFails({"--device-ms", "-0.5"}).code() == Code::kInvalidArgument);
  CHECK(parseOk({"--device-ms", "0"}).speed.device_ms == 0.0);
}

TEST_CASE("worker options: a bad --schedule is refused at parse time") {
  auto s = parseFails({"--schedule", "200:speed=4"});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), "speed"));
}

// ---- Regression tests for bugs found by these tests and since fixed.

TEST_CASE(
    "worker options: a value too large for a 32-bit field is refused instead of "
    "truncated") {
  // 2^32 + 5 is silently stored as 5 in the uint32 timeout_ms.
  auto r = parseWorkerOptions({"--timeout-ms", "4294967301"});
  CHECK_FALSE(r.isOk());
  if (r.isOk()) CHECK(r->timeout_ms != 5);
}

TEST_CASE("worker options: a negative integer after whitespace is refused") {
  // strtoull skips the blank and negates: " -1" becomes 2^64 - 1 steps.
  auto r = parseWorkerOptions({"--max-steps", " -1"});
  CHECK_FALSE(r.isOk());
}

TEST_CASE("worker options: CURVE key files load; a lone or readable key file is refused") {
  const groupsgd::testing::TempDir tmp;
  const std::string dir = tmp.path();
  auto server = groupsgd::generateKeyPair();
  auto mine = groupsgd::generateKeyPair();
  REQUIRE(groupsgd::writeKeyPair(dir + "/server", *server).isOk());
  REQUIRE(groupsgd::writeKeyPair(dir + "/w", *mine).isOk());
  auto o = parseWorkerOptions(
      {"--curve-secret-key-file", dir + "/w.key", "--curve-server-key-file", dir + "/server.pub"});
  REQUIRE(o.isOk());
  CHECK(o->curve.public_key == mine->public_key);
  CHECK(o->curve.server_public_key == server->public_key);
  CHECK(parseWorkerOptions({"--curve-secret-key-file", dir + "/w.key"}).status().code() ==
        groupsgd::Code::kInvalidArgument);
  REQUIRE(::chmod((dir + "/w.key").c_str(), 0644) == 0);
  CHECK(parseWorkerOptions({"--curve-secret-key-file", dir + "/w.key", "--curve-server-key-file",
                            dir + "/server.pub"})
            .status()
            .code() == groupsgd::Code::kPermissionDenied);
  std::filesystem::remove_all(dir);
}

TEST_CASE("worker options: --flag=value is the same as --flag value") {
  const WorkerOptions o =
      parseOk({"--job-id=42", "--coordinator=tcp://10.0.0.1:7000", "--slowdown=2.5", "--evaluate"});
  CHECK(o.job_id == 42);
  CHECK(o.coordinator == "tcp://10.0.0.1:7000");
  CHECK(o.speed.slowdown == 2.5);
  CHECK(o.evaluate);
  CHECK(parseFails({"--job-id=x"}).code() == Code::kInvalidArgument);
}
