// Fault test (label `faults`): a standby head (role standby) follows the primary's central
// PS synchronously; the primary is SIGKILLed mid-run; the standby takes over on its own
// endpoint with the next incarnation, from its replica (no checkpoint), and the node daemon
// and the workers (--coordinator PRIMARY,STANDBY) train on with it to the sample budget.
// No acknowledged version is lost: the primary applies (and answers) a version only after
// the standby acknowledged it, so the standby's version is >= the last one the primary
// applied (its debug log names each). Then the old primary, restarted, is told it is
// superseded and steps down (exit 75) without committing anything.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "daemon_harness.h"
#include "head_restart.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::vector<std::string> headArgs() { return standbyPairHeadArgs("90"); }

// The last version the primary applied, from its debug lines "applied delta ... v=N".
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

// The unix time in the promoted head's "takeover: first update applied ... at unix time T".
double firstUpdateAt(const std::string& log) {
  const auto at = log.find("takeover: first update applied");
  if (at == std::string::npos) return -1;
  const auto t = log.find("unix time ", at);
  return t == std::string::npos ? -1 : std::atof(log.c_str() + t + 10);
}

// The version in a promoted head's "central PS promoted from its standby replica at version V".
std::uint64_t promotedAt(const std::string& log) {
  const std::string key = "promoted from its standby replica at version ";
  const auto at = log.find(key);
  return at == std::string::npos ? 0 : std::strtoull(log.c_str() + at + key.size(), nullptr, 10);
}

}  // namespace

TEST_CASE(
    "faults: the primary head SIGKILLed, its synchronous standby takes over with no "
    "acknowledged version lost; the node and the workers train on; the old primary, "
    "restarted, is superseded and steps down") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());

  auto primary = startDaemon(
      dir, "primary.log", "tcp://127.0.0.1:0",
      withArgs(headArgs(), {"--replication-listen", replication, "--log-level", "debug"}));
  const std::string primary_ep = endpointIn(dir);
  // Its endpoint file is written once it follows the primary (has its snapshot).
  auto standby = startDaemon(sdir, "standby.log",
                             withArgs(headArgs(), {"--role", "standby", "--primary", replication}),
                             DaemonFiles{standby_ep, true});
  const std::string list = primary_ep + "," + standby_ep;
  // The node's calls to a silent head time out in 500 ms (default 5 s): with the standby's
  // 500 ms bound, this decides how soon the group PSes serve the new head.
  auto node = std::make_unique<Process>(
      std::vector<std::string>{groupsgddPath(), "--role", "node", "--coordinator", list,
                               "--node-groups", "2", "--mode", "grouped", "--workers", "2",
                               "--groups", "2", "--step-deadline-ms", "1000", "--give-up-s", "60",
                               "--coordinator-timeout-ms", "500"},
      dir + "/node.log");
  std::vector<std::unique_ptr<Process>> workers;
  const std::vector<std::string> quick = {"--timeout-ms", "500",         "--backoff-max-ms",
                                          "300",          "--give-up-s", "60"};
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, list, i, quick));

  json st = waitForStatus(
      dir, [](const json& s) { return s["central_version"].get<std::uint64_t>() >= 30; }, 60000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 30);
  const auto primary_incarnation = st["incarnation"].get<std::uint64_t>();
  json sst = ctl(sdir, {"status"});
  CHECK(sst["role"] == "standby");
  CHECK(sst["following"] == true);

  const double killed_at = wallNow();
  killHard(*primary);
  const std::uint64_t primary_applied = lastAppliedVersion(readFile(dir + "/primary.log"));
  REQUIRE(primary_applied >= 30);

  // The standby promotes itself; everybody trains with it.
  sst = waitForStatus(
      sdir,
      [](const json& s) {
        return s.contains("workers") && s["workers"]["active"] == 2 &&
               s["samples_trained"].get<std::uint64_t>() > 0;
      },
      30000ms);
  const double back_at = wallNow() - killed_at;
  INFO("standby: " << readFile(sdir + "/standby.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  REQUIRE(sst.contains("workers"));
  CHECK(sst["incarnation"].get<std::uint64_t>() == primary_incarnation + 1);

  // Fencing: the old primary comes back (same replication endpoint, fresh coordinator port);
  // the promoted head tells it it is superseded, and it exits 75 having committed nothing.
  Process again(
      {groupsgddPath(), "--listen", "tcp://127.0.0.1:0", "--replication-listen", replication,
       "--progress-ms", "0", "--role", "coordinator", "--workers", "2", "--groups", "2"},
      dir + "/primary-again.log");
  CHECK(again.wait(15000ms) == std::optional<int>(75));
  const std::string again_log = readFile(dir + "/primary-again.log");
  CHECK(again_log.find("superseded") != std::string::npos);
  CHECK(again_log.find("applied delta") == std::string::npos);

  REQUIRE(standby->wait(120000ms) == std::optional<int>(0));
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  const std::string slog = readFile(sdir + "/standby.log");
  const double first_update = firstUpdateAt(slog);
  REQUIRE(first_update > 0);
  const double takeover_s = first_update - killed_at;
  CHECK(takeover_s > 0);

  json s = readSummary(sdir);
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const json& hr = s["head_restart"];
  CHECK(hr["took_over_from_incarnation"].get<std::uint64_t>() == primary_incarnation);
  CHECK(hr["versions_lost_bound"] == 0);
  const auto resumed = hr["resumed_version"].get<std::uint64_t>();
  // 0 acknowledged versions lost: every version the primary applied (and could have
  // answered a group with) is in the standby's replica.
  CHECK(resumed >= primary_applied);
  CHECK(resumed <= primary_applied + 1);  // at most the one shipped, not yet applied there
  std::printf(
      "faults: primary SIGKILL at version %llu (applied there), standby resumed at %llu "
      "(versions lost 0: %d), incarnation %llu -> %llu; takeover_s %.2f (kill to the first "
      "update applied on the new head), both workers on it %.2f s after the kill; old primary "
      "restarted: superseded, exit 75; %llu samples after the takeover, accounting ok %d\n",
      static_cast<unsigned long long>(primary_applied), static_cast<unsigned long long>(resumed),
      resumed >= primary_applied ? 1 : 0, static_cast<unsigned long long>(primary_incarnation),
      llu(s["head_restart"]["incarnation"]), takeover_s, back_at, llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0);
  if (std::getenv("KEEPDIR") == nullptr)
    reportDone(dir);
  else
    std::printf("kept %s\n", dir.c_str());
}

TEST_CASE(
    "faults: `groupsgdctl failover` promotes a following standby at once; the primary it "
    "followed is superseded and exits 75") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  // A long bound: only the command can promote the standby within this test.
  const std::vector<std::string> slow = {"--standby-takeover-ms", "60000"};
  auto primary =
      startDaemon(dir, "primary.log", "tcp://127.0.0.1:0",
                  withArgs(headArgs(), withArgs(slow, {"--replication-listen", replication})));
  auto standby = startDaemon(
      sdir, "standby.log",
      withArgs(headArgs(), withArgs(slow, {"--role", "standby", "--primary", replication})),
      DaemonFiles{standby_ep, true});
  const auto incarnation = ctlJson(dir, {"status"})["incarnation"].get<std::uint64_t>();
  // A head refuses the standby's method; the standby answers it.
  CHECK(ctl(dir, {"failover"}).is_null());
  const json promoted = ctlJson(sdir, {"failover"});
  CHECK(promoted["taking_over"] == true);
  CHECK(promoted["incarnation"].get<std::uint64_t>() == incarnation + 1);
  CHECK(primary->wait(15000ms) == std::optional<int>(75));
  CHECK(readFile(dir + "/primary.log").find("stepping down") != std::string::npos);
  json st = waitForStatus(
      sdir, [](const json& s) { return s.contains("incarnation"); }, 15000ms);
  CHECK(st["incarnation"].get<std::uint64_t>() == incarnation + 1);
  CHECK(readFile(sdir + "/standby.log").find("TAKING OVER: groupsgdctl failover") !=
        std::string::npos);
  (void)ctl(sdir, {"shutdown"});
  CHECK(standby->wait(30000ms) == std::optional<int>(0));
  reportDone(dir);
}

TEST_CASE(
    "faults: the standby SIGKILLed: the primary commits nothing without it (no split "
    "possible), then a new standby joins the running primary (snapshot) and training "
    "resumes to the budget; accounting holds") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby", s2dir = dir + "/standby2";
  std::filesystem::create_directories(sdir);
  std::filesystem::create_directories(s2dir);
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_args_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::vector<std::string> as_standby = {"--role", "standby", "--primary", replication};
  // A larger budget: the groups train on (their deltas refused) while no standby is there.
  auto primary = startDaemon(
      dir, "primary.log", "tcp://127.0.0.1:0",
      withArgs(headArgs(), {"--replication-listen", replication, "--max-samples", "80000"}));
  const std::string primary_ep = endpointIn(dir);
  auto standby = startDaemon(sdir, "standby.log", withArgs(headArgs(), as_standby),
                             DaemonFiles{standby_args_ep, true});
  auto node = std::make_unique<Process>(
      std::vector<std::string>{groupsgddPath(), "--role", "node", "--coordinator", primary_ep,
                               "--node-groups", "2", "--mode", "grouped", "--workers", "2",
                               "--groups", "2", "--step-deadline-ms", "1000", "--give-up-s", "60"},
      dir + "/node.log");
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, primary_ep, i, kRecoveringWorker));
  json st = waitForStatus(
      dir, [](const json& s) { return s["central_version"].get<std::uint64_t>() >= 20; }, 60000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 20);

  killHard(*standby);
  // Lost within standby_takeover_ms (500 ms); from then on nothing commits.
  REQUIRE(waitUntil(
      [&] {
        return readFile(dir + "/primary.log").find("the standby is LOST") != std::string::npos;
      },
      10000ms));
  std::this_thread::sleep_for(1500ms);  // the coordinator's view of the version catches up
  const auto stalled = ctlJson(dir, {"status"})["central_version"].get<std::uint64_t>();
  std::this_thread::sleep_for(1500ms);
  CHECK(ctlJson(dir, {"status"})["central_version"].get<std::uint64_t>() == stalled);
  CHECK(readFile(dir + "/primary.log").find("not committed") != std::string::npos);

  // A new standby joins the running primary: a snapshot, then the stream; training goes on.
  auto again = startDaemon(s2dir, "standby2.log", withArgs(headArgs(), as_standby),
                           DaemonFiles{"tcp://127.0.0.1:" + std::to_string(freePort()), true});
  st = waitForStatus(
      dir, [&](const json& s) { return s["central_version"].get<std::uint64_t>() >= stalled + 20; },
      30000ms);
  CHECK(st["central_version"].get<std::uint64_t>() >= stalled + 20);
  json sst = ctl(s2dir, {"status"});
  CHECK(sst["following"] == true);
  CHECK(sst["central_version"].get<std::uint64_t>() >= stalled);

  REQUIRE(primary->wait(120000ms) == std::optional<int>(0));
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  json s = readSummary(dir);
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const std::string plog = readFile(dir + "/primary.log");
  CHECK(plog.find("\"snapshots_sent\":2") != std::string::npos);
  const json& link = s["central"]["standby"];
  CHECK(link["attached"] == true);
  CHECK(link["losses"] == 1);
  CHECK(link["uncommitted_deltas"].get<std::uint64_t>() > 0);
  CHECK(link["acked_version"].get<std::uint64_t>() == s["central_version"].get<std::uint64_t>());
  (void)ctl(s2dir, {"shutdown"});  // a standby not promoted stops on a signal
  ::kill(again->pid(), SIGTERM);
  CHECK(again->wait(15000ms) == std::optional<int>(0));
  std::printf(
      "faults: standby SIGKILL: the primary stalled at version %llu (nothing committed "
      "without a standby); a new standby joined and training reached the budget, "
      "accounting ok %d\n",
      static_cast<unsigned long long>(stalled), s["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}

TEST_CASE(
    "faults: the primary and its standby both SIGKILLed: a head restarted on the primary's "
    "endpoint resumes from the primary's checkpoints (as without a standby), the node and "
    "the workers come back, the run reaches its budget and accounting holds") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string primary_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  // The pair checkpoints every 20 versions into DIR/ck (the standby only once promoted).
  const std::vector<std::string> pair = withArgs(
      checkpointedHeadArgs(dir), {"--role", "coordinator", "--standby-takeover-ms", "500"});
  auto primary = startDaemon(dir, "primary.log", primary_ep,
                             withArgs(pair, {"--replication-listen", replication}));
  auto standby = startDaemon(sdir, "standby.log",
                             withArgs(pair, {"--role", "standby", "--primary", replication}),
                             DaemonFiles{standby_ep, true});
  const std::string list = primary_ep + "," + standby_ep;
  auto node = startNode(dir, list);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, list, i, kRecoveringWorker));
  json st = waitForStatus(
      dir, [](const json& s) { return s["central_version"].get<std::uint64_t>() >= 40; }, 90000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 40);
  const auto seen = st["central_version"].get<std::uint64_t>();
  const auto primary_incarnation = st["incarnation"].get<std::uint64_t>();

  // Both gone: the replica with the standby; what is left is the primary's checkpoints.
  killHard(*standby);
  const HeadRestart restart =
      restartHead(dir, *primary, primary_ep,
                  withArgs(pair, {"--max-samples", "30000", "--max-seconds", "120"}), 1000ms);
  st = waitForStatus(
      dir,
      [](const json& s) {
        return s["workers"]["active"] == 2 && s["samples_trained"].get<std::uint64_t>() > 0;
      },
      60000ms);
  const double back_at = wallNow() - restart.killed_at;
  INFO("head2: " << readFile(dir + "/head2.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  CHECK(st["incarnation"].get<std::uint64_t>() == primary_incarnation + 1);
  REQUIRE(restart.head->wait(150000ms) == std::optional<int>(0));
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  json s = readSummary(dir);
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const json& hr = s["head_restart"];
  const auto resumed = hr["resumed_version"].get<std::uint64_t>();
  CHECK(resumed > 0);
  CHECK(seen <= resumed + 2 * 20);         // the checkpoint policy's bound (+ one write's slack)
  CHECK(hr["versions_lost_bound"] == 20);  // no replica: the checkpoint policy bounds it
  std::printf(
      "faults: primary and standby both SIGKILLed at version >= %llu; a head restarted %.2f s "
      "later on the primary's endpoint resumed from checkpoint version %llu "
      "(versions_lost_bound %llu); node and workers training on it %.2f s after the kills; "
      "%llu samples after the restart, accounting ok %d\n",
      static_cast<unsigned long long>(seen), restart.restarted_at - restart.killed_at,
      static_cast<unsigned long long>(resumed), llu(hr["versions_lost_bound"]), back_at,
      llu(s["samples_trained"]), s["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}

TEST_CASE(
    "faults: a chain of takeovers: A SIGKILLed, its standby B (with a replication_listen of "
    "its own) takes over and accepts a new standby C, B SIGKILLed, C takes over; no "
    "acknowledged version lost at either takeover, terms grow, the old term is refused, the "
    "run reaches its budget with the accounting intact") {
  const std::string dir = makeTempDir();
  const std::string bdir = dir + "/b", cdir = dir + "/c";
  std::filesystem::create_directories(bdir);
  std::filesystem::create_directories(cdir);
  const auto port = [] { return "tcp://127.0.0.1:" + std::to_string(freePort()); };
  const std::string repl_a = port(), repl_b = port(), b_ep = port(), c_ep = port();
  // Room for two takeovers and a stretch of synchronous commits with C before B goes.
  const std::vector<std::string> head = withArgs(
      headArgs(), {"--max-samples", "80000", "--max-seconds", "150", "--log-level", "debug"});
  auto a = startDaemon(dir, "a.log", "tcp://127.0.0.1:0",
                       withArgs(head, {"--replication-listen", repl_a}));
  const std::string a_ep = endpointIn(dir);
  auto b = startDaemon(
      bdir, "b.log",
      withArgs(head, {"--role", "standby", "--primary", repl_a, "--replication-listen", repl_b}),
      DaemonFiles{b_ep, true});
  const std::string list = a_ep + "," + b_ep + "," + c_ep;
  auto node = std::make_unique<Process>(
      std::vector<std::string>{groupsgddPath(), "--role", "node", "--coordinator", list,
                               "--node-groups", "2", "--mode", "grouped", "--workers", "2",
                               "--groups", "2", "--step-deadline-ms", "1000", "--give-up-s", "60",
                               "--coordinator-timeout-ms", "500"},
      dir + "/node.log");
  const std::vector<std::string> quick = {"--timeout-ms", "500",         "--backoff-max-ms",
                                          "300",          "--give-up-s", "60"};
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, list, i, quick));
  Process evaluator(withArgs({WORKER_PATH, "--coordinator", list, "--name", "eval", "--evaluate",
                              "--eval-interval-ms", "300"},
                             quick),
                    dir + "/eval.log");

  json st = waitForStatus(
      dir, [](const json& s) { return s["central_version"].get<std::uint64_t>() >= 30; }, 60000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 30);
  const auto a_incarnation = st["incarnation"].get<std::uint64_t>();
  REQUIRE(ctl(bdir, {"status"})["following"] == true);

  // 1. A goes; B takes over and, having no standby yet, commits alone.
  killHard(*a);
  const std::uint64_t a_applied = lastAppliedVersion(readFile(dir + "/a.log"));
  REQUIRE(a_applied >= 30);
  json bst = waitForStatus(
      bdir,
      [](const json& s) {
        return s.contains("workers") && s["workers"]["active"] == 2 &&
               s["samples_trained"].get<std::uint64_t>() > 0;
      },
      30000ms);
  INFO("b: " << readFile(bdir + "/b.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  REQUIRE(bst.contains("incarnation"));
  const auto b_incarnation = bst["incarnation"].get<std::uint64_t>();
  CHECK(b_incarnation == a_incarnation + 1);
  const std::string b_log_then = readFile(bdir + "/b.log");
  const std::uint64_t b_resumed = promotedAt(b_log_then);
  CHECK(b_resumed >= a_applied);  // 0 acknowledged versions of A lost
  CHECK(b_resumed <= a_applied + 1);
  CHECK(b_log_then.find("standby link on " + repl_b) != std::string::npos);
  CHECK(b_log_then.find("committing alone until one attaches") != std::string::npos);

  // 2. C joins the running promoted head (snapshot, then the stream); B commits with it.
  auto c = startDaemon(cdir, "c.log", withArgs(head, {"--role", "standby", "--primary", repl_b}),
                       DaemonFiles{c_ep, true});
  REQUIRE(waitUntil([&] { return ctl(cdir, {"status"})["following"] == true; }, 20000ms));
  const auto joined_at = ctlJson(bdir, {"status"})["central_version"].get<std::uint64_t>();
  bst = waitForStatus(
      bdir,
      [&](const json& s) { return s["central_version"].get<std::uint64_t>() >= joined_at + 20; },
      30000ms);
  REQUIRE(bst["central_version"].get<std::uint64_t>() >= joined_at + 20);
  CHECK(readFile(bdir + "/b.log").find("standby attached: snapshot of version") !=
        std::string::npos);
  CHECK(ctl(cdir, {"status"})["primary_incarnation"].get<std::uint64_t>() == b_incarnation);

  // 3. B goes; C takes over from its replica of B.
  killHard(*b);
  const std::uint64_t b_applied = lastAppliedVersion(readFile(bdir + "/b.log"));
  REQUIRE(b_applied >= joined_at + 20);
  json cst = waitForStatus(
      cdir,
      [](const json& s) {
        return s.contains("workers") && s["workers"]["active"] == 2 &&
               s["samples_trained"].get<std::uint64_t>() > 0;
      },
      30000ms);
  INFO("c: " << readFile(cdir + "/c.log"));
  REQUIRE(cst.contains("incarnation"));
  CHECK(cst["incarnation"].get<std::uint64_t>() == b_incarnation + 1);

  // Fencing across the chain: a head back on B's replication endpoint (B's term, older than
  // C's) is told it is superseded by C and exits 75 having committed nothing.
  Process again({groupsgddPath(), "--listen", "tcp://127.0.0.1:0", "--replication-listen", repl_b,
                 "--progress-ms", "0", "--role", "coordinator", "--workers", "2", "--groups", "2"},
                dir + "/b-again.log");
  CHECK(again.wait(15000ms) == std::optional<int>(75));
  const std::string again_log = readFile(dir + "/b-again.log");
  CHECK(again_log.find("superseded") != std::string::npos);
  CHECK(again_log.find("applied delta") == std::string::npos);

  REQUIRE(c->wait(150000ms) == std::optional<int>(0));
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  CHECK_MESSAGE(evaluator.wait(30000ms) == std::optional<int>(0), readFile(dir + "/eval.log"));
  json s = readSummary(cdir);
  INFO("summary: " << s.dump());
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const json& hr = s["head_restart"];
  CHECK(hr["took_over_from_incarnation"].get<std::uint64_t>() == b_incarnation);
  CHECK(hr["versions_lost_bound"] == 0);
  const auto c_resumed = hr["resumed_version"].get<std::uint64_t>();
  CHECK(c_resumed >= b_applied);  // 0 acknowledged versions of B lost
  CHECK(c_resumed <= b_applied + 1);
  std::printf(
      "faults: chain of takeovers: A SIGKILL at version %llu, B resumed at %llu; C joined B at "
      "version %llu; B SIGKILL at version %llu, C resumed at %llu (versions lost 0: %d); "
      "incarnations %llu -> %llu -> %llu; %llu samples on C, accounting ok %d\n",
      static_cast<unsigned long long>(a_applied), static_cast<unsigned long long>(b_resumed),
      static_cast<unsigned long long>(joined_at), static_cast<unsigned long long>(b_applied),
      static_cast<unsigned long long>(c_resumed),
      c_resumed >= b_applied && b_resumed >= a_applied ? 1 : 0,
      static_cast<unsigned long long>(a_incarnation),
      static_cast<unsigned long long>(b_incarnation), llu(hr["incarnation"]),
      llu(s["samples_trained"]), s["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}
