// The group PS's backup-worker cutoff with real members on loopback: a member that pauses
// costs the others a fraction of a step, not its pause; its gradient is dropped and
// counted; it is answered with the group at the next close and goes on in step.
#include <atomic>
#include <thread>

#include "cluster_fixture.h"

using namespace groupsgd;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

groupps::GroupServerConfig groupConfig() {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kSgd, 0.01f, 0.0f, 0.0f};
  return g;
}

struct Push {
  std::uint64_t step = 0;  // the step pushed for
  bool ok = false;
  bool accepted = false;
  std::string reason;
  std::uint64_t next_step = 0;  // the step the answer hands over
  Clock::time_point sent, answered;
};

// Member `id` pulls, then pushes with 3 ms of "compute" before each push; member `pauser`
// sleeps `pause` more before its push number `pause_at` (from 0), and after `steps` pushes
// sets the group step everybody stops at (two steps on, so all stop at the same close).
std::vector<Push> runMember(testing::MiniCluster& cluster, std::uint64_t id, int steps,
                            std::uint64_t pauser, int pause_at, std::chrono::milliseconds pause,
                            std::atomic<std::uint64_t>& stop_at) {
  std::vector<Push> log;
  std::vector<float> params(cluster.params);
  client::GroupClient client(cluster.ctx, cluster.assignment(id, 1), 1, 15000ms);
  auto pulled = testbed::pullWhenReady(client, params, 5000ms);
  if (!pulled) return log;
  std::uint64_t step = pulled->step;
  std::vector<float> grad(cluster.params, 0.001f);
  for (int i = 0; step < stop_at.load(); ++i) {
    if (id == pauser && i == steps) stop_at = step + 2;
    std::this_thread::sleep_for(3ms);  // each step's compute, emulated
    if (id == pauser && i == pause_at) std::this_thread::sleep_for(pause);  // the slow peer
    Push p;
    p.step = step;
    p.sent = Clock::now();
    auto a = client.push(step, grad, 4, 1.0f, 3.0f, params);
    p.answered = Clock::now();
    p.ok = a.isOk();
    if (a) {
      p.accepted = a->accepted;
      p.reason = a->reason;
      p.next_step = a->step;
      step = a->step;
    }
    log.push_back(p);
    if (!a) break;
  }
  return log;
}

struct Outcome {
  std::vector<std::vector<Push>> logs;  // per member 1..4
  std::uint64_t steps_cut = 0, late = 0, received = 0, dropped = 0;
  std::uint64_t pushed = 0;  // samples the members pushed (4 per push)
};

Outcome run(float cutoff, std::chrono::milliseconds pause) {
  testing::MiniCluster cluster(testing::smallModel(), groupConfig());
  testbed::GroupSettings s;
  s.step_cutoff = cutoff;
  s.step_cutoff_late_fraction = 0.25f;  // one of four may be left behind
  REQUIRE(cluster.InProcessCluster::configure(testbed::numberedMembers(4, 4), s).isOk());
  Outcome out;
  out.logs.resize(4);
  std::vector<std::thread> threads;
  std::atomic<std::uint64_t> stop_at{~0ull};
  for (std::uint64_t id = 1; id <= 4; ++id) {
    threads.emplace_back(
        [&, id] { out.logs[id - 1] = runMember(cluster, id, 60, 4, 20, pause, stop_at); });
  }
  for (auto& t : threads) t.join();
  auto stats = cluster.flush();
  auto g = stats.header().getBody().getGroupStats();
  out.steps_cut = g.getStepsCut();
  out.late = g.getLateGradients();
  out.received = g.getSamplesReceived();
  out.dropped = g.getSamplesDropped();
  for (const auto& log : out.logs) out.pushed += 4 * log.size();
  return out;
}

// Pushes of a member answered while [from, to] lasted.
int answeredWithin(const std::vector<Push>& log, Clock::time_point from, Clock::time_point to) {
  int n = 0;
  for (const auto& p : log) n += p.answered > from && p.answered < to;
  return n;
}

}  // namespace

TEST_CASE(
    "group PS cutoff: a paused member does not hold the group; it is answered late and rejoins") {
  const Outcome o = run(1.5f, 1500ms);
  REQUIRE(o.logs[3].size() >= 60);
  for (const auto& log : o.logs) {
    REQUIRE(log.size() >= 40);
    for (const auto& p : log) REQUIRE(p.ok);
  }
  const auto& paused = o.logs[3];
  const Push& late = paused[20];
  CHECK_FALSE(late.accepted);
  CHECK(late.reason.find("late") != std::string::npos);
  // Answered with the group: the step it hands over is one the others push for next.
  bool in_step = false;
  for (const auto& p : o.logs[0]) in_step = in_step || p.step == late.next_step;
  CHECK(in_step);
  // While it slept the others went on: with 3 ms steps, far more than the 1 they could
  // finish if every step waited for it (the fixed deadline is 5 s).
  const Clock::time_point pause_from = paused[19].answered, pause_to = late.sent;
  CHECK(pause_to - pause_from >= 1400ms);
  CHECK(answeredWithin(o.logs[0], pause_from + 100ms, pause_to) >= 10);
  // It rejoined: most of its pushes after the late one were taken into their steps.
  int accepted_after = 0;
  for (std::size_t i = 21; i < paused.size(); ++i) accepted_after += paused[i].accepted;
  CHECK(accepted_after >= 30);
  CHECK(o.steps_cut >= 1);
  CHECK(o.late >= 1);
  // Every pushed sample is either in a step or counted dropped.
  CHECK(o.received + o.dropped == o.pushed);
}

TEST_CASE("group PS cutoff off: the same pause holds every member (the synchronous baseline)") {
  const Outcome o = run(0.0f, 1000ms);
  for (const auto& log : o.logs) REQUIRE(log.size() >= 40);
  const auto& paused = o.logs[3];
  CHECK(paused[20].accepted);  // nobody was left behind
  const Clock::time_point pause_from = paused[19].answered, pause_to = paused[20].sent;
  CHECK(answeredWithin(o.logs[0], pause_from + 100ms, pause_to) <= 1);
  CHECK(o.steps_cut == 0);
  CHECK(o.late == 0);
  CHECK(o.received == o.pushed);
}
