#include "groupsgd/arbiter/lease_table.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <vector>

using namespace groupsgd;
using namespace groupsgd::arbiter;

namespace {

LeaseKey key(std::uint64_t job, std::uint64_t worker) { return {job, worker}; }

bool grants(const std::vector<Grant>& g, LeaseKey k) {
  return std::any_of(g.begin(), g.end(), [&](const Grant& x) { return x.key == k; });
}

// One device shared by a greedy job (its `greedy_workers` workers ask again the
// moment they give the device back) and another job's worker that asks once per
// round. Returns, per round of the other job, how many grants the greedy job
// got between the other's request and its grant.
std::vector<int> greedyWaits(Policy policy, int rounds, int greedy_workers) {
  LeaseTable t(policy, {});
  const LeaseKey other = key(2, 1);
  std::map<std::uint64_t, std::uint64_t> next_step;  // per greedy worker
  for (int w = 1; w <= greedy_workers; ++w) {
    (void)t.acquire("d", key(1, w), next_step[w]++);
  }
  std::vector<int> waits;
  for (int r = 0; r < rounds; ++r) {
    auto now = t.acquire("d", other, static_cast<std::uint64_t>(r));
    int greedy_grants = 0;
    while (!grants(now, other)) {
      const LeaseKey holder = t.holders("d").at(0);
      REQUIRE(holder.job == 1);
      now = t.release("d", holder);
      auto again = t.acquire("d", holder, next_step[holder.worker]++);
      now.insert(now.end(), again.begin(), again.end());
      greedy_grants += static_cast<int>(
          std::count_if(now.begin(), now.end(), [](const Grant& g) { return g.key.job == 1; }));
      REQUIRE(greedy_grants < 100);
    }
    waits.push_back(greedy_grants);
    (void)t.release("d", other);
  }
  return waits;
}

// Jobs whose workers ask for device "d" again the moment they give it back, so a request
// of every listed worker is always waiting: the crossover weights' setting.
struct AlwaysReady {
  LeaseTable table;
  std::map<LeaseKey, std::uint64_t> step;  // each worker's next step

  explicit AlwaysReady(JobWeights weights) : table(Policy::kCrossover, std::move(weights)) {}
  // The first request of each of these workers.
  void ask(std::initializer_list<LeaseKey> workers) {
    for (LeaseKey k : workers) (void)table.acquire("d", k, step[k]++);
  }
  // The job of each of the next `rounds` holders, each releasing and asking again.
  std::vector<std::uint64_t> run(int rounds) {
    std::vector<std::uint64_t> jobs;
    for (int i = 0; i < rounds; ++i) {
      const LeaseKey holder = table.holders("d").at(0);
      jobs.push_back(holder.job);
      (void)table.release("d", holder);
      (void)table.acquire("d", holder, step[holder]++);
    }
    return jobs;
  }
  // Rounds per job of the next `rounds`.
  std::map<std::uint64_t, int> share(int rounds) {
    std::map<std::uint64_t, int> got;
    for (std::uint64_t job : run(rounds)) ++got[job];
    return got;
  }
};

}  // namespace

TEST_CASE("lease table: policy none grants every request at once") {
  LeaseTable t(Policy::kNone, {});
  CHECK(grants(t.acquire("gpu0", key(1, 1), 0), key(1, 1)));
  CHECK(grants(t.acquire("gpu0", key(2, 1), 0), key(2, 1)));
  CHECK(t.holders("gpu0").size() == 2);
  CHECK(t.waiting("gpu0") == 0);
}

TEST_CASE(
    "lease table: fifo serves one holder at a time in the order of the "
    "requests") {
  LeaseTable t(Policy::kFifo, {});
  CHECK(grants(t.acquire("gpu0", key(1, 1), 0), key(1, 1)));
  CHECK(t.acquire("gpu0", key(2, 1), 0).empty());
  CHECK(t.acquire("gpu0", key(3, 1), 0).empty());
  CHECK(t.acquire("gpu0", key(1, 2), 0).empty());
  CHECK(t.waiting("gpu0") == 3);
  std::vector<LeaseKey> order;
  LeaseKey holder = key(1, 1);
  for (int i = 0; i < 3; ++i) {
    auto g = t.release("gpu0", holder);
    REQUIRE(g.size() == 1);
    holder = g[0].key;
    order.push_back(holder);
    CHECK(t.holders("gpu0").size() == 1);
  }
  CHECK(order == std::vector<LeaseKey>{key(2, 1), key(3, 1), key(1, 2)});
  CHECK(t.release("gpu0", holder).empty());
  CHECK(t.holders("gpu0").empty());
}

TEST_CASE("lease table: devices are independent") {
  LeaseTable t(Policy::kFifo, {});
  CHECK(grants(t.acquire("gpu0", key(1, 1), 0), key(1, 1)));
  CHECK(grants(t.acquire("gpu1", key(2, 1), 0), key(2, 1)));
}

TEST_CASE(
    "lease table: crossover serves the job whose round began first on "
    "every device") {
  // gpu0 and gpu1 are busy (job 3). Job 1's round begins first (its worker asks
  // for gpu0), then job 2's worker asks for gpu1, then each asks for the other
  // device.
  for (Policy policy : {Policy::kFifo, Policy::kCrossover}) {
    CAPTURE(policyName(policy));
    LeaseTable t(policy, {});
    (void)t.acquire("gpu0", key(3, 1), 0);
    (void)t.acquire("gpu1", key(3, 2), 0);
    CHECK(t.acquire("gpu0", key(1, 1), 7).empty());
    CHECK(t.acquire("gpu1", key(2, 2), 4).empty());
    CHECK(t.acquire("gpu1", key(1, 2), 7).empty());
    CHECK(t.acquire("gpu0", key(2, 1), 4).empty());
    auto g0 = t.release("gpu0", key(3, 1));
    auto g1 = t.release("gpu1", key(3, 2));
    REQUIRE(g0.size() == 1);
    REQUIRE(g1.size() == 1);
    if (policy == Policy::kCrossover) {
      // Job 1 computes on both devices while job 2 waits; then job 2 on both.
      CHECK(g0[0].key == key(1, 1));
      CHECK(g1[0].key == key(1, 2));
      CHECK(t.release("gpu0", key(1, 1))[0].key == key(2, 1));
      CHECK(t.release("gpu1", key(1, 2))[0].key == key(2, 2));
    } else {
      // fifo splits the jobs: each job waits on one device for the other.
      CHECK(g0[0].key == key(1, 1));
      CHECK(g1[0].key == key(2, 2));
    }
  }
}

TEST_CASE(
    "lease table: crossover hands a free device to the job that is ready "
    "at once") {
  LeaseTable t(Policy::kCrossover, {});
  // Job 2 holds gpu0 while job 1 is communicating: nothing waits, so job 1's
  // next request for the free gpu1 is granted at once, and job 2 then gets gpu1
  // after job 1.
  CHECK(grants(t.acquire("gpu0", key(2, 1), 3), key(2, 1)));
  CHECK(grants(t.acquire("gpu1", key(1, 2), 9), key(1, 2)));
  CHECK(t.acquire("gpu1", key(2, 2), 3).empty());
  CHECK(grants(t.release("gpu1", key(1, 2)), key(2, 2)));
}

TEST_CASE(
    "lease table: no job waits more than one step of a greedy job (no "
    "starvation)") {
  for (Policy policy : {Policy::kFifo, Policy::kCrossover}) {
    CAPTURE(policyName(policy));
    // The device finishes the greedy job's current round (its workers on this
    // device), then serves the other job: never a second round of the greedy
    // job first.
    for (int greedy_workers : {1, 2, 3}) {
      CAPTURE(greedy_workers);
      const auto waits = greedyWaits(policy, 50, greedy_workers);
      REQUIRE(waits.size() == 50);
      CHECK(*std::max_element(waits.begin(), waits.end()) <= greedy_workers - 1);
    }
  }
}

TEST_CASE("lease table: crossover weights share a busy device in proportion") {
  // Two workers of each job on one device, each asking again as soon as it is
  // done, so both jobs always have a request waiting: job 1 (weight 2) gets two
  // rounds for one. (With one worker per job and device, the job that just
  // released is never waiting at that moment: the jobs alternate whatever the
  // weights, which is the crossover itself.)
  AlwaysReady jobs(JobWeights{{1, 2.0}});
  jobs.ask({key(1, 1), key(2, 1), key(1, 2), key(2, 2)});
  auto got = jobs.share(120);
  CAPTURE(got[1]);
  CAPTURE(got[2]);
  CHECK(got[1] >= 78);
  CHECK(got[1] <= 82);
  CHECK(got[1] + got[2] == 120);
}

TEST_CASE("lease table: equal weights alternate two always-ready jobs") {
  AlwaysReady ready(JobWeights{});
  ready.ask({key(1, 1), key(2, 1)});
  const auto jobs = ready.run(10);
  CHECK(jobs == std::vector<std::uint64_t>{1, 2, 1, 2, 1, 2, 1, 2, 1, 2});
}

TEST_CASE("lease table: a forgotten holder (expired lease) passes the device on") {
  LeaseTable t(Policy::kCrossover, {});
  (void)t.acquire("d", key(1, 1), 0);
  CHECK(t.acquire("d", key(2, 1), 0).empty());
  CHECK(grants(t.forget("d", key(1, 1)), key(2, 1)));
  bool stray = false;
  CHECK(t.release("d", key(1, 1), &stray).empty());  // its late release changes nothing
  CHECK(stray);
  CHECK(t.holders("d") == std::vector<LeaseKey>{key(2, 1)});
}

TEST_CASE("lease table: asking again replaces the old request or lease") {
  LeaseTable t(Policy::kFifo, {});
  (void)t.acquire("d", key(1, 1), 0);
  CHECK(t.acquire("d", key(2, 1), 0).empty());
  CHECK(t.acquire("d", key(2, 1), 1).empty());
  CHECK(t.waiting("d") == 1);
  // The holder asks again (it lost the grant): it queues behind job 2 instead
  // of holding.
  CHECK(grants(t.acquire("d", key(1, 1), 1), key(2, 1)));
  CHECK(t.waiting("d") == 1);
}

TEST_CASE(
    "lease table: policies and weights parse, bad text is refused with "
    "its reason") {
  CHECK(*parsePolicy("crossover") == Policy::kCrossover);
  CHECK(*parsePolicy("fifo") == Policy::kFifo);
  CHECK(*parsePolicy("none") == Policy::kNone);
  CHECK(parsePolicy("round-robin").status().message().find("none, fifo or crossover") !=
        std::string::npos);
  auto w = parseJobWeights("1=2,7=0.5");
  REQUIRE(w.isOk());
  CHECK(w->at(1) == 2.0);
  CHECK(w->at(7) == 0.5);
  CHECK(parseJobWeights("")->empty());
  for (const char* bad : {"1", "1=0", "1=-2", "x=1", "1=2x", "=3", "1=nan"}) {
    CAPTURE(bad);
    CHECK_FALSE(parseJobWeights(bad).isOk());
  }
}

TEST_CASE("lease table: a weight set later applies to the job's next rounds") {
  // As the crossover weights test, with job 1's weight 2 arriving after the table is made
  // (a submitted job's arbiter_weight).
  AlwaysReady jobs(JobWeights{});
  jobs.table.setWeight(1, 2.0);
  jobs.ask({key(1, 1), key(2, 1), key(1, 2), key(2, 2)});
  auto got = jobs.share(120);
  CAPTURE(got[1]);
  CHECK(got[1] >= 78);
  CHECK(got[1] <= 82);
}

TEST_CASE("lease table: with handoff one waiter is granted ahead of the holder's release") {
  LeaseTable t(Policy::kCrossover, {});
  auto first = t.acquire("d", key(1, 1), 0, true);
  REQUIRE(first.size() == 1);
  CHECK(first[0].locked);  // it computes under the device's lock
  auto ahead = t.acquire("d", key(2, 1), 0, true);
  REQUIRE(grants(ahead, key(2, 1)));  // granted while job 1 still holds the device
  CHECK(ahead[0].locked);
  CHECK(t.holders("d").size() == 2);
  CHECK(t.acquire("d", key(3, 1), 0, true).empty());    // one ahead at most
  CHECK(grants(t.release("d", key(1, 1)), key(3, 1)));  // job 2 computes, job 3 is next
  CHECK(t.holders("d").front() == key(2, 1));

  // Never ahead for a waiter that does not take the lock, nor behind a holder without it.
  LeaseTable fifo(Policy::kFifo, {});
  (void)fifo.acquire("d", key(1, 1), 0, true);
  CHECK(fifo.acquire("d", key(2, 1), 0, false).empty());
  LeaseTable plain(Policy::kFifo, {});
  CHECK(!plain.acquire("d", key(1, 1), 0, false).at(0).locked);
  CHECK(plain.acquire("d", key(2, 1), 0, true).empty());
  // Policy none grants everyone at once: nobody takes the lock.
  LeaseTable none(Policy::kNone, {});
  CHECK(!none.acquire("d", key(1, 1), 0, true).at(0).locked);
  CHECK(!none.acquire("d", key(2, 1), 0, true).at(0).locked);
}
