// The job table (parse, persist, reload, corrupt files) and the job configuration reader.
#include "groupsgd/jobs/job_table.h"

#include <doctest/doctest.h>

#include <fstream>

#include "../support/temp_dir.h"
#include "groupsgd/jobs/job_config.h"

using namespace groupsgd;
using namespace groupsgd::daemon;
using namespace groupsgd::jobs;
using nlohmann::json;

TEST_CASE("job table: a missing file is empty; saved records reload as they were") {
  testing::TempDir dir;
  auto t = JobTable::load(dir.file("jobs.json"));
  REQUIRE(t.isOk());
  CHECK(t->jobs().empty());
  JobRecord a;
  a.name = "a";
  a.id = t->nextId();
  a.config = {{"name", "a"}, {"mode", "sync"}};
  a.submitted_unix = 1700000000;
  a.starts = 2;
  JobRecord b;
  b.name = "b";
  b.id = t->nextId();
  b.state = JobState::kFinished;
  b.config = {{"name", "b"}};
  b.summary = {{"stop_reason", "target accuracy reached"}, {"accounting_ok", true}};
  b.ended_unix = 1700000100;
  t->jobs().push_back(a);
  t->jobs().push_back(b);
  REQUIRE(t->save().isOk());

  auto back = JobTable::load(dir.file("jobs.json"));
  REQUIRE(back.isOk());
  REQUIRE(back->jobs().size() == 2);
  CHECK(back->find("a")->state == JobState::kRunning);
  CHECK(back->find("a")->config["mode"] == "sync");
  CHECK(back->find("a")->starts == 2);
  CHECK(back->find("b")->state == JobState::kFinished);
  CHECK(back->find("b")->summary["accounting_ok"] == true);
  CHECK(back->find("b")->ended_unix == 1700000100);
  CHECK(back->find("c") == nullptr);
  CHECK(back->nextId() == 3);  // ids are never reused
}

TEST_CASE("job table: corrupt or inconsistent files are clear errors, never a silent reset") {
  testing::TempDir dir;
  const auto load = [&](const std::string& text) {
    std::ofstream(dir.file("jobs.json")) << text;
    return JobTable::load(dir.file("jobs.json"));
  };
  auto torn = load("{\"format\": 1, \"next_id\": 3, \"jobs\": [");
  REQUIRE(!torn.isOk());
  CHECK(torn.status().code() == Code::kDataLoss);
  CHECK(torn.status().message().find("is not valid JSON") != std::string::npos);
  CHECK(torn.status().message().find(dir.file("jobs.json")) != std::string::npos);

  auto future = load(R"({"format": 2, "next_id": 1, "jobs": []})");
  REQUIRE(!future.isOk());
  CHECK(future.status().message().find("format 2 is not 1") != std::string::npos);

  auto state = load(R"({"format": 1, "next_id": 2, "jobs": [
      {"name": "a", "id": 1, "state": "paused", "config": {}}]})");
  REQUIRE(!state.isOk());
  CHECK(state.status().message().find("has state \"paused\"") != std::string::npos);

  auto dup = load(R"({"format": 1, "next_id": 3, "jobs": [
      {"name": "a", "id": 1, "state": "running", "config": {}},
      {"name": "a", "id": 2, "state": "running", "config": {}}]})");
  REQUIRE(!dup.isOk());
  CHECK(dup.status().message().find("duplicate") != std::string::npos);

  auto missing = load(R"({"format": 1, "jobs": []})");
  REQUIRE(!missing.isOk());
  CHECK(missing.status().message().find("is malformed") != std::string::npos);
}

TEST_CASE("job config: the daemon's settings are defaults; every problem is named") {
  DaemonConfig defaults;
  defaults.heartbeat_ms = 250;
  auto ok =
      parseJobConfig({{"name", "run-1"}, {"mode", "sync"}, {"optimizer", {{"lr", 0.2}}}}, defaults);
  REQUIRE(ok.isOk());
  CHECK(ok->job_name == "run-1");
  CHECK(ok->mode == Mode::kSync);
  CHECK(ok->optimizer.lr == doctest::Approx(0.2));
  CHECK(ok->heartbeat_ms == 250);

  auto bad = parseJobConfig({{"mode", "bogus"},
                             {"frobnicate", 1},
                             {"control_socket", "/tmp/x"},
                             {"workers", 0u},
                             {"optimizer", {{"lr", -1}}},
                             {"adaptive", {{"nope", 1}}}},
                            defaults);
  REQUIRE(!bad.isOk());
  const std::string m = bad.status().message();
  for (const char* problem :
       {"'name' (a string) is missing", "mode must be one of", "unknown option 'frobnicate'",
        "'control_socket' is a daemon setting", "workers must be at least 1",
        "optimizer.lr must be > 0", "unknown option 'adaptive.nope'"}) {
    INFO(problem, " in: ", m);
    CHECK(m.find(problem) != std::string::npos);
  }
  // Cross-option checks (validate) once every single value is fine.
  auto cross = parseJobConfig({{"name", "g"}, {"mode", "grouped"}, {"workers", 2u}, {"groups", 3u}},
                              defaults);
  REQUIRE(!cross.isOk());
  CHECK(cross.status().message().find("groups must be between 1 and workers") != std::string::npos);
  // The standby link is the daemon's (each job's central PS link is set at launch).
  auto link = parseJobConfig(
      {{"name", "r"}, {"replication_listen", "tcp://127.0.0.1:7100"}, {"primary", "tcp://h:1"}},
      defaults);
  REQUIRE(!link.isOk());
  CHECK(link.status().message().find("'replication_listen' is a daemon setting") !=
        std::string::npos);
  CHECK(link.status().message().find("'primary' is a daemon setting") != std::string::npos);
  CHECK(!isValidJobName("../etc"));
  CHECK(!isValidJobName(""));
  CHECK(isValidJobName("mnist_v2.1"));
}

TEST_CASE("job config: arbiter_weight is a job-only key in (0, 1000]; model external is allowed") {
  DaemonConfig defaults;
  auto heavy = parseJobConfig({{"name", "heavy"}, {"arbiter_weight", 2.5}}, defaults);
  REQUIRE(heavy.isOk());
  CHECK(jobArbiterWeight({{"name", "heavy"}, {"arbiter_weight", 2.5}}) == 2.5);
  CHECK(!jobArbiterWeight({{"name", "plain"}}).has_value());
  for (const nlohmann::json& bad :
       {nlohmann::json(0), nlohmann::json(-1), nlohmann::json(1001), nlohmann::json("2")}) {
    auto refused = parseJobConfig({{"name", "w"}, {"arbiter_weight", bad}}, defaults);
    REQUIRE(!refused.isOk());
    INFO(refused.status().message());
    CHECK(refused.status().message().find("arbiter_weight must be a number in (0, 1000]") !=
          std::string::npos);
  }
  auto external = parseJobConfig({{"name", "torch"}, {"model", "external"}}, defaults);
  REQUIRE(external.isOk());
  CHECK(external->external_model);
}
