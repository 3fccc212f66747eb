#include "groupsgd/adaptive/registry.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace groupsgd::adaptive;

namespace {

WorkerRecord trainer(std::uint64_t id, std::uint32_t group, std::uint64_t samples = 0,
                     WorkerState state = WorkerState::kActive) {
  WorkerRecord r;
  r.id = id;
  r.role = WorkerRole::kTrainer;
  r.group = group;
  r.samples_trained = samples;
  r.state = state;
  return r;
}

WorkerRecord other(std::uint64_t id, WorkerRole role, std::uint32_t group,
                   std::uint64_t samples = 0) {
  WorkerRecord r = trainer(id, group, samples);
  r.role = role;
  return r;
}

std::vector<std::uint64_t> ids(const std::vector<const WorkerRecord*>& records) {
  std::vector<std::uint64_t> out;
  for (const auto* r : records) out.push_back(r->id);
  return out;
}

}  // namespace

TEST_CASE("registry: least-loaded spreads 5 trainers over 2 groups as 3/2 in registration order") {
  Registry reg;
  LeastLoadedPolicy policy;
  std::vector<std::uint32_t> chosen;
  for (std::uint64_t id = 1; id <= 5; ++id) {
    const auto g = policy.groupFor(reg, 2);
    chosen.push_back(g);
    reg.add(trainer(id, g));
  }
  CHECK(chosen == std::vector<std::uint32_t>{0, 1, 0, 1, 0});
  CHECK(ids(reg.groupMembers(0)) == std::vector<std::uint64_t>{1, 3, 5});
  CHECK(ids(reg.groupMembers(1)) == std::vector<std::uint64_t>{2, 4});
}

TEST_CASE("registry: least-loaded picks the lowest group id on a tie") {
  Registry reg;
  LeastLoadedPolicy policy;
  CHECK(policy.groupFor(reg, 3) == 0);
  reg.add(trainer(1, 0));
  reg.add(trainer(2, 2));
  CHECK(policy.groupFor(reg, 3) == 1);
  reg.add(trainer(3, 1));
  CHECK(policy.groupFor(reg, 3) == 0);
}

TEST_CASE("registry: least-loaded ignores departed trainers and non-trainers") {
  Registry reg;
  LeastLoadedPolicy policy;
  reg.add(trainer(1, 0));
  reg.add(trainer(2, 1));
  reg.add(trainer(3, 0));
  reg.add(trainer(4, 1));
  reg.add(trainer(5, 0));
  reg.find(1)->state = WorkerState::kDead;
  reg.find(3)->state = WorkerState::kLeft;
  reg.add(other(6, WorkerRole::kEvaluator, 0));
  reg.add(other(7, WorkerRole::kTool, 0));
  // Group 0 has one live trainer (5), group 1 has two (2, 4).
  CHECK(policy.groupFor(reg, 2) == 0);
}

TEST_CASE("registry: groupMembers lists active trainers of the group in id order") {
  Registry reg;
  reg.add(trainer(9, 1));
  reg.add(trainer(2, 1));
  reg.add(trainer(5, 1));
  reg.add(trainer(3, 0));
  reg.add(trainer(4, 1, 0, WorkerState::kLeft));
  reg.add(trainer(6, 1, 0, WorkerState::kDead));
  reg.add(other(7, WorkerRole::kEvaluator, 1));
  reg.add(other(8, WorkerRole::kTool, 1));
  CHECK(ids(reg.groupMembers(1)) == std::vector<std::uint64_t>{2, 5, 9});
  CHECK(ids(reg.groupMembers(0)) == std::vector<std::uint64_t>{3});
  CHECK(reg.groupMembers(2).empty());
}

TEST_CASE("registry: a trainer that leaves or dies drops out of its group") {
  Registry reg;
  reg.add(trainer(1, 0));
  reg.add(trainer(2, 0));
  REQUIRE(reg.groupMembers(0).size() == 2);
  reg.find(1)->state = WorkerState::kLeft;
  CHECK(ids(reg.groupMembers(0)) == std::vector<std::uint64_t>{2});
  reg.find(2)->state = WorkerState::kDead;
  CHECK(reg.groupMembers(0).empty());
  CHECK(reg.activeTrainers() == 0);
  CHECK(reg.all().size() == 2);  // records are kept
}

TEST_CASE("registry: samplesTrained sums every trainer, left and dead included") {
  Registry reg;
  reg.add(trainer(1, 0, 100));
  reg.add(trainer(2, 1, 50, WorkerState::kLeft));
  reg.add(trainer(3, 0, 25, WorkerState::kDead));
  reg.add(other(4, WorkerRole::kEvaluator, 0, 1000));
  reg.add(other(5, WorkerRole::kTool, 0, 7));
  CHECK(reg.samplesTrained() == 175);
  reg.find(1)->samples_trained = 110;
  CHECK(reg.samplesTrained() == 185);
}

TEST_CASE("registry: active counts per role") {
  Registry reg;
  reg.add(trainer(1, 0));
  reg.add(trainer(2, 1));
  reg.add(trainer(3, 1, 0, WorkerState::kDead));
  reg.add(other(4, WorkerRole::kEvaluator, 0));
  reg.add(other(5, WorkerRole::kTool, 0));
  reg.add(other(6, WorkerRole::kTool, 0));
  reg.find(6)->state = WorkerState::kLeft;
  CHECK(reg.activeTrainers() == 2);
  CHECK(reg.activeOfRole(WorkerRole::kTrainer) == 2);
  CHECK(reg.activeOfRole(WorkerRole::kEvaluator) == 1);
  CHECK(reg.activeOfRole(WorkerRole::kTool) == 1);
}

TEST_CASE("registry: find returns the record by id, or nullptr") {
  Registry reg;
  WorkerRecord& added = reg.add(trainer(42, 3, 8));
  CHECK(added.id == 42);
  WorkerRecord* found = reg.find(42);
  REQUIRE(found != nullptr);
  CHECK(found == &added);
  CHECK(found->group == 3);
  CHECK(reg.find(43) == nullptr);
  found->steps = 5;  // find gives a mutable view into the registry
  CHECK(reg.all().at(42).steps == 5);
}

TEST_CASE("registry: adding an existing id replaces its record") {
  Registry reg;
  reg.add(trainer(1, 0, 10));
  reg.add(trainer(1, 1, 20));
  CHECK(reg.all().size() == 1);
  CHECK(reg.find(1)->group == 1);
  CHECK(reg.samplesTrained() == 20);
}

TEST_CASE("registry: worker state names") {
  CHECK(std::string(workerStateName(WorkerState::kActive)) == "active");
  CHECK(std::string(workerStateName(WorkerState::kLeft)) == "left");
  CHECK(std::string(workerStateName(WorkerState::kDead)) == "dead");
}
