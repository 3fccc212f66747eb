// A multi-job daemon (groupsgdd --serve, docs/jobs.md) with real workers on loopback:
// lifecycle and refusals at submit, workers refused without a job or with an unknown
// one, two jobs training at once to their targets, another job's id refused by a job's
// PSes, a job stopped while the other runs on, and a restart with a job in flight.
#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "groupsgd/client/client.h"
#include "groupsgd/common/transport.h"
#include "job_worker.h"
#include "process.h"

using namespace groupsgd;
using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Ctl {
  int rc = -1;
  std::string out;  // stdout and stderr
};

// One groupsgdctl call against dir/ctl.sock.
Ctl ctl(const std::string& dir, std::vector<std::string> args) {
  static int n = 0;
  const std::string log = dir + "/ctl-" + std::to_string(++n) + ".log";
  std::vector<std::string> argv = {GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock"};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, log);
  auto rc = p.wait(30000ms);
  REQUIRE(rc.has_value());
  return {*rc, readFile(log)};
}

json ctlJson(const std::string& dir, std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  Ctl c = ctl(dir, args);
  INFO(c.out);
  REQUIRE(c.rc == 0);
  return json::parse(c.out);
}

std::string writeJob(const std::string& dir, const std::string& file, const json& job) {
  const std::string path = dir + "/" + file;
  std::ofstream(path) << job.dump(2);
  return path;
}

// A port free now, for a front that must keep its endpoint across a restart.
int freePort() {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind("tcp://127.0.0.1:0");
  const std::string ep = s.get(zmq::sockopt::last_endpoint);
  return std::stoi(ep.substr(ep.rfind(':') + 1));
}

std::unique_ptr<Process> startDaemon(const std::string& dir, const std::string& log, int port = 0,
                                     std::uint32_t slots = 3,
                                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {GROUPSGDD_PATH,       "--serve",
                                   "--state-dir",        dir + "/state",
                                   "--control-socket",   dir + "/ctl.sock",
                                   "--listen",           "tcp://127.0.0.1:" + std::to_string(port),
                                   "--endpoint-file",    dir + "/ep",
                                   "--max-group-slots",  std::to_string(slots),
                                   "--progress-ms",      "0",
                                   "--heartbeat-ms",     "200",
                                   "--step-deadline-ms", "2000"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto d = std::make_unique<Process>(argv, dir + "/" + log);
  REQUIRE(
      waitUntil([&] { return readFile(dir + "/" + log).find("serving jobs") != std::string::npos; },
                30000ms));
  return d;
}

std::string frontEndpoint(const std::string& dir) {
  std::string ep = readFile(dir + "/ep");
  while (!ep.empty() && ep.back() == '\n') ep.pop_back();
  return ep;
}

std::unique_ptr<Process> startWorker(const std::string& dir, const std::string& job,
                                     const std::string& name, bool evaluate = false) {
  return startJobWorker(dir, frontEndpoint(dir), job, name, evaluate);
}

json jobRow(const std::string& dir, const std::string& name) {
  const json list = ctlJson(dir, {"job", "list"});
  for (const auto& row : list["jobs"]) {
    if (row["name"] == name) return row;
  }
  return json();
}

bool jobIs(const std::string& dir, const std::string& name, const std::string& state) {
  const json row = jobRow(dir, name);
  return row.is_object() && row["state"] == state;
}

json softmaxJob(const std::string& name, const std::string& mode, double target) {
  return groupsgd::testing::softmaxJob(name, mode, target, 120);
}

// JOB, resumed at central version `resumed` and trained on since, stopped with --drain: its
// summary holds more than 20 versions since the resume and its accounting; its workers exit
// 0, then the daemon on SIGTERM.
void drainResumedJob(const std::string& dir, const std::string& job, std::uint64_t resumed,
                     const std::vector<std::unique_ptr<Process>>& workers, Process& daemon) {
  const json drained = ctlJson(dir, {"job", "stop", job, "--drain"});
  CHECK(drained["drain"] == true);
  REQUIRE(waitUntil([&] { return jobIs(dir, job, "stopped"); }, 60000ms, 200ms));
  const json s = ctlJson(dir, {"job", "summary", job});
  INFO(s.dump());
  CHECK(s["central"]["version"].get<std::uint64_t>() > resumed + 20);
  CHECK(s["samples_trained"].get<std::uint64_t>() > 0);
  CHECK(s["accounting_ok"] == true);
  for (auto& w : workers) CHECK(w->wait(60000ms) == std::optional<int>(0));
  ::kill(daemon.pid(), SIGTERM);
  CHECK(daemon.wait(30000ms) == std::optional<int>(0));
}

}  // namespace

TEST_CASE(
    "jobs: refusals at submit, workers without a job, cross-job messages, two jobs to target") {
  const std::string dir = makeTempDir();
  auto daemon = startDaemon(dir, "daemon.log");
  CHECK(ctlJson(dir, {"job", "list"})["jobs"].empty());

  // A bad job: every problem named, nothing started.
  const std::string bad = writeJob(dir, "bad.json",
                                   {{"name", "x y"},
                                    {"mode", "bogus"},
                                    {"frobnicate", 1},
                                    {"listen", "tcp://*:1"},
                                    {"batch_size", 0}});
  Ctl refused = ctl(dir, {"job", "submit", bad});
  CHECK(refused.rc == 1);
  for (const char* problem : {"name 'x y'", "mode must be one of", "unknown option 'frobnicate'",
                              "'listen' is a daemon setting", "batch_size must be"}) {
    CHECK_MESSAGE(refused.out.find(problem) != std::string::npos, problem, "\n", refused.out);
  }
  CHECK(ctlJson(dir, {"job", "list"})["jobs"].empty());
  Ctl odd = ctl(dir, {"raw", "job.submit", R"({"config": {"name": 5}})"});
  CHECK(odd.rc == 1);
  CHECK(odd.out.find("'name' (a string) is missing") != std::string::npos);

  const json a =
      ctlJson(dir, {"job", "submit", writeJob(dir, "a.json", softmaxJob("a", "sync", 0.75))});
  CHECK(a["state"] == "running");
  CHECK(a["groups"] == 1);
  Ctl again = ctl(dir, {"job", "submit", dir + "/a.json"});
  CHECK(again.rc == 1);
  CHECK(again.out.find("name 'a' is in use") != std::string::npos);
  json big = softmaxJob("big", "grouped", 0);
  big["workers"] = 3;
  big["groups"] = 3;
  Ctl full = ctl(dir, {"job", "submit", writeJob(dir, "big.json", big)});
  CHECK(full.rc == 1);
  CHECK(full.out.find("needs 3 group PS(es), 2 of max_group_slots 3 are free") !=
        std::string::npos);
  const json b =
      ctlJson(dir, {"job", "submit", writeJob(dir, "b.json", softmaxJob("b", "grouped", 0.75))});
  CHECK(b["id"] != a["id"]);

  // Workers that name no job (two run) or an unknown one are refused, listing the jobs.
  auto lost = startWorker(dir, "", "nojob");
  CHECK(lost->wait(30000ms).value_or(0) != 0);
  CHECK(readFile(dir + "/nojob.log").find("2 jobs are running; name one with --job: a, b") !=
        std::string::npos);
  auto unknown = startWorker(dir, "nope", "unknown");
  CHECK(unknown->wait(30000ms).value_or(0) != 0);
  CHECK(readFile(dir + "/unknown.log").find("no job 'nope'; jobs you can join: a, b") !=
        std::string::npos);
  // A per-job control method needs the job named too.
  Ctl which = ctl(dir, {"status"});
  CHECK(which.rc == 1);
  CHECK(which.out.find("name one with --job") != std::string::npos);
  CHECK(ctlJson(dir, {"--job", "b", "status"})["mode"] == "grouped");

  // Job a's PSes refuse messages carrying job b's id; a's own id passes.
  {
    zmq::context_t ctx(1);
    client::CoordinatorClient probe(ctx, frontEndpoint(dir), 1, 5000ms);
    probe.joinJob("a");
    auto assigned = probe.registerAs(client::Role::kTool, "cross-job-probe");
    REQUIRE(assigned.isOk());
    CHECK(probe.jobId() == a["id"].get<std::uint64_t>());
    const std::uint64_t other = b["id"].get<std::uint64_t>();
    MessageLimits limits;
    limits.job_id = other;
    RpcClient central(ctx, assigned->central_endpoint, limits);
    std::vector<float> params(assigned->param_count);
    auto fetched = client::fetchCentralModel(central, other, params, 5000ms);
    REQUIRE(!fetched.isOk());
    CHECK(fetched.status().code() == Code::kPermissionDenied);
    MessageLimits own;
    own.job_id = probe.jobId();
    RpcClient central_own(ctx, assigned->central_endpoint, own);
    CHECK(client::fetchCentralModel(central_own, probe.jobId(), params, 5000ms).isOk());
    REQUIRE(!assigned->group_endpoint.empty());
    client::GroupClient intruder(ctx, *assigned, other, 5000ms);
    std::vector<float> grad(assigned->param_count, 0.01f);
    auto pushed = intruder.push(0, std::span<const float>(grad), 8, 1.0f, 1.0f, params);
    REQUIRE(!pushed.isOk());
    CHECK(pushed.status().code() == Code::kPermissionDenied);
    CHECK(pushed.status().message().find("is not this job") != std::string::npos);
  }

  // Both jobs train at once, each to its own target.
  std::vector<std::unique_ptr<Process>> workers;
  for (const std::string job : {"a", "b"}) {
    workers.push_back(startWorker(dir, job, job + "-w1"));
    workers.push_back(startWorker(dir, job, job + "-w2"));
    workers.push_back(startWorker(dir, job, job + "-eval", true));
  }
  REQUIRE(waitUntil([&] { return jobIs(dir, "a", "finished") && jobIs(dir, "b", "finished"); },
                    120000ms, 500ms));
  for (const std::string job : {"a", "b"}) {
    const json s = ctlJson(dir, {"job", "summary", job});
    INFO(job, ": ", s.dump());
    CHECK(s["stop_reason"].get<std::string>().find("target") != std::string::npos);
    CHECK(s["acc_at_target"].get<double>() >= 0.75);
    CHECK(s["accounting_ok"] == true);
    CHECK(s["job"]["name"] == job);
  }
  for (auto& w : workers) CHECK(w->wait(30000ms) == std::optional<int>(0));
  // The daemon stays up with its slots free, and stops on SIGTERM.
  CHECK(ctlJson(dir, {"job", "list"})["group_slots"]["in_use"] == 0);
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(30000ms) == std::optional<int>(0));
}

TEST_CASE("jobs: a job stopped while the other trains on; restart resumes the running job") {
  const std::string dir = makeTempDir();
  const int port = freePort();  // the workers find the restarted daemon at the same front
  auto daemon = startDaemon(dir, "daemon1.log", port);
  json a = softmaxJob("a", "sync", 0);
  json b = softmaxJob("b", "sync", 0);
  b["checkpoint_every_versions"] = 20;
  ctlJson(dir, {"job", "submit", writeJob(dir, "a.json", a)});
  ctlJson(dir, {"job", "submit", writeJob(dir, "b.json", b)});
  std::vector<std::unique_ptr<Process>> a_workers, b_workers;
  for (int i = 1; i <= 2; ++i) {
    a_workers.push_back(startWorker(dir, "a", "a-w" + std::to_string(i)));
    b_workers.push_back(startWorker(dir, "b", "b-w" + std::to_string(i)));
  }
  auto version = [&](const std::string& job) {
    return ctlJson(dir, {"--job", job, "status"})["central_version"].get<std::uint64_t>();
  };
  REQUIRE(waitUntil([&] { return version("a") > 10 && version("b") > 10; }, 60000ms, 200ms));

  // Stop a at once: its workers are told to stop, b trains on.
  const json stopping = ctlJson(dir, {"job", "stop", "a"});
  CHECK(stopping["drain"] == false);
  REQUIRE(waitUntil([&] { return jobIs(dir, "a", "stopped"); }, 60000ms, 200ms));
  for (auto& w : a_workers) CHECK(w->wait(60000ms) == std::optional<int>(0));
  const std::uint64_t b_then = version("b");
  REQUIRE(waitUntil([&] { return version("b") > b_then + 20; }, 30000ms, 200ms));
  CHECK(ctlJson(dir, {"job", "summary", "a"})["job"]["name"] == "a");
  Ctl not_yet = ctl(dir, {"job", "summary", "b"});
  CHECK(not_yet.rc == 1);
  CHECK(not_yet.out.find("its summary comes when it ends") != std::string::npos);

  // The daemon stops with b in flight; restarted, it resumes b from its checkpoint and
  // b's workers (still running) come back through the front. a keeps its summary.
  const std::uint64_t before = version("b");
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(30000ms) == std::optional<int>(0));
  daemon = startDaemon(dir, "daemon2.log", port);
  CHECK(jobIs(dir, "a", "stopped"));
  CHECK(jobIs(dir, "b", "running"));
  CHECK(readFile(dir + "/daemon2.log").find("resumed from") != std::string::npos);
  const std::uint64_t resumed = version("b");
  CHECK(resumed >= before);  // the checkpoint written at the stop
  const auto active = [&] {
    return ctlJson(dir, {"--job", "b", "status"})["workers"]["active"].get<int>();
  };
  REQUIRE(waitUntil([&] { return active() == 2 && version("b") > resumed + 20; }, 90000ms, 300ms));
  CHECK(ctlJson(dir, {"job", "status", "b"})["status"]["incarnation"].get<std::uint64_t>() >= 2);

  drainResumedJob(dir, "b", resumed, b_workers, *daemon);
}

TEST_CASE("jobs: a --serve daemon SIGKILLed with a job in flight resumes it; SIGHUP keeps it up") {
  const std::string dir = makeTempDir();
  const int port = freePort();  // the workers find the restarted daemon at the same front
  auto daemon = startDaemon(dir, "daemon1.log", port);
  json k = softmaxJob("k", "sync", 0);
  k["checkpoint_every_versions"] = 10;
  ctlJson(dir, {"job", "submit", writeJob(dir, "k.json", k)});
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 1; i <= 2; ++i) workers.push_back(startWorker(dir, "k", "k-w" + std::to_string(i)));
  auto version = [&] {
    return ctlJson(dir, {"--job", "k", "status"})["central_version"].get<std::uint64_t>();
  };
  REQUIRE(waitUntil([&] { return version() > 30; }, 60000ms, 200ms));

  // SIGHUP: the daemon has no run of its own to reload; it says so and serves on.
  ::kill(daemon->pid(), SIGHUP);
  REQUIRE(waitUntil(
      [&] { return readFile(dir + "/daemon1.log").find("SIGHUP") != std::string::npos; }, 10000ms));
  const std::uint64_t after_hup = version();
  REQUIRE(waitUntil([&] { return version() > after_hup + 5; }, 30000ms, 200ms));

  // SIGKILL: no final checkpoint, no table write. The job resumes from its newest
  // periodic checkpoint; the workers, still running, come back through the front.
  ::kill(daemon->pid(), SIGKILL);
  CHECK(daemon->wait(30000ms) == std::optional<int>(-SIGKILL));
  daemon = startDaemon(dir, "daemon2.log", port);
  CHECK(jobIs(dir, "k", "running"));
  const std::string log2 = readFile(dir + "/daemon2.log");
  CHECK(log2.find("resumed from") != std::string::npos);
  const std::uint64_t resumed = version();
  CHECK(resumed >= 10);
  const auto active = [&] {
    return ctlJson(dir, {"--job", "k", "status"})["workers"]["active"].get<int>();
  };
  REQUIRE(waitUntil([&] { return active() == 2 && version() > resumed + 20; }, 90000ms, 300ms));

  drainResumedJob(dir, "k", resumed, workers, *daemon);
}

TEST_CASE("jobs: a job file's arbiter_weight reaches the daemon's arbiter, refused without one") {
  const std::string dir = makeTempDir();
  json j = softmaxJob("heavy", "sync", 0);
  j["arbiter_weight"] = 2.5;
  {
    auto plain = startDaemon(dir, "plain.log");
    Ctl refused = ctl(dir, {"job", "submit", writeJob(dir, "heavy.json", j)});
    CHECK(refused.rc != 0);
    CHECK(refused.out.find("arbiter_weight needs the daemon's device arbiter") !=
          std::string::npos);
    ::kill(plain->pid(), SIGTERM);
    CHECK(plain->wait(30000ms) == std::optional<int>(0));
  }
  const std::string state = dir + "/arbitrated";
  std::filesystem::create_directories(state);
  auto daemon =
      startDaemon(state, "daemon.log", 0, 3,
                  {"--arbiter-listen", "tcp://127.0.0.1:0", "--arbiter-policy", "crossover"});
  const json row = ctlJson(state, {"job", "submit", writeJob(state, "heavy.json", j)});
  const std::string weighs = "arbiter: job " + std::to_string(row["id"].get<int>()) + " weighs 2.5";
  CHECK(waitForText(state + "/daemon.log", weighs, 10000ms));
  ctlJson(state, {"job", "stop", "heavy"});
  REQUIRE(waitUntil([&] { return jobIs(state, "heavy", "stopped"); }, 60000ms, 200ms));
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(30000ms) == std::optional<int>(0));
}

TEST_CASE("jobs: job list shows the daemon's shared devices: holder, queue and lease waits") {
  const std::string dir = makeTempDir();
  auto daemon = startDaemon(dir, "daemon.log", 0, 3,
                            {"--arbiter-listen", "tcp://127.0.0.1:" + std::to_string(freePort()),
                             "--arbiter-policy", "fifo"});
  CHECK(ctlJson(dir, {"job", "list"})["arbiter"]["devices"].empty());
  ctlJson(dir, {"job", "submit", writeJob(dir, "shared.json", softmaxJob("shared", "sync", 0))});
  const std::string log = readFile(dir + "/daemon.log");
  const auto at = log.find("arbiter on ") + 11;
  REQUIRE(at > 11);
  const std::string arbiter = log.substr(at, log.find(',', at) - at);
  std::vector<std::unique_ptr<Process>> workers;
  for (const char* name : {"a", "b"}) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", frontEndpoint(dir), "--job",
                                 "shared", "--name", name, "--device-ms", "5", "--give-up-s", "60",
                                 "--shared-device", "dev0", "--arbiter", arbiter,
                                 "--device-lock-dir", dir + "/locks"},
        dir + "/" + name + ".log"));
  }
  // Both workers of job "shared" take turns on dev0: its leases name the job, not its id.
  json view;
  REQUIRE(waitUntil(
      [&] {
        view = ctlJson(dir, {"job", "list"})["arbiter"];
        return view["devices"].size() == 1 && view["devices"][0]["grants"].get<int>() >= 20;
      },
      60000ms, 300ms));
  INFO(view.dump());
  CHECK(view["policy"] == "fifo");
  const json& dev = view["devices"][0];
  CHECK(dev["device"] == "dev0");
  CHECK(dev["held_s"].get<double>() > 0);
  CHECK(dev["mean_wait_ms"].get<double>() >= 0);
  for (const auto& holder : dev["holders"]) CHECK(holder == "shared");
  REQUIRE(view["jobs"].size() == 1);
  CHECK(view["jobs"][0]["job"] == "shared");
  CHECK(view["jobs"][0]["grants"].get<int>() >= 20);
  // The table a person reads: the devices' table under the job list.
  const Ctl table = ctl(dir, {"job", "list"});
  CHECK(table.out.find("arbiter.devices:") != std::string::npos);
  CHECK(table.out.find("dev0") != std::string::npos);
  ctlJson(dir, {"job", "stop", "shared"});
  REQUIRE(waitUntil([&] { return jobIs(dir, "shared", "stopped"); }, 60000ms, 200ms));
  for (auto& w : workers) CHECK(w->wait(60000ms).has_value());
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(30000ms) == std::optional<int>(0));
}
