// groupsgdctl: request building, output formatting and exit codes, in-process (runCtl)
// and as the real binary against an in-process control server.
#include "groupsgd/ops/ctl.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <sstream>

#include "groupsgd/ops/control_server.h"
#include "groupsgd/ops/version.h"
#include "ops_test_util.h"
#include "process.h"

using namespace groupsgd;
using namespace groupsgd::ops;
using groupsgd::testing::FakeCoordinator;
using groupsgd::testing::TempDir;
using nlohmann::json;
using nlohmann::ordered_json;
using std::chrono::milliseconds;

namespace {

struct CtlRun {
  int rc = -1;
  std::string out;
  std::string err;
};

CtlRun ctl(const std::string& socket, std::vector<std::string> args) {
  std::ostringstream out, err;
  CtlRun r;
  r.rc = runCtl(args, socket, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// A control server with the echo coordinator, for the duration of a test.
struct Daemon {
  TempDir dir;
  std::unique_ptr<ControlServer> server;
  std::unique_ptr<FakeCoordinator> coord;
  explicit Daemon(FakeCoordinator::Handler handler = testing::echoHandler) {
    ControlServerOptions o;
    o.path = dir.file("control.sock");
    auto started = ControlServer::start(o);
    REQUIRE(started.isOk());
    server = std::move(*started);
    coord = std::make_unique<FakeCoordinator>(*server, std::move(handler));
  }
  const std::string& path() const { return server->path(); }
};

}  // namespace

TEST_CASE("groupsgdctl: requests sent for each command") {
  Daemon d;
  auto sent = [&](std::vector<std::string> args) {
    std::vector<std::string> full = {"--json"};
    full.insert(full.end(), args.begin(), args.end());
    const CtlRun r = ctl(d.path(), full);
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    const json result = json::parse(r.out);
    return std::make_pair(result["method"].get<std::string>(), result["params"]);
  };
  CHECK(sent({"status"}) == std::make_pair(std::string("status"), json::object()));
  CHECK(sent({"groups"}).first == "groups");
  CHECK(sent({"version"}).first == "version");
  CHECK(sent({"shutdown"}).first == "shutdown");
  CHECK(sent({"drain", "3"}).second == json{{"worker", 3}, {"wait", false}});
  CHECK(sent({"drain", "gpu-7", "--wait"}).second == json{{"worker", "gpu-7"}, {"wait", true}});
  CHECK(sent({"undrain", "3"}).second == json{{"worker", 3}});
  CHECK(sent({"regroup"}).second == json{{"dry_run", false}});
  CHECK(sent({"regroup", "--dry-run"}).second == json{{"dry_run", true}});
  CHECK(sent({"set", "step_deadline_ms=2000", "log_level=debug", "flag=true", "q=\"007\"", "e="})
            .second == json{{"values",
                             {{"step_deadline_ms", 2000},
                              {"log_level", "debug"},
                              {"flag", true},
                              {"q", "007"},
                              {"e", ""}}}});
  CHECK(sent({"raw", "groups", R"({"verbose": true})"}) ==
        std::make_pair(std::string("groups"), json{{"verbose", true}}));
  CHECK(sent({"raw", "status"}).second == json::object());
}

TEST_CASE("groupsgdctl: options after the command and --option=value") {
  Daemon d;
  // Typed as a new user would: the options after the command.
  CtlRun r = ctl("/nonexistent", {"status", "--json", "--socket=" + d.path()});
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(json::parse(r.out)["method"] == "status");
  r = ctl("/nonexistent", {"--socket", d.path(), "drain", "--json", "4", "--timeout-ms=2000"});
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(json::parse(r.out)["params"] == json{{"worker", 4}, {"wait", false}});
  r = ctl(d.path(), {"status", "--timeout-ms=0"});
  CHECK(r.rc == kCtlUsageOrConnection);
}

TEST_CASE("groupsgdctl: readable output: tables and key: value lines") {
  Daemon d;
  const CtlRun workers = ctl(d.path(), {"workers"});
  CHECK(workers.rc == 0);
  CHECK(workers.out ==
        "ID  NAME      GROUP  STATE\n"
        "1   w1        0      active\n"
        "2   slow-one  1      draining\n");

  const CtlRun version = ctl(d.path(), {"version"});
  CHECK(version.rc == 0);
  CHECK(version.out.rfind(std::string("groupsgdctl: ") + buildVersion() + "\n", 0) == 0);

  const CtlRun status = ctl(d.path(), {"status"});
  CHECK(status.rc == 0);
  CHECK(status.out.find("method:     status\n") != std::string::npos);
  CHECK(status.out.find("caller.pid: " + std::to_string(::getpid()) + "\n") != std::string::npos);
}

TEST_CASE("groupsgdctl: formatResult") {
  const ordered_json status = ordered_json::parse(R"({
      "mode": "grouped", "stage": null, "central": {"version": 12, "acc": 0.8421},
      "endpoints": ["tcp://a:1", "tcp://b:2"], "ok": true,
      "groups": [{"group": 0, "members": [1, 2]}, {"group": 1, "members": []}]})");
  CHECK(formatResult(status) ==
        "mode:            grouped\n"
        "stage:           -\n"
        "central.version: 12\n"
        "central.acc:     0.8421\n"
        "endpoints:       tcp://a:1, tcp://b:2\n"
        "ok:              true\n"
        "\n"
        "groups:\n"
        "  GROUP  MEMBERS\n"
        "  0      1, 2\n"
        "  1\n");
  CHECK(formatResult(ordered_json::parse(R"({"workers": []})")) == "(none)\n");
  CHECK(formatResult(ordered_json::parse(R"([{"b": 1}, {"a": "x"}])")) ==
        "B  A\n"
        "1  -\n"
        "-  x\n");
  CHECK(formatResult("hello") == "hello\n");
  CHECK(formatResult(ordered_json::parse("[1, \"two\"]")) == "1\ntwo\n");
  CHECK(formatResult(ordered_json::object()) == "");
}

// The precision a person reads is pinned here: a change of format must change this test.
TEST_CASE("groupsgdctl: tables round what a person reads; --json keeps full values") {
  const ordered_json workers = ordered_json::parse(R"({"workers": [
      {"id": 1, "name": "w1", "role": "trainer", "group": 0, "batch": 32, "steps": 812,
       "compute_ms": 19.21951675415039, "comm_ms": 1.25, "wait_ms": 0.04999},
      {"id": 5, "name": "eval", "role": "evaluator", "group": null, "batch": null,
       "steps": null, "compute_ms": null, "comm_ms": null, "wait_ms": null}]})");
  CHECK(formatResult(workers) ==
        "ID  NAME  ROLE       GROUP  BATCH  STEPS  COMPUTE_MS  COMM_MS  WAIT_MS\n"
        "1   w1    trainer    0      32     812    19.2        1.2      0.0\n"
        "5   eval  evaluator  -      -      -      -           -        -\n");

  const ordered_json jobs = ordered_json::parse(R"({"jobs": [
      {"name": "a", "id": 1, "state": "done", "groups": null,
       "final_test_acc": 0.809499979019165},
      {"name": "b", "id": 2, "state": "running", "groups": 2, "final_test_acc": null}]})");
  CHECK(formatResult(jobs) ==
        "NAME  ID  STATE    GROUPS  FINAL_TEST_ACC\n"
        "a     1   done     -       0.8095\n"
        "b     2   running  2       -\n");

  const ordered_json status = ordered_json::parse(R"({
      "uptime_s": 12.3456, "test_acc": 0.91234567, "test_loss": 0.3187654321,
      "samples_per_s": 1234.5678, "speed": 3.14159, "lr": 0.0030000001,
      "ratio": 1.23456789, "version": 12, "big": 123456.789,
      "evaluation": {"unmeasured_for_s": 4.06}})");
  CHECK(formatResult(status) ==
        "uptime_s:                    12.3\n"
        "test_acc:                    0.9123\n"
        "test_loss:                   0.3188\n"
        "samples_per_s:               1235\n"
        "speed:                       3.14\n"
        "lr:                          0.003\n"
        "ratio:                       1.235\n"
        "version:                     12\n"
        "big:                         123457\n"
        "evaluation.unmeasured_for_s: 4.1\n");

  // The same reply through a daemon: the table rounds, --json carries every digit.
  Daemon d([&](ops::PendingRequest&& req) { req.respond(workers); });
  const CtlRun table = ctl(d.path(), {"workers"});
  REQUIRE_MESSAGE(table.rc == 0, table.err);
  CHECK(table.out == formatResult(workers));
  const CtlRun full = ctl(d.path(), {"workers", "--json"});
  REQUIRE_MESSAGE(full.rc == 0, full.err);
  const json parsed = json::parse(full.out);
  CHECK(parsed["workers"][0]["compute_ms"].get<double>() == 19.21951675415039);
  CHECK(parsed["workers"][1]["group"].is_null());
}

TEST_CASE("groupsgdctl: exit 1 and the error when the daemon refuses") {
  Daemon d;
  CtlRun r = ctl(d.path(), {"drain", "999"});
  CHECK(r.rc == kCtlRefused);
  CHECK(r.out == "");
  CHECK(r.err == "groupsgdctl: drain: invalid_params: no worker 999\n");

  r = ctl(d.path(), {"--json", "checkpoint"});
  CHECK(r.rc == kCtlRefused);
  CHECK(json::parse(r.out)["code"] == "refused");

  r = ctl(d.path(), {"raw", "no_such_method"});
  CHECK(r.rc == kCtlRefused);
  CHECK(r.err.find("method_not_found") != std::string::npos);
  r = ctl(d.path(), {"raw", "status", "[1]"});
  CHECK(r.rc == kCtlRefused);
  CHECK(r.err.find("invalid_params") != std::string::npos);
}

TEST_CASE("groupsgdctl: exit 2 for usage and connection errors") {
  Daemon d;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"bogus"},
           {"--frob", "status"},
           {"--socket"},
           {"--timeout-ms", "0", "status"},
           {"--timeout-ms", "abc", "status"},
           {"status", "extra"},
           {"drain"},
           {"drain", "1", "2"},
           {"drain", "1", "--now"},
           {"undrain", "1", "--wait"},
           {"regroup", "--force"},
           {"set"},
           {"set", "novalue"},
           {"set", "=3"},
           {"raw"},
           {"raw", "status", "{not json"},
           {"help", "bogus"},
       }) {
    CAPTURE(json(args).dump());
    const CtlRun r = ctl(d.path(), args);
    CHECK(r.rc == kCtlUsageOrConnection);
    CHECK(!r.err.empty());
  }
  TempDir empty;
  const CtlRun nosock = ctl(empty.file("none.sock"), {"status"});
  CHECK(nosock.rc == kCtlUsageOrConnection);
  CHECK(nosock.err.find("cannot connect") != std::string::npos);
}

TEST_CASE("groupsgdctl: exit 2 when the reply does not come in time") {
  Daemon d([](PendingRequest&& req) {
    if (req.method() == "shutdown") {
      std::this_thread::sleep_for(milliseconds(1500));  // far slower than the client's deadline
    }
    testing::echoHandler(std::move(req));
  });
  const auto t0 = std::chrono::steady_clock::now();
  const CtlRun r = ctl(d.path(), {"--timeout-ms", "200", "shutdown"});
  CHECK(r.rc == kCtlUsageOrConnection);
  CHECK(r.err.find("no reply") != std::string::npos);
  // Gave up at its 200 ms deadline, not after the 1.5 s answer (the margin is for
  // starting the process on a busy machine).
  CHECK(std::chrono::steady_clock::now() - t0 < milliseconds(1200));
}

TEST_CASE("groupsgdctl: help") {
  CtlRun r = ctl("/nonexistent", {"--help"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("usage: groupsgdctl") != std::string::npos);
  for (const char* cmd : {"version", "status", "workers", "groups", "drain WORKER_ID [--wait]",
                          "undrain", "regroup [--dry-run]", "set KEY=VALUE...", "checkpoint",
                          "shutdown", "raw METHOD [JSON_PARAMS]"}) {
    CHECK(r.out.find(cmd) != std::string::npos);
  }
  r = ctl("/nonexistent", {"drain", "--help"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("usage: groupsgdctl [OPTIONS] drain WORKER_ID [--wait]") == 0);
  r = ctl("/nonexistent", {"help", "set"});
  CHECK(r.rc == 0);
  CHECK(r.out.find("set KEY=VALUE") != std::string::npos);
}

TEST_CASE("groupsgdctl: default socket path from the environment") {
  ::unsetenv("GROUPSGD_CONTROL_SOCKET");
  CHECK(defaultControlSocketPath() == "/run/groupsgd/control.sock");
  ::setenv("GROUPSGD_CONTROL_SOCKET", "/tmp/x.sock", 1);
  CHECK(defaultControlSocketPath() == "/tmp/x.sock");
  ::setenv("GROUPSGD_CONTROL_SOCKET", "", 1);
  CHECK(defaultControlSocketPath() == "/run/groupsgd/control.sock");
  ::unsetenv("GROUPSGD_CONTROL_SOCKET");
}

TEST_CASE("groupsgdctl binary: exit codes 0, 1, 2 and output") {
  Daemon d;
  TempDir logs;
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), GROUPSGDCTL_PATH);
    testing::Process p(args, logs.file("ctl.log"));
    const auto rc = p.wait(milliseconds(10000));
    return std::make_pair(rc.value_or(-999), testing::readFile(logs.file("ctl.log")));
  };
  auto [rc0, out0] = run({"--socket", d.path(), "workers"});
  CHECK(rc0 == 0);
  CHECK(out0.find("slow-one") != std::string::npos);
  auto [rc_json, out_json] = run({"--socket=" + d.path(), "--json", "workers"});
  CHECK(rc_json == 0);
  CHECK(json::parse(out_json)["workers"].size() == 2);
  auto [rc1, out1] = run({"--socket", d.path(), "drain", "999"});
  CHECK(rc1 == 1);
  CHECK(out1.find("invalid_params") != std::string::npos);
  auto [rc2, out2] = run({"--socket", d.path() + ".missing", "status"});
  CHECK(rc2 == 2);
  auto [rc_usage, out_usage] = run({"--socket", d.path(), "nonsense"});
  CHECK(rc_usage == 2);
  auto [rc_help, out_help] = run({"--help"});
  CHECK(rc_help == 0);
  // $GROUPSGD_CONTROL_SOCKET is the default socket.
  ::setenv("GROUPSGD_CONTROL_SOCKET", d.path().c_str(), 1);
  auto [rc_env, out_env] = run({"status"});
  ::unsetenv("GROUPSGD_CONTROL_SOCKET");
  CHECK(rc_env == 0);
}
