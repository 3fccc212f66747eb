#include "groupsgd/coordinator/epoch_ledger.h"

#include <doctest/doctest.h>

#include <fstream>
#include <set>

#include "groupsgd/coordinator/ledger_record.h"
#include "support/temp_dir.h"

using groupsgd::coordinator::EpochLedger;
using groupsgd::coordinator::kEpochLedgerFile;
using groupsgd::coordinator::ledgerAt;
using groupsgd::coordinator::LedgerRange;
using groupsgd::coordinator::recordLedger;

namespace {

LedgerRange claimOne(EpochLedger& l, std::uint64_t worker, std::vector<LedgerRange> acks = {}) {
  auto r = l.claim(worker, 100, acks, false);
  REQUIRE(r);
  REQUIRE(r->has_value());
  return **r;
}

}  // namespace

TEST_CASE("EpochLedger cuts epochs into chunks, follows claims and rolls over") {
  EpochLedger l(30);
  CHECK(claimOne(l, 1) == LedgerRange{0, 0, 30});
  CHECK(claimOne(l, 2) == LedgerRange{0, 30, 60});
  // Worker 1 is faster: it acknowledges and claims again.
  CHECK(claimOne(l, 1, {{0, 0, 30}}) == LedgerRange{0, 60, 90});
  CHECK(claimOne(l, 1, {{0, 60, 90}}) == LedgerRange{0, 90, 100});  // the short last chunk
  CHECK(claimOne(l, 1, {{0, 90, 100}}) == LedgerRange{1, 0, 30});   // epoch 1 begins
  CHECK(l.heldBy(1) == 30);
  auto e = l.epochs();
  REQUIRE(e.size() == 2);
  CHECK(e[0].acknowledged == 70);
  CHECK(l.summary()[0]["finished"] == false);
  CHECK(claimOne(l, 2, {{0, 30, 60}}) == LedgerRange{1, 30, 60});
  auto s = l.summary();
  CHECK(s[0]["coverage"].get<double>() == doctest::Approx(1.0));
  CHECK(s[0]["finished"] == true);
  CHECK(s[0]["duplicates"] == 0);
  CHECK(s[1]["acknowledged"] == 0);
}

TEST_CASE("EpochLedger issues a dead worker's ranges again, counted as duplicates, first") {
  EpochLedger l(25);
  const LedgerRange a = claimOne(l, 1);  // [0,25)
  const LedgerRange b = claimOne(l, 2);  // [25,50)
  CHECK(l.release(2) == 25);
  CHECK(l.heldBy(2) == 0);
  // The next claim gets the dead worker's range before any fresh one.
  CHECK(claimOne(l, 1, {a}) == b);
  // A late acknowledgement from the dead worker is ignored.
  auto late = l.claim(2, 100, {b}, true);
  REQUIRE(late);
  CHECK_FALSE(late->has_value());
  CHECK(l.staleAcks() == 1);
  LedgerRange r = claimOne(l, 1, {b});
  while (!(r.epoch == 1)) r = claimOne(l, 1, {r});
  auto s = l.summary();
  CHECK(s[0]["coverage"].get<double>() == doctest::Approx(1.0));
  CHECK(s[0]["acknowledged"] == 100);  // distinct: b counted once
  CHECK(s[0]["duplicates"] == 25);
}

TEST_CASE("EpochLedger: a clean stop acknowledges the trained prefix and returns the rest") {
  EpochLedger l(40);
  const LedgerRange a = claimOne(l, 1);  // [0,40)
  auto stopped = l.claim(1, 100, {{0, 0, 15}}, true);
  REQUIRE(stopped);
  CHECK_FALSE(stopped->has_value());
  CHECK(l.heldBy(1) == 0);
  // The untrained rest goes to the next claimant, not counted as duplicates.
  CHECK(claimOne(l, 2) == LedgerRange{0, 15, 40});
  auto e = l.epochs();
  CHECK(e[0].acknowledged == 15);
  CHECK(e[0].returned == 25);
  CHECK(e[0].duplicates == 0);
  // A partial acknowledgement keeps the rest held.
  CHECK(claimOne(l, 2, {{0, 15, 20}}) == LedgerRange{0, 40, 80});
  CHECK(l.heldBy(2) == 20 + 40);
  (void)a;
}

TEST_CASE("EpochLedger refuses a claim for another training set size or none") {
  EpochLedger l(10);
  REQUIRE(l.claim(1, 100, {}, false));
  auto other = l.claim(2, 60000, {}, false);
  REQUIRE_FALSE(other);
  CHECK(other.status().message().find("60000") != std::string::npos);
  CHECK_FALSE(l.claim(2, 0, {}, false));
}

TEST_CASE("EpochLedger: many workers at different speeds cover each epoch exactly once") {
  EpochLedger l(7);
  std::vector<LedgerRange> held(3);
  std::multiset<std::pair<std::uint64_t, std::uint64_t>> trained;  // (epoch, position)
  for (int w = 0; w < 3; ++w) held[w] = claimOne(l, w);
  for (int tick = 1; tick < 200; ++tick) {
    for (int w = 0; w < 3; ++w) {
      if (tick % (w + 1) != 0) continue;  // worker w is (w+1) times slower
      for (auto p = held[w].begin; p < held[w].end; ++p) trained.insert({held[w].epoch, p});
      held[w] = claimOne(l, w, {held[w]});
    }
  }
  auto e = l.epochs();
  REQUIRE(e.size() >= 3);
  for (std::size_t i = 0; i + 1 < e.size(); ++i) {
    if (e[i].acknowledged < 100) continue;
    for (std::uint64_t p = 0; p < 100; ++p) CHECK(trained.count({e[i].epoch, p}) == 1);
  }
  CHECK(e[0].acknowledged == 100);
}

TEST_CASE("EpochLedger state round-trips; what was held comes back as duplicates, issued first") {
  EpochLedger l(30);
  CHECK(claimOne(l, 1) == LedgerRange{0, 0, 30});
  CHECK(claimOne(l, 2) == LedgerRange{0, 30, 60});
  CHECK(claimOne(l, 1, {{0, 0, 30}}) == LedgerRange{0, 60, 90});
  auto restored = EpochLedger::fromState(nlohmann::json::parse(l.state().dump()), 30);
  REQUIRE(restored);
  EpochLedger& m = *restored;
  CHECK(m.datasetSize() == 100);
  auto e = m.epochs();
  REQUIRE(e.size() == 1);
  CHECK(e[0].acknowledged == 30);
  CHECK(e[0].duplicates == 60);  // 30..90 was held by the previous head's trainers
  // New trainers (new ids) get the held ranges again first, then the rest of the epoch.
  CHECK(claimOne(m, 7) == LedgerRange{0, 30, 60});
  CHECK(claimOne(m, 8) == LedgerRange{0, 60, 90});
  CHECK(claimOne(m, 7, {{0, 30, 60}}) == LedgerRange{0, 90, 100});
  CHECK(claimOne(m, 8, {{0, 60, 90}}) == LedgerRange{1, 0, 30});
  CHECK(claimOne(m, 7, {{0, 90, 100}}) == LedgerRange{1, 30, 60});
  auto s = m.summary();
  CHECK(s[0]["coverage"].get<double>() == doctest::Approx(1.0));
  CHECK(s[0]["finished"] == true);
  CHECK(s[0]["acknowledged"] == 100);
}

TEST_CASE("EpochLedger::fromState refuses a malformed state with DataLoss") {
  EpochLedger l(30);
  (void)claimOne(l, 1);
  const nlohmann::json good = l.state();
  CHECK(EpochLedger::fromState(good, 30));
  auto broken = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = std::move(value);
    auto r = EpochLedger::fromState(j, 30);
    CHECK_FALSE(r);
    if (!r) CHECK(r.status().code() == groupsgd::Code::kDataLoss);
  };
  broken("samples", "many");
  broken("cut_pos", 1000);                                   // beyond the training set
  broken("held", nlohmann::json::array({{0, 20, 10}}));      // end before begin
  broken("reissue", nlohmann::json::array({{0, 90, 200}}));  // beyond the training set
  broken("epochs", nlohmann::json::array({{0, 1, 2}}));      // three numbers, not four
  broken("epochs", nlohmann::json::array({{5, 0, 0, 0}}));   // an epoch not yet begun
  nlohmann::json missing = good;
  missing.erase("held");
  CHECK_FALSE(EpochLedger::fromState(missing, 30));
}

TEST_CASE("epoch ledger record: by checkpoint version, the newest older one, keep_last") {
  groupsgd::testing::TempDir tmp;
  const std::string dir = tmp.path();
  CHECK(ledgerAt(dir, 10).status().code() == groupsgd::Code::kNotFound);  // older heads
  for (std::uint64_t v : {10, 20, 30}) {
    REQUIRE(recordLedger(dir, v, nlohmann::json{{"at", v}}, 2));
  }
  auto at25 = ledgerAt(dir, 25);
  REQUIRE(at25);
  CHECK(at25->version == 20);
  CHECK(at25->ledger["at"] == 20);
  CHECK(ledgerAt(dir, 30)->version == 30);
  CHECK(ledgerAt(dir, 15).status().code() == groupsgd::Code::kNotFound);  // 10 was pruned
  {
    std::ofstream f(dir + "/" + kEpochLedgerFile);
    f << R"({"format": 99, "checkpoints": []})";
  }
  CHECK(ledgerAt(dir, 30).status().code() == groupsgd::Code::kDataLoss);
  {
    std::ofstream f(dir + "/" + kEpochLedgerFile);
    f << "not json";
  }
  CHECK(ledgerAt(dir, 30).status().code() == groupsgd::Code::kDataLoss);
  REQUIRE(recordLedger(dir, 40, nlohmann::json{{"at", 40}}, 2));  // replaces a broken file
  CHECK(ledgerAt(dir, 40)->ledger["at"] == 40);
}
