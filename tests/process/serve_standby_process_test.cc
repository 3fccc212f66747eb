// Fault test (label `faults`): a --serve daemon's standby (docs/jobs.md, "Standby"). The
// standby (`--role standby --serve --primary REPLICATION`) follows the primary's job table
// and, synchronously, the central PS of each running job; the primary is SIGKILLed while a
// job trains; the standby takes over with its own front, the table as replicated and the
// job started from its replica at the primary's job incarnation + 1; the workers
// (--coordinator PRIMARY,STANDBY) move to it and the job reaches its sample budget with no
// acknowledged version lost; a job submitted after the takeover trains too. A submit is
// answered once the standby acknowledged the table holding it; with no standby attached
// (standby_alone_ms 0) it is refused. Bad input: a standby of the other kind (one-run vs
// --serve) is refused with a clear error.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon_harness.h"
#include "head_restart.h"
#include "job_worker.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::string loopback(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

// The flags both sides share (a job file names only what differs from them).
std::vector<std::string> serveArgs(const std::string& dir) {
  return {"--serve",
          "--state-dir",
          dir + "/state",
          "--max-group-slots",
          "4",
          "--progress-ms",
          "0",
          "--heartbeat-ms",
          "250",
          "--heartbeat-misses",
          "12",
          "--step-deadline-ms",
          "1000",
          "--standby-takeover-ms",
          "500",
          "--log-level",
          "debug"};
}

std::string writeJob(const std::string& dir, const std::string& name, std::uint64_t samples) {
  json job = softmaxJob(name, "grouped", 0, 120);
  job["max_samples"] = samples;
  const std::string path = dir + "/" + name + ".json";
  std::ofstream(path) << job.dump(2);
  return path;
}

// A worker of JOB trying the endpoints of LIST in turn, quick to notice a silent head.
std::unique_ptr<Process> startWorker(const std::string& dir, const std::string& list,
                                     const std::string& job, const std::string& name) {
  return std::make_unique<Process>(
      std::vector<std::string>{WORKER_PATH, "--coordinator", list, "--job", job, "--name", name,
                               "--device-ms", "2", "--timeout-ms", "500", "--backoff-max-ms", "300",
                               "--give-up-s", "60"},
      dir + "/" + name + ".log");
}

json jobRow(const std::string& dir, const std::string& name) {
  const json list = ctl(dir, {"job", "list"});
  if (!list.is_object()) return json();
  for (const auto& row : list["jobs"]) {
    if (row["name"] == name) return row;
  }
  return json();
}

bool jobIs(const std::string& dir, const std::string& name, const std::string& state) {
  const json row = jobRow(dir, name);
  return row.is_object() && row["state"] == state;
}

// The last version the primary's central PS applied, from its debug lines "applied delta
// ... v=N" (one job runs there).
std::uint64_t lastAppliedVersion(const std::string& log) {
  std::uint64_t last = 0;
  for (std::size_t at = log.find("applied delta"); at != std::string::npos;
       at = log.find("applied delta", at + 1)) {
    const auto v = log.find(" v=", at);
    const auto eol = log.find('\n', at);
    if (v == std::string::npos || v > eol) continue;
    last = std::max<std::uint64_t>(last, std::strtoull(log.c_str() + v + 3, nullptr, 10));
  }
  return last;
}

// The unix time in the promoted job's "takeover: first update applied ... at unix time T".
double firstUpdateAt(const std::string& log) {
  const auto at = log.find("takeover: first update applied");
  if (at == std::string::npos) return -1;
  const auto t = log.find("unix time ", at);
  return t == std::string::npos ? -1 : std::atof(log.c_str() + t + 10);
}

}  // namespace

TEST_CASE(
    "faults: a --serve daemon SIGKILLed mid-job; its standby takes over the job table and the "
    "job from its replica (no acknowledged version lost), the workers move to it, the job "
    "reaches its budget; a job submitted after the takeover trains") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  const std::string replication = loopback(freePort());
  const std::string primary_front = loopback(freePort());
  const std::string standby_front = loopback(freePort());

  auto primary = startDaemon(dir, "primary.log",
                             withArgs(serveArgs(dir), {"--replication-listen", replication}),
                             DaemonFiles{primary_front, true});
  // No standby follows yet and standby_alone_ms is 0: a submit is refused, not taken (once
  // the control socket answers: the endpoint file comes first).
  REQUIRE(waitUntil([&] { return ctl(dir, {"job", "list"}).is_object(); }, 10000ms, 50ms));
  const std::string early = dir + "/early-submit.log";
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "--json", "job", "submit",
                 writeJob(dir, "early", 1000)},
                early) != 0);
  CHECK(readFile(early).find("no standby attached") != std::string::npos);
  CHECK(ctlJson(dir, {"job", "list"})["jobs"].empty());
  // Its endpoint file is written once it follows the primary's table.
  auto standby =
      startDaemon(sdir, "standby.log",
                  withArgs(serveArgs(sdir), {"--role", "standby", "--primary", replication}),
                  DaemonFiles{standby_front, true});
  json sst = ctlJson(sdir, {"status"});
  CHECK(sst["role"] == "standby");
  CHECK(sst["serve"] == true);
  CHECK(sst["following"] == true);

  const json row = ctlJson(dir, {"job", "submit", writeJob(dir, "a", 150000)});
  CHECK(row["state"] == "running");
  // Answered once the standby acknowledged the table holding it.
  CHECK(row["standby_acknowledged"] == true);
  const std::string list = primary_front + "," + standby_front;
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(startWorker(dir, list, "a", "wa" + std::to_string(i)));

  json st;
  REQUIRE(waitUntil(
      [&] {
        st = ctl(dir, {"--job", "a", "status"});
        return st.is_object() && st.value("central_version", 0ULL) >= 30;
      },
      60000ms, 100ms));
  const auto primary_incarnation = st["incarnation"].get<std::uint64_t>();
  sst = ctlJson(sdir, {"status"});
  INFO("standby status: " << sst.dump());
  REQUIRE(sst["jobs"].size() == 1);
  CHECK(sst["jobs"][0]["name"] == "a");
  CHECK(sst["jobs"][0]["following"] == true);
  CHECK(sst["jobs"][0]["central_version"].get<std::uint64_t>() > 0);

  const double killed_at = wallNow();
  ::kill(primary->pid(), SIGKILL);
  REQUIRE(primary->wait(10000ms).has_value());
  const std::uint64_t primary_applied = lastAppliedVersion(readFile(dir + "/primary.log"));
  REQUIRE(primary_applied >= 30);

  // The standby promotes itself: the job runs there, its workers with it.
  REQUIRE_MESSAGE(waitUntil([&] { return jobIs(sdir, "a", "running"); }, 30000ms, 100ms),
                  readFile(sdir + "/standby.log"));
  json back;
  const bool trained = waitUntil(
      [&] {
        back = ctl(sdir, {"--job", "a", "status"});
        return back.is_object() && back.contains("workers") && back["workers"]["active"] == 2 &&
               back.value("samples_trained", 0ULL) > 0;
      },
      30000ms, 100ms);
  const double back_s = wallNow() - killed_at;
  INFO("standby: " << readFile(sdir + "/standby.log"));
  REQUIRE(trained);
  CHECK(back["incarnation"].get<std::uint64_t>() == primary_incarnation + 1);

  REQUIRE(waitUntil([&] { return jobIs(sdir, "a", "finished"); }, 120000ms, 200ms));
  const json s = ctlJson(sdir, {"job", "summary", "a"});
  INFO("summary: " << s.dump());
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["accounting_ok"] == true);
  CHECK(s["samples_trained"].get<std::uint64_t>() > 0);
  const json& hr = s["head_restart"];
  CHECK(hr["took_over_from_incarnation"].get<std::uint64_t>() == primary_incarnation);
  CHECK(hr["versions_lost_bound"] == 0);
  const auto resumed = hr["resumed_version"].get<std::uint64_t>();
  CHECK(resumed >= primary_applied);      // 0 acknowledged versions lost
  CHECK(resumed <= primary_applied + 1);  // at most the one shipped, not yet applied there
  // The job coordinator's state rode the job's link too: its run log went on (docs/
  // reliability.md, "What the standby follows of the coordinator").
  bool takeover_event = false;
  for (const auto& e : s["events"]) takeover_event = takeover_event || e["kind"] == "takeover";
  CHECK(takeover_event);
  for (auto& w : workers) CHECK(w->wait(60000ms) == std::optional<int>(0));

  // The table as replicated, and a new job on the promoted daemon.
  const json rows = ctlJson(sdir, {"job", "list"});
  REQUIRE(rows["jobs"].size() == 1);
  CHECK(rows["jobs"][0]["id"] == row["id"]);
  const json b = ctlJson(sdir, {"job", "submit", writeJob(sdir, "b", 20000)});
  CHECK(b["state"] == "running");
  CHECK(b["id"].get<std::uint64_t>() > row["id"].get<std::uint64_t>());
  std::vector<std::unique_ptr<Process>> bworkers;
  for (int i = 0; i < 2; ++i) {
    bworkers.push_back(startWorker(sdir, standby_front, "b", "wb" + std::to_string(i)));
  }
  REQUIRE(waitUntil([&] { return jobIs(sdir, "b", "finished"); }, 120000ms, 200ms));
  const json sb = ctlJson(sdir, {"job", "summary", "b"});
  CHECK(sb["stop_reason"] == "sample budget spent");
  CHECK(sb["accounting_ok"] == true);
  for (auto& w : bworkers) CHECK(w->wait(60000ms) == std::optional<int>(0));

  // Fencing: the old primary, restarted on its state directory and replication endpoint, is
  // told a newer term runs its jobs and steps down (exit 75) without committing anything.
  Process again(withArgs({GROUPSGDD_PATH, "--listen", primary_front, "--control-socket",
                          dir + "/ctl.sock", "--replication-listen", replication},
                         serveArgs(dir)),
                dir + "/primary-again.log");
  CHECK(again.wait(15000ms) == std::optional<int>(75));
  const std::string again_log = readFile(dir + "/primary-again.log");
  CHECK(again_log.find("superseded") != std::string::npos);
  CHECK(again_log.find("applied delta") == std::string::npos);

  ::kill(standby->pid(), SIGTERM);
  CHECK(standby->wait(30000ms) == std::optional<int>(0));
  const double takeover_s = firstUpdateAt(readFile(sdir + "/standby.log")) - killed_at;
  CHECK(takeover_s > 0);
  std::printf(
      "serve standby: primary SIGKILL at job version %llu (applied there), standby resumed it at "
      "%llu (versions lost 0: %d), job incarnation %llu -> %llu; takeover_s %.2f (kill to the "
      "first update applied on the promoted job), both workers on the standby %.2f s after the "
      "kill; job a's summary (promoted job): samples_trained %llu, accounting ok %d; job b "
      "submitted after the takeover: samples_trained %llu, accounting ok %d; restarted old primary "
      "exit 75\n",
      static_cast<unsigned long long>(primary_applied), static_cast<unsigned long long>(resumed),
      resumed >= primary_applied ? 1 : 0, static_cast<unsigned long long>(primary_incarnation),
      llu(hr["incarnation"]), takeover_s, back_s, llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0, llu(sb["samples_trained"]),
      sb["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}

TEST_CASE(
    "bad input: a standby of the other kind than its primary (one-run vs --serve) is refused "
    "with a clear error; the primary runs on") {
  const std::string dir = makeTempDir();
  const std::string replication = loopback(freePort());
  // A --serve primary; a one-run standby pointed at it.
  auto serve =
      startDaemon(dir, "serve.log", withArgs(serveArgs(dir), {"--replication-listen", replication}),
                  DaemonFiles{"tcp://127.0.0.1:0", true});
  const std::string odir = dir + "/onerun-standby";
  std::filesystem::create_directories(odir);
  Process one({GROUPSGDD_PATH, "--listen", "tcp://127.0.0.1:0", "--role", "standby", "--primary",
               replication, "--progress-ms", "0"},
              odir + "/standby.log");
  CHECK(one.wait(20000ms) == std::optional<int>(1));
  const std::string one_log = readFile(odir + "/standby.log");
  INFO(one_log);
  CHECK(one_log.find("--serve daemon") != std::string::npos);
  // The primary still answers and takes a job.
  CHECK(ctlJson(dir, {"job", "list"})["jobs"].empty());

  // A one-run head with a standby link; a --serve standby pointed at it.
  const std::string hdir = dir + "/head";
  std::filesystem::create_directories(hdir);
  const std::string head_replication = loopback(freePort());
  auto head =
      startDaemon(hdir, "head.log",
                  withArgs(standbyPairHeadArgs("60"), {"--replication-listen", head_replication}),
                  DaemonFiles{"tcp://127.0.0.1:0", true});
  const std::string sdir = dir + "/serve-standby";
  std::filesystem::create_directories(sdir);
  Process wrong(withArgs({GROUPSGDD_PATH, "--listen", "tcp://127.0.0.1:0", "--control-socket",
                          sdir + "/ctl.sock", "--role", "standby", "--primary", head_replication},
                         serveArgs(sdir)),
                sdir + "/standby.log");
  CHECK(wrong.wait(20000ms) == std::optional<int>(1));
  const std::string wrong_log = readFile(sdir + "/standby.log");
  INFO(wrong_log);
  CHECK(wrong_log.find("is the head of one run (role coordinator)") != std::string::npos);
  CHECK(wrong_log.find("TAKING OVER") == std::string::npos);
  // The head is untouched: its status still answers, nothing taken over.
  CHECK(ctl(hdir, {"status"}).is_object());
  ::kill(head->pid(), SIGTERM);
  CHECK(head->wait(30000ms).has_value());
  ::kill(serve->pid(), SIGTERM);
  CHECK(serve->wait(30000ms) == std::optional<int>(0));
  reportDone(dir);
}

TEST_CASE(
    "faults: a --serve daemon's standby SIGKILLed: the job commits nothing without it, a new "
    "standby joins the running primary (table and job snapshot) and training resumes; a second "
    "job submitted meanwhile is followed; `groupsgdctl failover` promotes both jobs and the "
    "primary steps down (exit 75)") {
  const std::string dir = makeTempDir();
  const std::string s1dir = dir + "/standby1", s2dir = dir + "/standby2";
  std::filesystem::create_directories(s1dir);
  std::filesystem::create_directories(s2dir);
  const std::string replication = loopback(freePort());
  const std::string primary_front = loopback(freePort());
  const std::string standby_front = loopback(freePort());
  auto primary = startDaemon(dir, "primary.log",
                             withArgs(serveArgs(dir), {"--replication-listen", replication}),
                             DaemonFiles{primary_front, true});
  auto standby1 =
      startDaemon(s1dir, "standby.log",
                  withArgs(serveArgs(s1dir), {"--role", "standby", "--primary", replication}),
                  DaemonFiles{loopback(freePort()), true});
  const json row = ctlJson(dir, {"job", "submit", writeJob(dir, "a", 400000)});
  const std::string list = primary_front + "," + standby_front;
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(startWorker(dir, list, "a", "wa" + std::to_string(i)));
  }
  const auto version = [&] {
    const json st = ctl(dir, {"--job", "a", "status"});
    return st.is_object() ? st.value("central_version", 0ULL) : 0ULL;
  };
  REQUIRE(waitUntil([&] { return version() >= 20; }, 60000ms, 100ms));

  ::kill(standby1->pid(), SIGKILL);
  REQUIRE(standby1->wait(10000ms).has_value());
  // Lost after standby_takeover_ms: from then on nothing is committed (alone_ms 0).
  REQUIRE(waitForText(dir + "/primary.log", "the standby is LOST", 10000ms));
  std::this_thread::sleep_for(1000ms);
  const std::string lost_log = readFile(dir + "/primary.log");
  const auto at = lost_log.find("acknowledged version ", lost_log.find("the standby is LOST"));
  REQUIRE(at != std::string::npos);
  const std::uint64_t stalled = std::strtoull(lost_log.c_str() + at + 21, nullptr, 10);
  CHECK(lastAppliedVersion(lost_log) <= stalled);  // a second on: nothing applied past it

  // A new standby joins the running primary and training goes on.
  auto standby2 = startDaemon(
      s2dir, "standby.log",
      withArgs(serveArgs(s2dir),
               {"--role", "standby", "--primary", replication, "--standby-takeover-ms", "60000"}),
      DaemonFiles{standby_front, true});
  REQUIRE_MESSAGE(
      waitUntil([&] { return lastAppliedVersion(readFile(dir + "/primary.log")) >= stalled + 20; },
                30000ms, 100ms),
      readFile(s2dir + "/standby.log"));
  const json incarnation = ctlJson(dir, {"--job", "a", "status"})["incarnation"];

  // A second job submitted while the new standby follows: its stream is picked up from the
  // table's change, and both jobs are promoted together.
  const json crow = ctlJson(dir, {"job", "submit", writeJob(dir, "c", 60000)});
  for (int i = 0; i < 2; ++i) {
    workers.push_back(startWorker(dir, list, "c", "wc" + std::to_string(i)));
  }
  REQUIRE_MESSAGE(waitUntil(
                      [&] {
                        const json st = ctl(s2dir, {"status"});
                        if (!st.is_object() || st["jobs"].size() != 2) return false;
                        for (const auto& j : st["jobs"]) {
                          if (j["central_version"].get<std::uint64_t>() < 5) return false;
                        }
                        return true;
                      },
                      30000ms, 100ms),
                  readFile(s2dir + "/standby.log"));
  const json cincarnation = ctlJson(dir, {"--job", "c", "status"})["incarnation"];

  // The operator's failover: promoted at once; the primary is fenced.
  const json promoted = ctlJson(s2dir, {"failover"});
  CHECK(promoted["taking_over"] == true);
  CHECK(primary->wait(15000ms) == std::optional<int>(75));
  CHECK(readFile(dir + "/primary.log").find("exiting 75") != std::string::npos);
  REQUIRE(waitUntil([&] { return jobIs(s2dir, "a", "finished"); }, 120000ms, 200ms));
  const json s = ctlJson(s2dir, {"job", "summary", "a"});
  INFO("summary: " << s.dump());
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["accounting_ok"] == true);
  CHECK(s["head_restart"]["incarnation"].get<std::uint64_t>() ==
        incarnation.get<std::uint64_t>() + 1);
  CHECK(s["head_restart"]["versions_lost_bound"] == 0);
  CHECK(ctlJson(s2dir, {"job", "list"})["jobs"][0]["id"] == row["id"]);
  REQUIRE(waitUntil([&] { return jobIs(s2dir, "c", "finished"); }, 120000ms, 200ms));
  const json sc = ctlJson(s2dir, {"job", "summary", "c"});
  INFO("summary c: " << sc.dump());
  CHECK(sc["stop_reason"] == "sample budget spent");
  CHECK(sc["accounting_ok"] == true);
  CHECK(sc["head_restart"]["incarnation"].get<std::uint64_t>() ==
        cincarnation.get<std::uint64_t>() + 1);
  CHECK(sc["head_restart"]["versions_lost_bound"] == 0);
  CHECK(sc["job"]["id"] == crow["id"]);
  for (auto& w : workers) CHECK(w->wait(60000ms) == std::optional<int>(0));
  ::kill(standby2->pid(), SIGTERM);
  CHECK(standby2->wait(30000ms) == std::optional<int>(0));
  std::printf(
      "serve standby: standby SIGKILLed at job version %llu, nothing committed without it; a new "
      "standby joined and training resumed; job c submitted while it followed; failover promoted "
      "both jobs, primary exit 75; job a finished on it (samples_trained %llu, accounting ok "
      "%d), job c too (samples_trained %llu, accounting ok %d)\n",
      static_cast<unsigned long long>(stalled), llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0, llu(sc["samples_trained"]),
      sc["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}

TEST_CASE(
    "faults: a --serve daemon whose job's group PSes run on a node daemon SIGKILLed; the node "
    "(--coordinator PRIMARY,STANDBY) joins the promoted standby's pool and serves the job "
    "there; the job reaches its budget") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  const std::string replication = loopback(freePort());
  const std::string primary_front = loopback(freePort());
  const std::string standby_front = loopback(freePort());
  // No local slots: the job's group PSes must be the node's.
  const std::vector<std::string> nodes_only = {"--max-group-slots", "0"};
  auto primary = startDaemon(
      dir, "primary.log",
      withArgs(withArgs(serveArgs(dir), nodes_only), {"--replication-listen", replication}),
      DaemonFiles{primary_front, true});
  auto standby = startDaemon(sdir, "standby.log",
                             withArgs(withArgs(serveArgs(sdir), nodes_only),
                                      {"--role", "standby", "--primary", replication}),
                             DaemonFiles{standby_front, true});
  const std::string list = primary_front + "," + standby_front;
  Process node({GROUPSGDD_PATH, "--role", "node", "--coordinator", list, "--node-groups", "2",
                "--give-up-s", "60", "--coordinator-timeout-ms", "500"},
               dir + "/node.log");
  REQUIRE(waitUntil(
      [&] {
        const json l = ctl(dir, {"job", "list"});
        return l.is_object() && l["group_slots"]["node_slots"] == 2;
      },
      30000ms, 100ms));
  ctlJson(dir, {"job", "submit", writeJob(dir, "a", 150000)});
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(startWorker(dir, list, "a", "wa" + std::to_string(i)));
  }
  REQUIRE(waitUntil(
      [&] {
        const json st = ctl(dir, {"--job", "a", "status"});
        return st.is_object() && st.value("central_version", 0ULL) >= 30;
      },
      60000ms, 100ms));
  const double killed_at = wallNow();
  ::kill(primary->pid(), SIGKILL);
  REQUIRE(primary->wait(10000ms).has_value());
  const std::uint64_t primary_applied = lastAppliedVersion(readFile(dir + "/primary.log"));

  INFO("standby: " << readFile(sdir + "/standby.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  REQUIRE(waitUntil([&] { return jobIs(sdir, "a", "finished"); }, 120000ms, 200ms));
  const json s = ctlJson(sdir, {"job", "summary", "a"});
  INFO("summary: " << s.dump());
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["accounting_ok"] == true);
  CHECK(s["head_restart"]["resumed_version"].get<std::uint64_t>() >= primary_applied);
  const json l = ctlJson(sdir, {"job", "list"});
  CHECK(l["group_slots"]["node_slots"] == 2);
  for (auto& w : workers) CHECK(w->wait(60000ms) == std::optional<int>(0));
  ::kill(standby->pid(), SIGTERM);
  CHECK(standby->wait(30000ms) == std::optional<int>(0));
  ::kill(node.pid(), SIGTERM);
  CHECK(node.wait(30000ms).has_value());
  const double takeover_s = firstUpdateAt(readFile(sdir + "/standby.log")) - killed_at;
  CHECK(takeover_s > 0);
  std::printf(
      "serve standby with a node daemon: primary SIGKILL at job version %llu, resumed at %llu on "
      "the standby, the node's group PSes serving it there; takeover_s %.2f; samples_trained "
      "%llu, accounting ok %d\n",
      static_cast<unsigned long long>(primary_applied), llu(s["head_restart"]["resumed_version"]),
      takeover_s, llu(s["samples_trained"]), s["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}

TEST_CASE(
    "faults: a chain of --serve standbys: A SIGKILLed, B (its own --replication-listen) takes "
    "over; a new standby C follows B, B SIGKILLed, C takes over; the job reaches its budget") {
  const std::string adir = makeTempDir();
  const std::string bdir = adir + "/b", cdir = adir + "/c";
  std::filesystem::create_directories(bdir);
  std::filesystem::create_directories(cdir);
  const std::string arepl = loopback(freePort()), brepl = loopback(freePort());
  const std::string afront = loopback(freePort()), bfront = loopback(freePort()),
                    cfront = loopback(freePort());
  auto a = startDaemon(adir, "a.log", withArgs(serveArgs(adir), {"--replication-listen", arepl}),
                       DaemonFiles{afront, true});
  auto b = startDaemon(bdir, "b.log",
                       withArgs(serveArgs(bdir), {"--role", "standby", "--primary", arepl,
                                                  "--replication-listen", brepl}),
                       DaemonFiles{bfront, true});
  const json row = ctlJson(adir, {"job", "submit", writeJob(adir, "a", 300000)});
  CHECK(row["standby_acknowledged"] == true);
  const std::string list = afront + "," + bfront + "," + cfront;
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(startWorker(adir, list, "a", "wa" + std::to_string(i)));
  }
  const auto versionAtLeast = [](const std::string& dir, std::uint64_t v) {
    const json st = ctl(dir, {"--job", "a", "status"});
    return st.is_object() && st.value("central_version", 0ULL) >= v;
  };
  REQUIRE(waitUntil([&] { return versionAtLeast(adir, 20); }, 60000ms, 100ms));

  // A killed: B takes over and opens its own replication_listen.
  ::kill(a->pid(), SIGKILL);
  REQUIRE(a->wait(10000ms).has_value());
  REQUIRE_MESSAGE(waitUntil([&] { return jobIs(bdir, "a", "running"); }, 30000ms, 100ms),
                  readFile(bdir + "/b.log"));
  REQUIRE(waitUntil([&] { return versionAtLeast(bdir, 40); }, 60000ms, 100ms));

  // C follows B: the table, then the job's stream (its endpoint file once it follows).
  auto c = startDaemon(cdir, "c.log",
                       withArgs(serveArgs(cdir), {"--role", "standby", "--primary", brepl}),
                       DaemonFiles{cfront, true});
  json cst;
  REQUIRE_MESSAGE(waitUntil(
                      [&] {
                        cst = ctl(cdir, {"status"});
                        return cst.is_object() && cst["following"] == true &&
                               cst["jobs"].size() == 1 && cst["jobs"][0]["following"] == true &&
                               cst["jobs"][0]["central_version"].get<std::uint64_t>() > 40;
                      },
                      30000ms, 100ms),
                  cst.dump());
  CHECK(cst["primary_term"].get<std::uint64_t>() >= 2);  // B's, above A's
  const json bst = ctlJson(bdir, {"--job", "a", "status"});
  const auto b_incarnation = bst["incarnation"].get<std::uint64_t>();

  // B killed: C takes over from its replica, one incarnation above B's.
  ::kill(b->pid(), SIGKILL);
  REQUIRE(b->wait(10000ms).has_value());
  REQUIRE_MESSAGE(waitUntil([&] { return jobIs(cdir, "a", "finished"); }, 120000ms, 200ms),
                  readFile(cdir + "/c.log"));
  const json s = ctlJson(cdir, {"job", "summary", "a"});
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["accounting_ok"] == true);
  CHECK(s["head_restart"]["took_over_from_incarnation"].get<std::uint64_t>() == b_incarnation);
  CHECK(s["head_restart"]["versions_lost_bound"] == 0);
  for (auto& w : workers) CHECK(w->wait(60000ms) == std::optional<int>(0));
}
