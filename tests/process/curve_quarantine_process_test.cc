// Quarantine keyed on the CURVE public key: a worker quarantined for NaN
// updates cannot come back under a new name from another process with the same
// key; an operator's unquarantine lets that key register again. This test is
// the misbehaving worker (it links the worker client library); the comeback is
// a forked child, so it has a new pid.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon_harness.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/curve_keys.h"

using namespace groupsgd;
using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Registers from a forked child (a new pid, its own ZeroMQ context) under
// `name` with `keys`; returns the code of the answer (0 = registered; it then
// leaves).
int registerFromChild(const std::string& ep, const CurveKeys& keys, const std::string& name) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 99;
    {
      zmq::context_t ctx(1);
      client::CoordinatorClient coord(ctx, ep, 1, 5000ms, keys);
      auto a = coord.registerAs(client::Role::kTool, name);
      code = a ? 0 : static_cast<int>(a.status().code());
      if (a) (void)coord.leave(*a, 0, 0);
    }
    ::_exit(code);
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  REQUIRE(WIFEXITED(st));
  return WEXITSTATUS(st);
}

}  // namespace

TEST_CASE(
    "faults: a worker quarantined under CURVE cannot come back under a "
    "new name or pid with its key" *
    doctest::skip(noCurve())) {
  const std::string dir = makeTempDir();
  generateKeys(dir, {"server", "good", "bad"});
  {
    std::ofstream allow(dir + "/allow");
    allow << readFile(dir + "/good.pub") << readFile(dir + "/bad.pub");
  }
  auto daemon =
      startDaemon(dir, "daemon.log", "tcp://127.0.0.1:0",
                  {"--mode", "grouped", "--workers", "2", "--groups", "1", "--heartbeat-ms", "250",
                   "--progress-ms", "0", "--quarantine-after", "3", "--curve-secret-key-file",
                   dir + "/server.key", "--curve-allow-file", dir + "/allow"});
  const std::string ep = endpointIn(dir);
  Process good({WORKER_PATH, "--coordinator", ep, "--name", "good", "--device-ms", "3",
                "--curve-secret-key-file", dir + "/good.key", "--curve-server-key-file",
                dir + "/server.pub"},
               dir + "/good.log");
  // The well-behaved worker trains first (and is told to stop at the end).
  REQUIRE(waitForStatus(
              dir, [](const json& s) { return s["samples_trained"].get<std::uint64_t>() > 0; },
              60000ms)["samples_trained"]
              .get<std::uint64_t>() > 0);
  const CurveKeys bad_keys = keysOf(dir, "bad");
  {
    zmq::context_t ctx(1);
    client::CoordinatorClient coord(ctx, ep, 1, 5000ms, bad_keys);
    auto a = coord.registerAs(client::Role::kTrainer, "bad");
    REQUIRE(a.isOk());
    client::GroupClient group(ctx, *a, 1, 5000ms, {}, bad_keys);
    std::vector<float> params(a->param_count);
    std::vector<float> nan_grad(a->param_count, std::nanf(""));
    auto pulled = group.pull(params);
    REQUIRE(pulled.isOk());
    Code last = Code::kOk;
    for (int i = 0; i < 10 && last != Code::kQuarantined; ++i) {
      auto pushed = group.push(pulled->step, nan_grad, 8, 0.5f, 1.0f, params);
      last = pushed ? Code::kOk : pushed.status().code();
    }
    REQUIRE(last == Code::kQuarantined);
  }
  json st = waitForStatus(
      dir, [](const json& s) { return s["workers"]["quarantined"] == 1; }, 30000ms);
  REQUIRE(st["workers"]["quarantined"] == 1);
  // Same key, another process, another name: refused as quarantined by the
  // coordinator.
  CHECK(registerFromChild(ep, bad_keys, "renamed") == static_cast<int>(Code::kQuarantined));
  CHECK(readFile(dir + "/daemon.log").find("is quarantined") != std::string::npos);
  // The good worker's key is unaffected.
  CHECK(registerFromChild(ep, keysOf(dir, "good"), "good-tool") == 0);
  // Cleared by the operator: the key may register again.
  json cleared = ctl(dir, {"unquarantine", "bad"});
  REQUIRE(cleared.is_object());
  CHECK(registerFromChild(ep, bad_keys, "renamed") == 0);
  INFO("good: " << readFile(dir + "/good.log"));
  INFO("daemon: " << readFile(dir + "/daemon.log"));
  ::kill(daemon->pid(), SIGTERM);
  REQUIRE(daemon->wait(90000ms) == std::optional<int>(0));
  CHECK(good.wait(30000ms) == std::optional<int>(0));
  json s = readSummary(dir);
  CHECK(s["quarantined"] == 1);
  CHECK(s["quarantine_refusals"].get<std::uint64_t>() >= 1);
  CHECK(s["accounting_ok"] == true);
  removeTestDir(dir);
}
