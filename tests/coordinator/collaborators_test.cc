// The coordinator's plain collaborators: the admission book, the head record, the failure
// ledger and the run log (each owns one part of a run's state; the coordinator calls them).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "groupsgd/coordinator/admission_book.h"
#include "groupsgd/coordinator/failure_ledger.h"
#include "groupsgd/coordinator/head_record.h"
#include "groupsgd/coordinator/run_log.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::coordinator;
using adaptive::WorkerRecord;
using adaptive::WorkerRole;

namespace {

WorkerRecord trainer(std::uint64_t id, const std::string& host, std::uint32_t pid,
                     const std::string& key = "") {
  WorkerRecord w;
  w.id = id;
  w.role = WorkerRole::kTrainer;
  w.host = host;
  w.pid = pid;
  w.public_key = key;
  return w;
}

}  // namespace

TEST_CASE("admission book: ids are taken once, shards go round robin over the trainer count") {
  AdmissionBook book(3);
  CHECK(book.nextId() == 1);
  CHECK(book.nextId() == 1);  // a refused registration takes none
  CHECK(book.takeId() == 1);
  CHECK(book.nextId() == 2);
  CHECK(book.takeShard() == 0);
  CHECK(book.takeShard() == 1);
  CHECK(book.takeShard() == 2);
  CHECK(book.takeShard() == 0);
}

TEST_CASE("admission book: a quarantined process or key is refused and counted until released") {
  AdmissionBook book(4);
  const WorkerRecord w = trainer(7, "h1", 100, "KEY7");
  CHECK(book.checkNotQuarantined("h1", 100, "KEY7").isOk());
  book.quarantine(w);
  CHECK(book.counters().quarantined == 1);
  const Status by_process = book.checkNotQuarantined("h1", 100, "");
  CHECK(by_process.code() == Code::kQuarantined);
  CHECK(by_process.message().find("process 100 on h1") != std::string::npos);
  // Under CURVE the key is the identity: another pid with the same key is the same worker.
  CHECK(book.checkNotQuarantined("h2", 555, "KEY7").code() == Code::kQuarantined);
  CHECK(book.checkNotQuarantined("h2", 555, "OTHER").isOk());
  CHECK(book.counters().quarantine_refusals == 2);
  book.release(w);
  CHECK(book.checkNotQuarantined("h1", 100, "KEY7").isOk());
  CHECK(book.counters().quarantine_refusals == 2);
}

TEST_CASE(
    "admission book: trainers seen counts registered ones and those told `finished`, once each") {
  AdmissionBook book(4);
  adaptive::Registry registry;
  registry.add(trainer(1, "h1", 10));
  WorkerRecord evaluator = trainer(2, "h1", 11);
  evaluator.role = WorkerRole::kEvaluator;
  registry.add(evaluator);
  CHECK(book.trainersSeen(registry) == 1);
  book.toldFinished("h1", 10);  // the same process, told after the end
  book.toldFinished("h2", 20);
  CHECK(book.trainersSeen(registry) == 2);
  book.admitting(5);
  CHECK(book.isAdmitting(5));
  book.admitted(5);
  CHECK_FALSE(book.isAdmitting(5));
}

TEST_CASE(
    "head record: a newer version is written to the state file at once, an older one is not") {
  testing::TempDir dir;
  const std::string file = dir.path() + "/head.json";
  HeadStart start;
  start.incarnation = 3;
  start.state_file = file;
  HeadRecord head;
  head.setStart(start);
  head.noteVersion(40);
  auto read = [&] {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());
  };
  CHECK(read()["central_version_seen"] == 40);
  CHECK(read()["incarnation"] == 3);
  head.noteVersion(12);
  CHECK(head.versionSeen() == 40);
  CHECK(read()["central_version_seen"] == 40);
  CHECK(head.newCheckpointFailures(2) == 2);
  CHECK(head.newCheckpointFailures(2) == 0);
  CHECK(head.newCheckpointFailures(5) == 3);
}

TEST_CASE("head record: a restart reports what was lost and when the trainers were back") {
  HeadRecord fresh;
  CHECK(fresh.restartJson(0, 60).is_null());
  HeadStart start;
  start.incarnation = 2;
  start.resumed_from = "ckpt-000090.bin";
  start.resumed_version = 90;
  start.previous_version_seen = 97;
  HeadRecord head;
  head.setStart(start);
  head.noteTrainersBack(3, 4, 1.5);  // not all back yet
  head.noteTrainersBack(4, 4, 2.5);
  head.noteTrainersBack(4, 4, 9.0);  // the first time counts
  const nlohmann::json j = head.restartJson(10, 60);
  CHECK(j["versions_lost_at_least"] == 7);
  CHECK(j["versions_lost_bound"] == 10);
  CHECK(j["time_to_reregister_s"] == 2.5);
}

TEST_CASE("failure ledger: the loss goes on the last failure; replays keep each group's latest") {
  FailureLedger ledger;
  CHECK_FALSE(ledger.any());
  CHECK(ledger.json(5, 9) == nlohmann::json::array());
  ledger.record({{"group", 0}, {"why", "node died"}});
  ledger.record({{"group", 1}, {"why", "node left"}});
  const nlohmann::json j = ledger.json(120, 300);
  REQUIRE(j.size() == 2);
  CHECK_FALSE(j[0].contains("samples_lost_total"));
  CHECK(j[1]["samples_lost_total"] == 120);
  CHECK(j[1]["samples_lost_bound"] == 300);
  ledger.replays(0, 3);
  ledger.replays(1, 2);
  ledger.replays(0, 4);  // a later poll replaces the group's count
  CHECK(ledger.replaysTotal() == 6);
  ledger.lostWith(8);
  ledger.lostWith(8);
  CHECK(ledger.failedGroupMembers().size() == 1);
}

TEST_CASE("run log: events carry the training time and take more fields; the target is kept") {
  RunLog log(/*print=*/false);
  CHECK_FALSE(log.training());
  CHECK(log.trainingS() == 0.0);
  log.event("stage", "-> coarse");
  log.trainingBegins();
  CHECK(log.training());
  log.event("regroup", "two groups", 0.25).update({{"worker", 3}});
  log.countRegroup();
  REQUIRE(log.events().size() == 2);
  CHECK(log.events()[0]["t_s"] == 0.0);
  CHECK(log.events()[1]["predicted_gain"] == 0.25);
  CHECK(log.events()[1]["worker"] == 3);
  CHECK_FALSE(log.events()[0].contains("predicted_gain"));
  CHECK(log.regroups() == 1);
  CHECK_FALSE(log.timeToTargetS().has_value());
  log.targetReached(0.86);
  CHECK(log.timeToTargetS().has_value());
  CHECK(log.accAtTarget() == 0.86);
}
