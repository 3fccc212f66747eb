// A promoted standby's coordinator and the primary coordinator's state it followed
// (coordinator_state.cc): the epoch ledger goes on from it (acknowledged positions kept,
// held ones issued again as duplicates), and so does the run log (training clock,
// regroups, events); a state this build cannot read is named in the summary and the
// epochs start again from 0.
#include <doctest/doctest.h>

#include <atomic>

#include "groupsgd/common/message.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/coordinator/epoch_ledger.h"
#include "support/fake_server.h"

using namespace groupsgd;

namespace {

// The central PS as far as a coordinator that stops at once needs it: zero stats.
testing::FakeServer::Reply centralAnswer(const InMessage& msg) {
  OutMessage out(1, 0);
  if (msg.kind() == BodyKind::CENTRAL_STATS_QUERY) {
    out.header().getBody().initCentralStats();
    return {std::move(out)};
  }
  return {makeErrorReply(1, 0, unavailable("not in this test"))};
}

// The summary of a ranges coordinator started with `followed` and stopped at once.
nlohmann::json summaryWith(const std::string& followed) {
  zmq::context_t ctx(1);
  testing::FakeServer central(ctx, centralAnswer);
  daemon::DaemonConfig cfg;
  cfg.role = "coordinator";
  cfg.mode = daemon::Mode::kSync;
  cfg.workers = 1;
  cfg.listen = "tcp://127.0.0.1:0";
  cfg.progress_ms = 0;
  cfg.batch_size = 64;  // ranges of 16 batches
  cfg.data_ranges = true;
  coordinator::Topology topo;
  topo.central_endpoint = central.endpoint();
  coordinator::CoordinatorDeps deps;
  deps.followed_state = followed;
  auto coordinator = coordinator::Coordinator::create(ctx, cfg, topo, {}, std::move(deps));
  REQUIRE(coordinator.isOk());
  std::atomic<bool> stop{true};
  return (*coordinator)->run(stop);
}

}  // namespace

TEST_CASE("coordinator: a promoted standby goes on with the epoch ledger it followed") {
  // The primary's ledger: trainer 1 acknowledged two ranges and holds a third, trainer 2
  // holds one.
  coordinator::EpochLedger primary(1024);
  auto r1 = primary.claim(1, 60000, {}, false);
  auto r2 = primary.claim(2, 60000, {}, false);
  REQUIRE(r1);
  REQUIRE(r2);
  auto r3 = primary.claim(1, 60000, {**r1}, false);
  REQUIRE(r3);
  REQUIRE(primary.claim(1, 60000, {**r3}, false));
  // Its run log: 12.5 s of training, two regroups, one event.
  const nlohmann::json log = {
      {"training_s", 12.5},
      {"regroups", 2},
      {"events", {{{"t_s", 1.0}, {"kind", "node"}, {"text", "node 1 offers 2 group PSes"}}}}};
  const nlohmann::json state = {{"format", 1}, {"epoch_ledger", primary.state()}, {"run_log", log}};

  const nlohmann::json s = summaryWith(state.dump());
  const nlohmann::json& resumed = s["epoch_ledger_resumed"];
  CHECK(resumed["from"] == "standby");
  CHECK(resumed["acknowledged"] == 2048);
  CHECK(resumed["held_reissued"] == 2048);  // trainer 1's third range, trainer 2's first
  REQUIRE(s["epochs"].size() == 1);
  CHECK(s["epochs"][0]["acknowledged"] == 2048);
  CHECK(s["epochs"][0]["duplicates"] == 2048);
  CHECK(s["epochs"][0]["finished"] == false);
  // The run log goes on: the primary's regroups and events first, then the takeover, on
  // the primary's training clock.
  CHECK(s["regroups"] == 2);
  REQUIRE(s["events"].size() == 2);
  CHECK(s["events"][0]["kind"] == "node");
  CHECK(s["events"][1]["kind"] == "takeover");
  CHECK(s["events"][1]["t_s"].get<double>() >= 12.5);
  CHECK(s["elapsed_s"].get<double>() >= 12.5);
}

TEST_CASE("coordinator: a followed run log it cannot read is left out; the ledger still goes on") {
  coordinator::EpochLedger primary(1024);
  REQUIRE(primary.claim(1, 60000, {}, false));
  const nlohmann::json state = {{"format", 1},
                                {"epoch_ledger", primary.state()},
                                {"run_log", {{"training_s", 3.0}, {"regroups", 1}, {"events", 7}}}};
  const nlohmann::json s = summaryWith(state.dump());
  CHECK(s["epoch_ledger_resumed"]["held_reissued"] == 1024);
  CHECK(s["regroups"] == 0);
  CHECK(s["events"].empty());
  CHECK(s["elapsed_s"].get<double>() < 3.0);
}

TEST_CASE("coordinator: a followed state it cannot read is named, and the epochs start over") {
  for (const std::string& bad : {std::string("not json"), std::string(R"({"format": 9})"),
                                 std::string(R"({"format": 1, "epoch_ledger": {"samples": 1}})")}) {
    CAPTURE(bad);
    const nlohmann::json s = summaryWith(bad);
    const nlohmann::json& resumed = s["epoch_ledger_resumed"];
    CHECK(resumed["from"] == "standby");
    REQUIRE(resumed.contains("error"));
    CHECK(s["epochs"].empty());
  }
}
