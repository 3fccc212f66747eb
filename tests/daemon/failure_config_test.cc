// Failure-handling settings (quarantine, give-up time) and the head incarnation file.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "groupsgd/coordinator/incarnation.h"
#include "groupsgd/daemon/config.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::daemon;
using namespace groupsgd::coordinator;
using nlohmann::json;

TEST_CASE(
    "daemon config: quarantine and give-up settings parse from flags and JSON, with their "
    "defaults") {
  DaemonConfig c;
  CHECK(c.quarantine_after == 5);
  CHECK(c.quarantine_window_s == 60);
  CHECK(c.give_up_s == 600);
  bool help = false;
  REQUIRE(
      applyFlags({"--quarantine-after", "3", "--quarantine-window-s", "10", "--give-up-s", "30"},
                 &c, &help)
          .isOk());
  CHECK(c.quarantine_after == 3);
  CHECK(c.quarantine_window_s == 10);
  CHECK(c.give_up_s == 30);
  REQUIRE(applyJson(json::parse(R"({"quarantine_after": 0})"), &c).isOk());
  CHECK(c.quarantine_after == 0);
  CHECK(validate(c).isOk());
  CHECK(toJson(c)["quarantine_window_s"] == 10);
}

TEST_CASE(
    "daemon config: out-of-range quarantine window and give-up time are refused, naming the key") {
  for (double bad : {0.0, -1.0, 100000.0}) {
    DaemonConfig c;
    c.quarantine_window_s = bad;
    Status s = validate(c);
    CHECK_FALSE(s.isOk());
    CHECK(s.message().find("quarantine_window_s") != std::string::npos);
  }
  DaemonConfig c;
  c.give_up_s = 0;
  Status s = validate(c);
  CHECK_FALSE(s.isOk());
  CHECK(s.message().find("give_up_s") != std::string::npos);
}

TEST_CASE("head incarnation: grows with every start and keeps the previous head's version") {
  const groupsgd::testing::TempDir tmp;
  const std::string dir = tmp.path();
  auto first = startIncarnation(dir);
  REQUIRE(first.isOk());
  CHECK(first->incarnation == 1);
  CHECK_FALSE(first->previous_version_seen.has_value());
  CHECK(first->state_file == dir + "/head.json");
  // What a running head records (Coordinator::persistHeadState).
  std::ofstream(dir + "/head.json")
      << json{{"incarnation", 1}, {"central_version_seen", 77}}.dump();
  auto second = startIncarnation(dir);
  REQUIRE(second.isOk());
  CHECK(second->incarnation == 2);
  REQUIRE(second->previous_version_seen.has_value());
  CHECK(*second->previous_version_seen == 77);
  auto third = startIncarnation(dir);
  REQUIRE(third.isOk());
  CHECK(third->incarnation == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "head incarnation: a corrupt state file is an error, not a silent reset; no directory: the "
    "clock") {
  const groupsgd::testing::TempDir tmp;
  const std::string dir = tmp.path();
  std::ofstream(dir + "/head.json") << "{not json";
  auto r = startIncarnation(dir);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kDataLoss);
  CHECK(r.status().message().find("head.json") != std::string::npos);
  std::ofstream(dir + "/head.json") << json{{"central_version_seen", 3}}.dump();  // no incarnation
  CHECK_FALSE(startIncarnation(dir).isOk());
  auto none = startIncarnation("");
  REQUIRE(none.isOk());
  CHECK(none->incarnation > 1000000000u);  // seconds since 1970
  CHECK(none->incarnation < (1ull << 31));
  CHECK(none->state_file.empty());
  std::filesystem::remove_all(dir);
}
