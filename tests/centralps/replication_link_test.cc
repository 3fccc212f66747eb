// The primary's end of the standby link over loopback, with a scripted standby (a DEALER on
// a thread): a synchronous update commits only once acknowledged; without a standby
// nothing commits (standby_alone_ms 0) until the alone bound passes; a standby that stops
// acknowledging is lost within the bound; a Superseded notice calls on_superseded.
#include "groupsgd/centralps/replication_link.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <span>
#include <thread>

#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/transport.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using namespace std::chrono_literals;

namespace {

ReplicationMessage snapshotAt(std::uint64_t version) {
  ReplicationMessage m;
  m.kind = ReplicationKind::kSnapshot;
  m.version = version;
  m.param_count = 4;
  m.tensor = {1, 2, 3, 4};
  return m;
}

ReplicationMessage updateTo(std::uint64_t version) {
  ReplicationMessage m;
  m.kind = ReplicationKind::kUpdate;
  m.version = version;
  m.param_count = 4;
  m.tensor = {0.5f, 0.5f, 0.5f, 0.5f};
  m.weight = 1;
  return m;
}

zmq::socket_t dealer(zmq::context_t& ctx) {
  auto s = makeSocket(ctx, zmq::socket_type::dealer);
  REQUIRE(s);
  return std::move(*s);
}

// A standby that says hello, then acknowledges what it receives while `acking` holds.
struct ScriptedStandby {
  zmq::socket_t sock;
  std::atomic<bool> acking{true}, stop{false};
  std::atomic<std::uint64_t> updates{0}, snapshots{0}, refused{0}, states{0};
  std::mutex mu;
  std::string last_state;  // the newest coordinator state's text (guarded by mu)
  std::thread thread;

  ScriptedStandby(zmq::context_t& ctx, const std::string& ep) : sock(dealer(ctx)) {
    REQUIRE(connectSocket(sock, ep));
    ReplicationMessage hello;
    hello.kind = ReplicationKind::kHello;
    REQUIRE(sendFrames(sock, encodeReplication(hello)));
    thread = std::thread([this] {
      while (!stop.load()) {
        zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, 10ms);
        if ((item.revents & ZMQ_POLLIN) == 0) continue;
        auto frames = recvFrames(sock);
        if (!frames) continue;
        auto m = decodeReplication(*frames);
        if (!m) continue;
        if (m->kind == ReplicationKind::kUpdate) ++updates;
        if (m->kind == ReplicationKind::kSnapshot) ++snapshots;
        if (m->kind == ReplicationKind::kRefused) {
          ++refused;
          continue;
        }
        if (m->kind == ReplicationKind::kCoordinatorState) {  // not acknowledged
          std::lock_guard<std::mutex> lock(mu);
          last_state = m->text;
          ++states;
          continue;
        }
        if (!acking.load()) continue;
        ReplicationMessage ack;
        ack.kind = ReplicationKind::kAck;
        ack.version = m->version;
        (void)sendFrames(sock, encodeReplication(ack));
      }
    });
  }
  ~ScriptedStandby() {
    stop.store(true);
    thread.join();
  }
};

std::unique_ptr<ReplicationLink> makeLink(zmq::context_t& ctx, std::uint32_t loss_ms,
                                          std::uint32_t alone_ms,
                                          std::function<void(const std::string&)> superseded = {},
                                          bool sync = true, bool alone_until_attached = false,
                                          std::shared_ptr<const LatestText> state = nullptr) {
  ReplicationConfig cfg;
  cfg.coordinator_state = std::move(state);
  cfg.sync = sync;
  cfg.alone_until_attached = alone_until_attached;
  cfg.listen = "tcp://127.0.0.1:*";
  cfg.loss_ms = loss_ms;
  cfg.alone_ms = alone_ms;
  cfg.on_superseded = std::move(superseded);
  auto link = ReplicationLink::create(ctx, cfg, {});
  REQUIRE(link);
  (*link)->setTerm(5);
  return std::move(*link);
}

// Polls the link until the standby has its snapshot.
void attach(ReplicationLink& link, ScriptedStandby& standby, std::uint64_t version) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (standby.snapshots.load() == 0 && std::chrono::steady_clock::now() < until) {
    link.poll(version, [version] { return snapshotAt(version); });
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(standby.snapshots.load() == 1);
}

}  // namespace

TEST_CASE("replication link: no standby, nothing commits; an acknowledged update commits") {
  zmq::context_t ctx;
  auto link = makeLink(ctx, 300, 0);
  const auto snap = [] { return snapshotAt(7); };
  auto refused = link->replicate(updateTo(8), snap);
  REQUIRE_FALSE(refused);
  CHECK(refused.message().find("no standby attached") != std::string::npos);

  ScriptedStandby standby(ctx, link->endpoint());
  attach(*link, standby, 7);
  CHECK(link->replicate(updateTo(8), snap));
  CHECK(standby.updates.load() == 1);
  CHECK(link->json()["acked_version"] == 8);
  CHECK(link->json()["attached"] == true);
}

TEST_CASE(
    "replication link: another process's hello is refused while the attached standby is alive; "
    "once it is lost, a new standby attaches") {
  zmq::context_t ctx;
  auto link = makeLink(ctx, 300, 0);
  const auto snap = [] { return snapshotAt(1); };
  ScriptedStandby first(ctx, link->endpoint());
  attach(*link, first, 1);
  ScriptedStandby second(ctx, link->endpoint());  // a second standby, or one of another kind
  auto until = std::chrono::steady_clock::now() + 5s;
  while (second.refused.load() == 0 && std::chrono::steady_clock::now() < until) {
    link->poll(1, snap);
    std::this_thread::sleep_for(5ms);
  }
  CHECK(second.refused.load() == 1);
  CHECK(second.snapshots.load() == 0);
  CHECK(link->hellosRefused() == 1);
  // The first stays attached: an update commits with its acknowledgement alone.
  CHECK(link->replicate(updateTo(2), snap));
  CHECK(first.updates.load() == 1);
  CHECK(second.updates.load() == 0);
  CHECK(link->json()["attached"] == true);
  // The first falls silent: lost at the bound; then a new standby's hello attaches it.
  first.acking.store(false);
  until = std::chrono::steady_clock::now() + 5s;
  while (link->json()["attached"] == true && std::chrono::steady_clock::now() < until) {
    link->poll(2, [] { return snapshotAt(2); });
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(link->json()["attached"] == false);
  ScriptedStandby third(ctx, link->endpoint());
  attach(*link, third, 2);
  CHECK(link->replicate(updateTo(3), [] { return snapshotAt(2); }));
  CHECK(third.updates.load() == 1);
}

TEST_CASE("replication link: a standby that stops acknowledging is lost within the bound") {
  zmq::context_t ctx;
  auto link = makeLink(ctx, 200, 0);
  ScriptedStandby standby(ctx, link->endpoint());
  attach(*link, standby, 1);
  standby.acking.store(false);
  const auto started = std::chrono::steady_clock::now();
  auto s = link->replicate(updateTo(2), [] { return snapshotAt(1); });
  const auto waited = std::chrono::steady_clock::now() - started;
  REQUIRE_FALSE(s);
  CHECK(s.message().find("did not acknowledge version 2") != std::string::npos);
  CHECK(waited >= 200ms);
  CHECK(waited < 2s);
  CHECK(link->json()["attached"] == false);
  CHECK(link->json()["standby_losses"] == 1);
  // Lost: the next update is refused at once, not after another wait.
  CHECK_FALSE(link->replicate(updateTo(2), [] { return snapshotAt(1); }));
}

TEST_CASE(
    "replication link: ship then awaitAck: the update goes out at once, the wait comes later "
    "and its bound counts from the shipping") {
  zmq::context_t ctx;
  auto link = makeLink(ctx, 200, 0);
  const auto snap = [] { return snapshotAt(1); };
  const std::vector<float> delta = {0.25f, 0.5f, 0.75f, 1.0f};
  TensorView view;
  view.size = delta.size();
  view.parts = {std::span<const float>(delta)};
  ReplicationMessage header = updateTo(2);
  header.tensor.clear();
  // No standby: refused at the shipping, nothing awaited.
  CHECK_FALSE(link->ship(header, &view, snap));
  CHECK_FALSE(link->awaiting());

  ScriptedStandby standby(ctx, link->endpoint());
  attach(*link, standby, 1);
  REQUIRE(link->ship(header, &view, snap));
  CHECK(link->awaiting());
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (standby.updates.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);  // it arrives while the primary would merge it
  }
  CHECK(standby.updates.load() == 1);
  CHECK(link->awaitAck(snap));
  CHECK_FALSE(link->awaiting());
  CHECK(link->json()["acked_version"] == 2);

  // No acknowledgement: lost at 200 ms after the shipping, however long the caller took.
  standby.acking.store(false);
  header.version = 3;
  const auto shipped = std::chrono::steady_clock::now();
  REQUIRE(link->ship(header, &view, snap));
  std::this_thread::sleep_for(150ms);
  const auto waiting = std::chrono::steady_clock::now();
  auto s = link->awaitAck(snap);
  const auto now = std::chrono::steady_clock::now();
  REQUIRE_FALSE(s);
  CHECK(s.message().find("did not acknowledge version 3") != std::string::npos);
  CHECK(now - shipped >= 200ms);
  CHECK(now - waiting < 200ms);
  CHECK(link->json()["attached"] == false);
}

TEST_CASE("replication link: with standby_alone_ms the head commits alone after the bound") {
  zmq::context_t ctx;
  auto link = makeLink(ctx, 100, 150);
  CHECK_FALSE(link->replicate(updateTo(1), [] { return snapshotAt(0); }));
  std::this_thread::sleep_for(200ms);
  CHECK(link->replicate(updateTo(1), [] { return snapshotAt(0); }));
  CHECK(link->json()["alone"] == true);
}

TEST_CASE(
    "replication link: a promoted head commits alone until its first standby attaches, then "
    "only with it (standby_alone_ms 0)") {
  zmq::context_t ctx;
  auto link = makeLink(ctx, 100, 0, {}, /*sync=*/true, /*alone_until_attached=*/true);
  CHECK(link->json()["alone"] == true);
  CHECK(link->replicate(updateTo(1), [] { return snapshotAt(0); }));  // alone: committed
  {
    ScriptedStandby standby(ctx, link->endpoint());
    attach(*link, standby, 1);
    CHECK(link->json()["alone"] == false);
    CHECK(link->replicate(updateTo(2), [] { return snapshotAt(1); }));
    CHECK(standby.updates.load() == 1);
    standby.acking.store(false);
    CHECK_FALSE(link->replicate(updateTo(3), [] { return snapshotAt(2); }));  // lost
  }
  // Lost after it attached: nothing commits alone any more, however long it waits.
  std::this_thread::sleep_for(200ms);
  auto refused = link->replicate(updateTo(3), [] { return snapshotAt(2); });
  REQUIRE_FALSE(refused);
  CHECK(refused.message().find("no standby attached") != std::string::npos);
  CHECK(link->json()["alone"] == false);
}

TEST_CASE("replication link: a Superseded notice calls on_superseded") {
  zmq::context_t ctx;
  std::string why;
  auto link = makeLink(ctx, 300, 0, [&](const std::string& w) { why = w; });
  auto fence = makeSocket(ctx, zmq::socket_type::dealer);
  REQUIRE(fence);
  REQUIRE(connectSocket(*fence, link->endpoint()));
  ReplicationMessage m;
  m.kind = ReplicationKind::kSuperseded;
  m.term = 6;
  m.text = "the head at tcp://x took over";
  REQUIRE(sendFrames(*fence, encodeReplication(m)));
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (why.empty() && std::chrono::steady_clock::now() < until) {
    link->poll(0, [] { return snapshotAt(0); });
    std::this_thread::sleep_for(5ms);
  }
  CHECK(why == "the head at tcp://x took over");
}

TEST_CASE("replication link: asynchronous updates commit without waiting; the lag is reported") {
  zmq::context_t ctx;
  auto link = makeLink(ctx, 2000, 0, {}, /*sync=*/false);
  ScriptedStandby standby(ctx, link->endpoint());
  attach(*link, standby, 0);
  standby.acking.store(false);  // a standby that never answers costs the primary nothing
  const auto started = std::chrono::steady_clock::now();
  for (std::uint64_t v = 1; v <= 5; ++v) {
    REQUIRE(link->replicate(updateTo(v), [v] { return snapshotAt(v - 1); }));
  }
  CHECK(std::chrono::steady_clock::now() - started < 1s);
  CHECK(link->json()["max_lag_versions"] == 5);
  CHECK(link->json()["sync"] == false);
}

TEST_CASE(
    "replication link: the coordinator state goes to the standby after its snapshot, then "
    "only when newer, the newest of several") {
  zmq::context_t ctx;
  auto state = std::make_shared<LatestText>();
  auto link = makeLink(ctx, 200, 0, {}, /*sync=*/true, /*alone_until_attached=*/false, state);
  state->publish("s1");
  ScriptedStandby standby(ctx, link->endpoint());
  attach(*link, standby, 3);
  const auto pollUntil = [&](std::uint64_t states) {
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (standby.states.load() < states && std::chrono::steady_clock::now() < until) {
      link->poll(3, [] { return snapshotAt(3); });
      std::this_thread::sleep_for(5ms);
    }
  };
  pollUntil(1);
  REQUIRE(standby.states.load() == 1);
  {
    std::lock_guard<std::mutex> lock(standby.mu);
    CHECK(standby.last_state == "s1");
  }
  // Two changes between sends: only the newer goes out; nothing more while none is new.
  state->publish("s2");
  state->publish("s3");
  pollUntil(2);
  for (int i = 0; i < 30; ++i) {
    link->poll(3, [] { return snapshotAt(3); });
    std::this_thread::sleep_for(5ms);
  }
  CHECK(standby.states.load() == 2);
  {
    std::lock_guard<std::mutex> lock(standby.mu);
    CHECK(standby.last_state == "s3");
  }
  CHECK(link->json()["coordinator_states_sent"] == 2);
  // A standby starting over (the first one lost, a new hello) gets the current state again
  // after its snapshot.
  standby.acking.store(false);
  auto lost_by = std::chrono::steady_clock::now() + 5s;
  while (link->json()["attached"] == true && std::chrono::steady_clock::now() < lost_by) {
    link->poll(3, [] { return snapshotAt(3); });
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(link->json()["attached"] == false);
  ScriptedStandby second(ctx, link->endpoint());
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (second.states.load() == 0 && std::chrono::steady_clock::now() < until) {
    link->poll(3, [] { return snapshotAt(3); });
    std::this_thread::sleep_for(5ms);
  }
  CHECK(second.snapshots.load() == 1);
  REQUIRE(second.states.load() == 1);
  std::lock_guard<std::mutex> lock(second.mu);
  CHECK(second.last_state == "s3");
}
