// RunSummary on hand-built registries and final counters: the accounting identity, dead
// trainers credited with what the groups acknowledged, failed groups' lost progress.
#include "groupsgd/coordinator/run_summary.h"

#include <doctest/doctest.h>

using namespace groupsgd::adaptive;
using namespace groupsgd::coordinator;

namespace {

WorkerRecord trainer(std::uint64_t id, std::uint64_t samples,
                     WorkerState state = WorkerState::kLeft, std::uint32_t group = 0) {
  WorkerRecord w;
  w.id = id;
  w.name = "w" + std::to_string(id);
  w.state = state;
  w.group = group;
  w.samples_trained = samples;
  return w;
}

GroupFlush group(std::uint32_t g, std::uint64_t received, std::uint64_t dropped,
                 std::map<std::uint64_t, std::uint64_t> acknowledged) {
  GroupFlush f;
  f.group = g;
  f.stats.samples_received = received;
  f.stats.samples_dropped = dropped;
  f.stats.acknowledged = std::move(acknowledged);
  return f;
}

groupsgd::centralps::CentralStats central(std::uint64_t applied, std::uint64_t version) {
  groupsgd::centralps::CentralStats c;
  c.samples_applied = applied;
  c.version = version;
  return c;
}

}  // namespace

TEST_CASE("run summary: trained = applied + dropped when every trainer left cleanly") {
  Registry reg;
  reg.add(trainer(1, 600));
  reg.add(trainer(2, 400));
  WorkerRecord evaluator = trainer(3, 999);
  evaluator.role = WorkerRole::kEvaluator;
  reg.add(evaluator);  // not a trainer: never counted
  FinalStats stats;
  stats.groups = {group(0, 1000, 40, {{1, 600}, {2, 400}})};
  stats.central = central(960, 31);
  stats.coordinator_bad_messages = 2;
  stats.groups[0].stats.bad_messages = 3;
  stats.central->bad_messages = 5;
  const RunSummary s = summarizeRun(reg, stats);
  CHECK(s.samples_trained == 1000);
  CHECK(s.samples_applied == 960);
  CHECK(s.samples_dropped == 40);
  CHECK(s.samples_unaccounted == 0);
  CHECK(s.accounting_ok);
  CHECK(s.bad_messages == 10);
  CHECK(s.central_version == 31);
  CHECK(s.worker_stats.size() == 2);
  CHECK(s.group_stats.size() == 1);
  CHECK(s.central["version"] == 31);
  const nlohmann::json j = s.toJson();
  CHECK(j["accounting_ok"] == true);
  CHECK(j["samples_trained"] == 1000);
}

TEST_CASE("run summary: a dead trainer counts what the groups acknowledged from it") {
  Registry reg;
  reg.add(trainer(1, 500));
  reg.add(trainer(2, 90, WorkerState::kDead));  // reported 90; the groups took 120
  reg.add(trainer(3, 10, WorkerState::kQuarantined));
  FinalStats stats;
  stats.groups = {group(0, 400, 0, {{1, 300}, {2, 100}}), group(1, 230, 0, {{1, 200}, {2, 20}})};
  stats.central = central(630, 9);
  const RunSummary s = summarizeRun(reg, stats);
  CHECK(s.credited.at(2) == 120);
  CHECK(s.credited.at(3) == 0);  // nothing acknowledged from it
  CHECK(s.samples_trained_by_dead_workers == 120);
  CHECK(s.samples_trained == 620);
  CHECK_FALSE(s.accounting_ok);  // 620 != 630: an applied sample nobody trained
  CHECK(s.worker_stats[1]["samples"] == 120);
  CHECK(reg.find(2)->samples_trained == 90);  // the registry is left as it was
}

TEST_CASE("run summary: what a failed group held counts as lost, within its members' samples") {
  Registry reg;
  reg.add(trainer(1, 300, WorkerState::kLeft, 0));
  reg.add(trainer(2, 200, WorkerState::kLeft, 1));  // its group 1 failed with its node
  FinalStats stats;
  stats.groups = {group(0, 300, 0, {{1, 300}})};
  stats.central = central(420, 12);  // 120 of group 1's samples reached the central PS
  stats.groups_failed = true;
  stats.failed_group_members = {2};
  RunSummary s = summarizeRun(reg, stats);
  CHECK(s.samples_lost_in_failed_groups == 80);
  CHECK(s.lost_bound == 200);
  CHECK(s.samples_dropped == 80);
  CHECK(s.accounting_ok);

  stats.central = central(100, 12);  // less applied than group 0 alone trained: more
  s = summarizeRun(reg, stats);      // lost than the failed group's members trained
  CHECK(s.samples_lost_in_failed_groups == 400);
  CHECK_FALSE(s.accounting_ok);
}

TEST_CASE("run summary: a central PS that did not answer leaves its table null") {
  Registry reg;
  reg.add(trainer(1, 100));
  FinalStats stats;
  stats.groups = {group(0, 100, 0, {{1, 100}})};
  stats.groups[0].stats.samples_pending = 60;  // pending and in flight: both unaccounted
  stats.groups[0].stats.samples_in_flight = 40;
  const RunSummary s = summarizeRun(reg, stats);
  CHECK(s.central.is_null());
  CHECK(s.samples_unaccounted == 100);
  CHECK_FALSE(s.accounting_ok);
}
