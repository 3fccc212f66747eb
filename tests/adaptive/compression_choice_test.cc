#include "groupsgd/adaptive/policy/compression_choice.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <map>

using namespace groupsgd::adaptive::policy;
using Phase = GroupCompressionState::Phase;

namespace {

// A step of a 100k-parameter model, dense push + dense reply: 800 kB; fp16 push: 600 kB.
constexpr double kDense = 800e3, kFp16 = 600e3;
const CompressionTuning kTuning{.threshold_mbit = 1000, .min_steps = 10, .trial_steps = 20};

// Members whose running totals the test advances step by step.
struct Group {
  std::map<std::uint64_t, LinkSample> members;
  void add(std::uint64_t id) { members[id] = LinkSample{.worker = id}; }
  // Every member makes `steps` steps, each round trip taking comm_ms(id).
  template <typename F>
  void run(std::uint64_t steps, double bytes, F comm_ms) {
    for (auto& [id, m] : members) {
      m.steps += steps;
      m.total_comm_ms += static_cast<double>(steps) * comm_ms(id);
      m.bytes_per_step = bytes;
    }
  }
  std::vector<LinkSample> samples() const {
    std::vector<LinkSample> out;
    for (const auto& [id, m] : members) out.push_back(m);
    return out;
  }
};

// The round trip that moves `bytes` at `mbit` Mbit/s.
double at(double mbit, double bytes) { return bytes * 8 / (mbit * 1000); }

}  // namespace

TEST_CASE("linkMbit is bytes x 8 over the round trip, nothing without one") {
  CHECK(*linkMbit(800e3, 32) == doctest::Approx(200));
  CHECK_FALSE(linkMbit(800e3, 0));
  CHECK_FALSE(linkMbit(0, 5));
}

TEST_CASE("a fast group stays dense; warm-up steps and short windows decide nothing") {
  GroupCompressionState s;
  Group g;
  g.add(1);
  g.add(2);
  // The first steps (connections, the first pull) are slow and not a measurement.
  g.run(9, kDense, [](auto) { return 500.0; });
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  g.run(1, kDense, [](auto) { return 1.0; });
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));  // windows start here
  g.run(19, kDense, [](auto) { return 1.0; });
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));  // one step short
  CHECK(s.slowest_mbit == 0);
  g.run(1, kDense, [](auto id) { return id == 1 ? at(5000, kDense) : at(3000, kDense); });
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.phase == Phase::kDense);
  CHECK(s.slowest_mbit > 1000);
  CHECK_FALSE(stepCompression(s, {}, kTuning));
}

TEST_CASE("a bandwidth-bound slow link: fp16 tried, then kept when the round trip shrinks") {
  GroupCompressionState s;
  Group g;
  g.add(1);
  g.add(2);
  g.run(10, kDense, [](auto) { return 5.0; });
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  // Worker 2 is on a 200 Mbit/s link; the window's means decide, not one heartbeat.
  const auto link = [](double bytes) {
    return [bytes](std::uint64_t id) { return id == 2 ? at(200, bytes) : at(5000, bytes); };
  };
  g.run(20, kDense, link(kDense));
  auto why = stepCompression(s, g.samples(), kTuning);
  REQUIRE(why);
  CHECK(s.phase == Phase::kTrial);
  CHECK(s.fp16());
  CHECK(s.slowest_worker == 2);
  CHECK(s.slowest_mbit == doctest::Approx(200));
  CHECK(s.dense_comm_ms == doctest::Approx(32));
  // Bandwidth-bound: 6 bytes per parameter instead of 8 take 3/4 of the time.
  g.run(19, kFp16, link(kFp16));
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  g.run(1, kFp16, link(kFp16));
  REQUIRE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.phase == Phase::kFp16);
  CHECK(s.trial_comm_ms == doctest::Approx(24));
  // Kept just above the threshold (hysteresis), dropped well above it.
  g.run(20, kFp16, [](auto) { return at(1100, kFp16); });
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.phase == Phase::kFp16);
  g.run(20, kFp16, [](auto) { return at(1300, kFp16); });
  REQUIRE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.phase == Phase::kDense);
}

TEST_CASE("a latency-bound slow link: fp16 tried, then dense for good") {
  GroupCompressionState s;
  Group g;
  g.add(1);
  g.run(10, kDense, [](auto) { return 40.0; });
  (void)stepCompression(s, g.samples(), kTuning);
  // 40 ms per exchange whatever the bytes (loopback with a fixed delay): looks slow.
  g.run(20, kDense, [](auto) { return 40.0; });
  REQUIRE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.phase == Phase::kTrial);
  g.run(20, kFp16, [](auto) { return 39.0; });  // 2.5% less: noise, not the bytes
  auto why = stepCompression(s, g.samples(), kTuning);
  REQUIRE(why);
  CHECK(why->find("latency-bound") != std::string::npos);
  CHECK(s.phase == Phase::kLatencyBound);
  CHECK_FALSE(s.fp16());
  g.run(40, kDense, [](auto) { return 400.0; });  // not tried again, however slow
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.phase == Phase::kLatencyBound);
}

TEST_CASE("a member that joins or registers again starts a new window") {
  GroupCompressionState s;
  Group g;
  g.add(1);
  g.run(30, kDense, [](auto) { return 1.0; });
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  g.run(20, kDense, [](auto) { return 1.0; });
  g.add(2);  // no steps yet: left out until its 10th step, then its window starts
  g.members[2].steps = 10;
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));  // 2's window only begins
  g.run(20, kDense, [](auto id) { return id == 2 ? at(100, kDense) : 1.0; });
  REQUIRE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.slowest_worker == 2);
  CHECK(s.phase == Phase::kTrial);
  // Worker 2 registers again: its totals start over, below its window's start, so its
  // window restarts there instead of reading a negative step count.
  g.members[2] = LinkSample{.worker = 2, .steps = 12, .total_comm_ms = 5, .bytes_per_step = kFp16};
  CHECK_FALSE(stepCompression(s, g.samples(), kTuning));
  g.run(20, kFp16, [](auto) { return 1.0; });
  REQUIRE(stepCompression(s, g.samples(), kTuning));
  CHECK(s.phase == Phase::kFp16);
  CHECK(s.trial_comm_ms == doctest::Approx(1.0));
}
