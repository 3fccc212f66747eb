// CURVE across real processes: a daemon with keys and an allow-list, workers with their
// own keys. Training completes; an unknown key, a plaintext client and a readable secret
// key are refused; a worker with an allowed key cannot act under another worker's id
// (this test is that impostor: it links the worker client library).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/transport.h"

using namespace groupsgd;
using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::vector<std::string> workerArgs(const std::string& ep, const std::string& dir,
                                    const std::string& name, bool with_keys) {
  std::vector<std::string> argv = {WORKER_PATH, "--coordinator", ep,  "--device-ms",
                                   "3",         "--name",        name};
  if (with_keys) {
    argv.insert(argv.end(), {"--curve-secret-key-file", dir + "/" + name + ".key",
                             "--curve-server-key-file", dir + "/server.pub"});
  }
  return argv;
}

}  // namespace

TEST_CASE("curve: keyed training completes; unknown keys, plaintext and impostors are refused" *
          doctest::skip(noCurve())) {
  const std::string dir = makeTempDir();
  generateKeys(dir, {"server", "w1", "w2", "stranger"});
  {
    std::ofstream allow(dir + "/allow");
    allow << "# trainers\n" << readFile(dir + "/w1.pub") << readFile(dir + "/w2.pub");
  }
  auto daemon = startDaemon(
      dir, "daemon.log", "tcp://127.0.0.1:0",
      {"--mode", "sync", "--workers", "2", "--progress-ms", "0", "--heartbeat-ms", "250",
       "--curve-secret-key-file", dir + "/server.key", "--curve-allow-file", dir + "/allow"});
  const std::string ep = endpointIn(dir);

  Process w1(workerArgs(ep, dir, "w1", true), dir + "/w1.log");
  Process w2(workerArgs(ep, dir, "w2", true), dir + "/w2.log");

  // Unknown key and no key at all: never registered. The stranger hears the refusal at
  // once; the plaintext one (its handshake cannot start) gives up after its connect
  // timeout, not after a whole request timeout (15 s by default) on top.
  auto stranger = workerArgs(ep, dir, "stranger", true);
  auto plain = workerArgs(ep, dir, "plain", false);
  for (auto* argv : {&stranger, &plain})
    argv->insert(argv->end(), {"--connect-timeout-ms", "4000"});
  auto timed = [&](const std::vector<std::string>& argv, const std::string& log) {
    const auto started = std::chrono::steady_clock::now();
    CHECK(runTool(argv, log) == 1);
    return std::chrono::steady_clock::now() - started;
  };
  const auto stranger_took = timed(stranger, dir + "/stranger.log");
  INFO("stranger: " << readFile(dir + "/stranger.log"));
  CHECK(readFile(dir + "/stranger.log")
            .find("the daemon at " + ep + " refused this key (not in its allow-list)") !=
        std::string::npos);
  CHECK(stranger_took < 3000ms);
  const auto plain_took = timed(plain, dir + "/plain.log");
  using std::chrono::duration;
  std::printf(
      "curve: refused key ended in %.2f s, plaintext worker in %.2f s "
      "(--connect-timeout-ms 4000)\n",
      duration<double>(stranger_took).count(), duration<double>(plain_took).count());
  std::fflush(stdout);
  CHECK(plain_took >= 3500ms);
  CHECK(plain_took < 7000ms);

  // Wait until both trainers run, then find w1's id.
  std::uint64_t w1_id = 0;
  waitUntil(
      [&] {
        json rows = ctlJson(dir, {"workers"});
        if (rows.is_object()) rows = rows["workers"];
        int training = 0;
        std::uint64_t id = 0;
        for (const auto& r : rows) {
          CHECK(r["name"] != "stranger");
          CHECK(r["name"] != "plain");
          if (r["steps"].get<std::uint64_t>() > 0 && (r["name"] == "w1" || r["name"] == "w2"))
            ++training;
          if (r["name"] == "w1") id = r["id"].get<std::uint64_t>();
        }
        if (training == 2) w1_id = id;
        return w1_id != 0;
      },
      30s, 250ms);
  REQUIRE_MESSAGE(w1_id != 0, readFile(dir + "/daemon.log"));

  {
    // The impostor holds w2's allowed key and claims w1's id.
    zmq::context_t ctx(1);
    const CurveKeys w2_keys = keysOf(dir, "w2");
    client::CoordinatorClient coord(ctx, ep, 1, 5000ms, w2_keys);
    auto tool = coord.registerAs(client::Role::kTool, "impostor");  // its own, honest identity
    REQUIRE(tool.isOk());
    client::Assignment as_w1 = *tool;
    as_w1.worker_id = w1_id;
    as_w1.epoch = ~0ull >> 1;
    auto hb = coord.heartbeat(as_w1, {});
    CHECK(hb.status().code() == Code::kPermissionDenied);
    auto re = coord.registerAs(client::Role::kTrainer, "impostor", w1_id);
    CHECK(re.status().code() == Code::kPermissionDenied);
    CHECK(coord.leave(as_w1, 0, 0).code() == Code::kPermissionDenied);
    client::GroupClient group(ctx, as_w1, 1, 5000ms, {}, w2_keys);
    std::vector<float> params(as_w1.param_count), grad(as_w1.param_count, 0.0f);
    auto pushed = group.push(1, grad, 8, 0.5f, 1.0f, params);
    CHECK(pushed.status().code() == Code::kPermissionDenied);
    (void)coord.leave(*tool, 0, 0);
  }

  json st = ctlJson(dir, {"status"});
  CHECK(st["curve"]["enabled"] == true);
  // The stranger's handshake (it stops at the first refusal); a plaintext client's
  // handshake fails on the mechanism before the ZAP handler is asked.
  CHECK(st["curve"]["clients_refused"].get<int>() >= 1);
  CHECK(st["curve"]["identity_refused"].get<int>() >= 3);
  REQUIRE(runTool({GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "shutdown"},
                  dir + "/stop.log") == 0);
  CHECK(daemon->wait(60000ms) == std::optional<int>(0));
  CHECK(w1.wait(30000ms) == std::optional<int>(0));
  CHECK(w2.wait(30000ms) == std::optional<int>(0));
  json s = json::parse(readFile(dir + "/summary.json"));
  INFO("summary: " << s.dump());
  CHECK(s["accounting_ok"].get<bool>());
  CHECK(s["samples_trained"].get<std::uint64_t>() > 0);
  CHECK(s["group_stats"][0]["identity_refused"].get<int>() >= 1);
  CHECK(readFile(dir + "/daemon.log").find("bound to another key") != std::string::npos);
  removeTestDir(dir);
}

TEST_CASE("curve: a secret key file readable by others stops daemon and worker at start" *
          doctest::skip(noCurve())) {
  const std::string dir = makeTempDir();
  generateKeys(dir, "server");
  REQUIRE(::chmod((dir + "/server.key").c_str(), 0644) == 0);
  std::ofstream(dir + "/allow") << "";
  CHECK(runTool({GROUPSGDD_PATH, "--listen", "tcp://127.0.0.1:0", "--curve-secret-key-file",
                 dir + "/server.key", "--curve-allow-file", dir + "/allow"},
                dir + "/daemon.log") != 0);
  CHECK(readFile(dir + "/daemon.log").find("chmod 600") != std::string::npos);
  CHECK(runTool({WORKER_PATH, "--curve-secret-key-file", dir + "/server.key",
                 "--curve-server-key-file", dir + "/server.pub"},
                dir + "/worker.log") == 2);
  CHECK(readFile(dir + "/worker.log").find("chmod 600") != std::string::npos);
  // A bad allow-list line is a startup error too.
  REQUIRE(::chmod((dir + "/server.key").c_str(), 0600) == 0);
  std::ofstream(dir + "/allow") << "not-a-key\n";
  CHECK(runTool({GROUPSGDD_PATH, "--listen", "tcp://127.0.0.1:0", "--curve-secret-key-file",
                 dir + "/server.key", "--curve-allow-file", dir + "/allow"},
                dir + "/daemon2.log") != 0);
  CHECK(readFile(dir + "/daemon2.log").find("line 1") != std::string::npos);
  removeTestDir(dir);
}

TEST_CASE("curve: a coordinator and a node daemon sharing the daemon key pair train keyed workers" *
          doctest::skip(noCurve())) {
  const std::string dir = makeTempDir();
  generateKeys(dir, {"server", "w0", "w1", "ev"});
  std::ofstream(dir + "/allow") << readFile(dir + "/w0.pub") << readFile(dir + "/w1.pub")
                                << readFile(dir + "/ev.pub");
  const std::vector<std::string> keys = serverCurveArgs(dir);
  std::vector<std::string> head_args = {"--role",        "coordinator", "--mode",         "grouped",
                                        "--workers",     "2",           "--groups",       "2",
                                        "--progress-ms", "0",           "--heartbeat-ms", "250",
                                        "--max-samples", "8000",        "--max-seconds",  "60"};
  head_args.insert(head_args.end(), keys.begin(), keys.end());
  auto head = startDaemon(dir, "head.log", std::move(head_args),
                          DaemonFiles{"tcp://127.0.0.1:0", /*control_socket=*/false});
  const std::string ep = endpointIn(dir);
  std::vector<std::string> node_args = {
      GROUPSGDD_PATH, "--role",    "node", "--coordinator", ep,  "--node-groups",  "2",  "--mode",
      "grouped",      "--workers", "2",    "--groups",      "2", "--heartbeat-ms", "250"};
  node_args.insert(node_args.end(), keys.begin(), keys.end());
  Process node(node_args, dir + "/node.log");
  Process w0(workerArgs(ep, dir, "w0", true), dir + "/w0.log");
  Process w1(workerArgs(ep, dir, "w1", true), dir + "/w1.log");
  auto ev_args = workerArgs(ep, dir, "ev", true);
  ev_args.push_back("--evaluate");
  Process evaluator(ev_args, dir + "/ev.log");  // fetches the central model with its own key
  REQUIRE_MESSAGE(head->wait(90000ms) == std::optional<int>(0), readFile(dir + "/head.log"));
  CHECK(node.wait(20000ms) == std::optional<int>(0));
  CHECK(w0.wait(20000ms) == std::optional<int>(0));
  CHECK(w1.wait(20000ms) == std::optional<int>(0));
  CHECK(evaluator.wait(20000ms) == std::optional<int>(0));
  json s = json::parse(readFile(dir + "/summary.json"));
  INFO("summary: " << s.dump());
  INFO("node: " << readFile(dir + "/node.log"));
  INFO("evaluator: " << readFile(dir + "/ev.log"));
  CHECK_FALSE(s["final_test_acc"].is_null());
  CHECK(s["stop_reason"] == "sample budget spent");
  REQUIRE(s["group_stats"].size() == 2);
  for (const auto& g : s["group_stats"]) CHECK(g["steps"].get<int>() > 10);
  CHECK(s["curve"]["enabled"] == true);
  CHECK(s["curve"]["clients_refused"] == 0);
  CHECK(s["accounting_ok"].get<bool>());
  removeTestDir(dir);
}

TEST_CASE(
    "curve: reload-keys and SIGHUP re-read the allow-list; a removed key is refused on its "
    "open connections" *
    doctest::skip(noCurve())) {
  const std::string dir = makeTempDir();
  generateKeys(dir, {"server", "w1", "w2"});
  const auto writeAllow = [&](const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names) text += readFile(dir + "/" + n + ".pub");
    writeAllowList(dir, text);
  };
  writeAllow({"w1", "w2"});
  auto daemon =
      startDaemon(dir, "daemon.log", "tcp://127.0.0.1:0",
                  {"--mode", "async", "--workers", "2", "--progress-ms", "0", "--heartbeat-ms",
                   "250", "--max-seconds", "120", "--curve-secret-key-file", dir + "/server.key",
                   "--curve-allow-file", dir + "/allow"});
  const std::string ep = endpointIn(dir);
  const auto trainer = [&](const std::string& name) {
    auto argv = workerArgs(ep, dir, name, true);
    // The default --timeout-ms (a push answered too late is reconciled by the coordinator,
    // trainer_accounting.h, but this test is about keys).
    argv.insert(argv.end(), {"--give-up-s", "10"});
    return argv;
  };
  auto w1 = std::make_unique<Process>(trainer("w1"), dir + "/w1.log");
  Process w2(trainer("w2"), dir + "/w2.log");
  const auto stepsOf = [&](const std::string& name) {
    json rows = ctlJson(dir, {"workers"});
    if (rows.is_object()) rows = rows["workers"];
    std::uint64_t steps = 0;
    for (const auto& r : rows) {
      if (r["name"] == name && r["state"] == "active") steps = r["steps"].get<std::uint64_t>();
    }
    return steps;
  };
  REQUIRE_MESSAGE(waitUntil([&] { return stepsOf("w1") > 0 && stepsOf("w2") > 0; }, 30000ms, 250ms),
                  readFile(dir + "/daemon.log"));

  // w1's key leaves the list; its open connections are refused from the next message.
  writeAllow({"w2"});
  json change = ctlJson(dir, {"reload-keys"});
  CHECK(change["removed"] == 1);
  CHECK(change["added"] == 0);
  CHECK(change["admitted"] == 2);  // w2 and the daemon's own key
  const auto w1_rc = w1->wait(60000ms);
  REQUIRE(w1_rc.has_value());
  CHECK(*w1_rc != 0);
  CHECK(readFile(dir + "/w1.log").find("no longer in the allow-list") != std::string::npos);
  const std::uint64_t before = stepsOf("w2");
  CHECK(waitUntil([&] { return stepsOf("w2") > before + 20; }, 30000ms, 250ms));  // w2 trains on

  // SIGHUP re-reads the file: w1's key is back and a new w1 trains.
  writeAllow({"w1", "w2"});
  REQUIRE(::kill(daemon->pid(), SIGHUP) == 0);
  REQUIRE(waitForText(dir + "/daemon.log", "1 added", 10000ms));
  w1 = std::make_unique<Process>(trainer("w1"), dir + "/w1-again.log");
  CHECK(waitUntil([&] { return stepsOf("w1") > 0; }, 30000ms, 250ms));

  // A file that does not parse changes nothing and says why.
  std::ofstream(dir + "/allow") << "not-a-key\n";
  const std::string log = dir + "/ctl-bad.log";
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "reload-keys"}, log) == 1);
  CHECK(readFile(log).find("line 1") != std::string::npos);
  const std::uint64_t w1_before = stepsOf("w1");
  CHECK(waitUntil([&] { return stepsOf("w1") > w1_before + 5; }, 30000ms, 250ms));

  REQUIRE(runTool({GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "shutdown"},
                  dir + "/stop.log") == 0);
  CHECK(daemon->wait(60000ms) == std::optional<int>(0));
  CHECK(w1->wait(30000ms) == std::optional<int>(0));
  CHECK(w2.wait(30000ms) == std::optional<int>(0));
  json s = json::parse(readFile(dir + "/summary.json"));
  INFO("summary: " << s.dump());
  CHECK(s["accounting_ok"].get<bool>());
  removeTestDir(dir);
}

TEST_CASE(
    "curve: a node daemon with its own key pair is admitted by its allow-list line; a "
    "worker key may not act as a node; a node whose key is removed is refused" *
    doctest::skip(noCurve())) {
  const std::string dir = makeTempDir();
  generateKeys(dir, {"server", "node", "w0", "w1"});
  auto node_pub = loadPublicKeyFile(dir + "/node.pub");
  REQUIRE(node_pub.isOk());
  const std::string node_key = *node_pub;
  const auto writeHeadAllow = [&](bool with_node) {
    writeAllowList(dir, readFile(dir + "/w0.pub") + readFile(dir + "/w1.pub") +
                            (with_node ? node_key + " node  # n1\n" : ""));
  };
  writeHeadAllow(true);
  // The node admits the workers (its group PS serves them); the head's key it admits itself.
  std::ofstream(dir + "/node-allow") << readFile(dir + "/w0.pub") << readFile(dir + "/w1.pub");
  // Dead after max(250 ms * 8, 1000 + 2 * 250 ms) = 2 s.
  auto head = startDaemon(
      dir, "head.log", "tcp://127.0.0.1:0",
      withArgs({"--role", "coordinator", "--mode", "grouped", "--workers", "2", "--groups", "1",
                "--progress-ms", "0", "--heartbeat-ms", "250", "--heartbeat-misses", "8",
                "--step-deadline-ms", "1000", "--max-seconds", "120"},
               serverCurveArgs(dir)));
  const std::string ep = endpointIn(dir);
  const auto nodeArgs = [&](const std::string& key) {
    return withArgs({GROUPSGDD_PATH, "--role", "node", "--coordinator", ep, "--node-groups", "1",
                     "--mode", "grouped", "--workers", "2", "--groups", "1", "--heartbeat-ms",
                     "250", "--step-deadline-ms", "1000", "--give-up-s", "5"},
                    nodeCurveArgs(dir, key));
  };
  // A worker's key, allow-listed but not as a node, cannot offer group PSes.
  checkImpostorNodeRefused(dir, nodeArgs("w0"));
  Process node(nodeArgs("node"), dir + "/node.log");
  Process w0(workerArgs(ep, dir, "w0", true), dir + "/w0.log");
  Process w1(workerArgs(ep, dir, "w1", true), dir + "/w1.log");
  // Keyed training through the node's group PS (the workers authenticate it by its key,
  // which the assignment names).
  const bool trained = waitUntil(
      [&] { return ctlJson(dir, {"status"})["samples_trained"].get<std::uint64_t>() > 2000; },
      90000ms, 250ms);
  INFO("head: " << readFile(dir + "/head.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  INFO("w0: " << readFile(dir + "/w0.log"));
  REQUIRE(trained);
  CHECK(readFile(dir + "/node.log").find("head's key") != std::string::npos);
  // Revoke the node: its open connections are refused from their next message, so the
  // head stops hearing it and fails its group.
  writeHeadAllow(false);
  const json reload = ctlJson(dir, {"reload-keys"});
  CHECK(reload["removed"] == 1);
  CHECK(waitForText(dir + "/head.log", "group_failure: group 0 failed", 30000ms));
  CHECK(waitForText(dir + "/node.log", "is no longer in the allow-list", 30000ms));
  ::kill(head->pid(), SIGTERM);
  CHECK(head->wait(90000ms) == std::optional<int>(0));
  json s = json::parse(readFile(dir + "/summary.json"));
  CHECK(s["curve"]["enabled"] == true);
  CHECK(s["node_failures"].size() == 1);
  removeTestDir(dir);
}

TEST_CASE(
    "curve: in a --serve daemon, reload-keys and SIGHUP give an added `KEY node` line a "
    "daemon's rights and take them from a removed one" *
    doctest::skip(noCurve())) {
  const std::string dir = makeTempDir();
  generateKeys(dir, {"server", "n1"});
  auto n1_pub = loadPublicKeyFile(dir + "/n1.pub");
  REQUIRE(n1_pub.isOk());
  const std::string n1 = *n1_pub;
  const auto writeAllow = [&](bool as_node) {
    writeAllowList(dir, n1 + (as_node ? " node  # a node daemon's key\n" : "  # a plain client\n"));
  };
  writeAllow(false);
  auto daemon = startDaemon(
      dir, "serve.log", "tcp://127.0.0.1:0",
      {"--serve", "--state-dir", dir + "/state", "--max-group-slots", "2", "--progress-ms", "0",
       "--curve-secret-key-file", dir + "/server.key", "--curve-allow-file", dir + "/allow"});
  std::ofstream(dir + "/j.json") << json{
      {"name", "j"},
      {"mode", "sync"},
      {"workers", 1},
      {"model", "softmax"},
      {"max_seconds", 120}}.dump();
  const json job = ctlJson(dir, {"job", "submit", dir + "/j.json"});
  REQUIRE(job["state"] == "running");
  const json groups = ctlJson(dir, {"--job", "j", "groups"});
  const std::string group_ep = groups["groups"][0]["endpoint"].get<std::string>();
  // What a group PS answers n1's key asking for its counters (a daemon's request: the
  // coordinator's, or a node daemon's that hosts it).
  const auto statsQuery = [&] {
    zmq::context_t ctx(1);
    MessageLimits limits;
    limits.job_id = job["id"].get<std::uint64_t>();
    RpcClient rpc(ctx, group_ep, limits, clientSocketOptions(keysOf(dir, "n1")));
    OutMessage q(limits.job_id, 0);
    q.header().getBody().initGroupStatsQuery();
    auto reply = rpc.call(std::move(q), 5000ms);
    return reply ? Status::ok() : reply.status();
  };
  INFO("daemon: " << readFile(dir + "/serve.log"));
  // Admitted as a client, without a daemon's rights.
  CHECK(statsQuery().code() == Code::kPermissionDenied);
  // `n1 node` added: the job's reload-keys makes it a daemon key at once.
  writeAllow(true);
  ctlJson(dir, {"--job", "j", "reload-keys"});
  CHECK(statsQuery().isOk());
  // The label removed again: SIGHUP (the host's own reload) takes the rights back.
  writeAllow(false);
  const std::size_t log_at = readFile(dir + "/serve.log").size();
  REQUIRE(::kill(daemon->pid(), SIGHUP) == 0);
  REQUIRE(waitUntil(
      [&] {
        return readFile(dir + "/serve.log").find("SIGHUP: allow-list reloaded", log_at) !=
               std::string::npos;
      },
      10000ms));
  CHECK(statsQuery().code() == Code::kPermissionDenied);
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(60000ms) == std::optional<int>(0));
  removeTestDir(dir);
}
