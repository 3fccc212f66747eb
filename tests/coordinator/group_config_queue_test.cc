// The coordinator's group configurations off its loop: requests for one group coalesce
// into at most one call on its way, waiters hear the outcome of a configuration built
// after they asked, a regroup's order holds, and a dead PS costs a timeout, not a hang.
// Real ZeroMQ sockets: each "group PS" is a ROUTER on loopback answering like one.
#include "groupsgd/coordinator/group_config_queue.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "groupsgd/client/client.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/coordinator/coordinator.h"
#include "support/fake_server.h"

using namespace groupsgd;
using namespace std::chrono;
using coordinator::GroupConfigQueue;

namespace {

// Answers each GroupConfig with an Ack `delay` late (never, if !answer) and records what
// it was sent; anything else gets an error at once.
class FakeGroupPs {
 public:
  struct Seen {
    std::uint32_t members;
    bool flush;
    steady_clock::time_point at;
  };
  FakeGroupPs(zmq::context_t& ctx, milliseconds delay, bool answer = true)
      : delay_(delay),
        answer_(answer),
        server_(ctx, [this](const InMessage& msg) { return reply(msg); }) {}
  const std::string& endpoint() const { return server_.endpoint(); }
  std::vector<Seen> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  // When the first configuration was received plus the delay: its answer's earliest time.
  steady_clock::time_point firstAnswer() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.empty() ? steady_clock::time_point{} : seen_.front().at + delay_;
  }

 private:
  testing::FakeServer::Reply reply(const InMessage& msg) {
    if (msg.kind() != BodyKind::GROUP_CONFIG) {  // flush, stats: not this test's subject
      return {makeErrorReply(1, 0, unavailable("a fake group PS"))};
    }
    auto gc = msg.header().getBody().getGroupConfig();
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back({gc.getMembers().size(), gc.getFlush(), steady_clock::now()});
    }
    if (!answer_) return {};
    OutMessage ack(1, 0);
    ack.header().getBody().setAck();
    return {std::move(ack), delay_};
  }

  milliseconds delay_;
  bool answer_;
  mutable std::mutex mu_;
  std::vector<Seen> seen_;
  testing::FakeServer server_;  // last: its thread stops before the rest goes
};

// A queue whose configurations list `members` workers (read when each is built) and go
// to eps[group].
struct Fixture {
  explicit Fixture(std::vector<std::string> eps, milliseconds timeout = milliseconds(2000))
      : endpoints(std::move(eps)),
        queue(
            ctx, MessageLimits{},
            [this](std::uint32_t group, bool flush) -> Result<OutMessage> {
              if (group >= endpoints.size()) return unavailable("no PS for this group");
              OutMessage out(1, 0);
              auto gc = out.header().getBody().initGroupConfig();
              gc.setGroupId(group);
              gc.setExchangePeriod(1);
              gc.setFlush(flush);
              auto list = gc.initMembers(members);
              for (unsigned i = 0; i < members; ++i) list[i].setWorkerId(i + 1);
              return out;
            },
            [this](std::uint32_t group) {
              return coordinator::CallTarget{endpoints[group], SocketOptions{}};
            },
            timeout) {}
  // pump() until idle, at most `limit`; true if it got there.
  bool settle(milliseconds limit = milliseconds(5000)) {
    queue.waitIdle(limit);
    return queue.idle();
  }
  zmq::context_t ctx{1};
  std::vector<std::string> endpoints;
  unsigned members = 1;
  GroupConfigQueue queue;
};

}  // namespace

TEST_CASE("group config queue: requests made while one is on its way coalesce into one more") {
  zmq::context_t ps_ctx(1);
  FakeGroupPs ps(ps_ctx, milliseconds(200));
  Fixture f({ps.endpoint()});
  std::vector<Status> outcomes;
  for (unsigned i = 1; i <= 5; ++i) {
    f.members = i;  // the registry changes between requests
    f.queue.request(0, /*flush=*/i == 3, [&](const Status& s) { outcomes.push_back(s); });
  }
  CHECK(outcomes.empty());  // callbacks only from pump()
  REQUIRE(f.settle());
  REQUIRE(outcomes.size() == 5);
  for (const auto& s : outcomes) CHECK(s.isOk());
  CHECK(f.queue.sent() == 2);
  const auto seen = ps.seen();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].members == 1);
  CHECK_FALSE(seen[0].flush);
  CHECK(seen[1].members == 5);  // built when sent: the newest state
  CHECK(seen[1].flush);         // a queued flush is kept
}

TEST_CASE("group config queue: a PS that never answers fails its waiters at the deadline") {
  zmq::context_t ps_ctx(1);
  FakeGroupPs ps(ps_ctx, milliseconds(0), /*answer=*/false);
  Fixture f({ps.endpoint()}, milliseconds(300));
  std::optional<Status> outcome;
  const auto t0 = steady_clock::now();
  f.queue.request(0, false, [&](const Status& s) { outcome = s; });
  f.queue.pump();
  CHECK_FALSE(outcome.has_value());  // pump() does not wait
  REQUIRE(f.settle());
  const auto took = steady_clock::now() - t0;
  REQUIRE(outcome.has_value());
  CHECK_FALSE(outcome->isOk());
  CHECK(outcome->message().find("group 0") != std::string::npos);
  CHECK(took >= milliseconds(300));
  CHECK(took < milliseconds(3000));
  CHECK(f.queue.failed() == 1);
}

TEST_CASE("group config queue: a configuration held `after` others goes out once they returned") {
  zmq::context_t ps_ctx(1);
  FakeGroupPs gaining(ps_ctx, milliseconds(300));
  FakeGroupPs losing(ps_ctx, milliseconds(0));
  Fixture f({gaining.endpoint(), losing.endpoint()});
  int done = 0;
  f.queue.request(0, true, [&](const Status& s) { done += s.isOk(); });
  f.queue.request(1, true, [&](const Status& s) { done += s.isOk(); }, {0});
  REQUIRE(f.settle());
  CHECK(done == 2);
  REQUIRE(losing.seen().size() == 1);
  CHECK(losing.seen()[0].at >= gaining.firstAnswer());
}

TEST_CASE("group config queue: two regroups in a row cannot make groups wait for each other") {
  zmq::context_t ps_ctx(1);
  FakeGroupPs a(ps_ctx, milliseconds(100));
  FakeGroupPs b(ps_ctx, milliseconds(100));
  Fixture f({a.endpoint(), b.endpoint()});
  f.queue.request(0);                  // on its way
  f.queue.request(0, false, {}, {1});  // queued behind it, after group 1
  f.queue.request(1, false, {}, {0});  // held while group 0's call is on its way
  CHECK(f.settle());
  CHECK(a.seen().size() == 2);
  CHECK(b.seen().size() == 1);
}

TEST_CASE("group config queue: cancel answers the waiters at once and frees the group") {
  zmq::context_t ps_ctx(1);
  FakeGroupPs dead(ps_ctx, milliseconds(0), /*answer=*/false);
  FakeGroupPs spare(ps_ctx, milliseconds(0));
  Fixture f({dead.endpoint()}, milliseconds(2000));
  std::optional<Status> first, second;
  f.queue.request(0, false, [&](const Status& s) { first = s; });
  f.queue.cancel(0, unavailable("group 0 failed (node lost)"));
  f.queue.pump();
  REQUIRE(first.has_value());
  CHECK(first->message().find("node lost") != std::string::npos);
  f.endpoints[0] = spare.endpoint();  // re-created elsewhere
  const auto t0 = steady_clock::now();
  f.queue.request(0, false, [&](const Status& s) { second = s; });
  REQUIRE(f.settle());
  REQUIRE(second.has_value());
  CHECK(second->isOk());
  CHECK(steady_clock::now() - t0 < milliseconds(1500));  // did not wait for the dead call
  CHECK(spare.seen().size() == 1);
}

TEST_CASE("group config queue: whenSettled, and a configuration that cannot be built") {
  zmq::context_t ps_ctx(1);
  FakeGroupPs ps(ps_ctx, milliseconds(150));
  Fixture f({ps.endpoint()});
  std::vector<std::string> order;
  f.queue.whenSettled(0,
                      [&](const Status& s) { order.push_back(s.isOk() ? "idle-ok" : "idle-bad"); });
  f.queue.pump();
  REQUIRE(order == std::vector<std::string>{"idle-ok"});
  f.queue.request(0, false, [&](const Status&) { order.push_back("configured"); });
  f.queue.whenSettled(0, [&](const Status& s) { order.push_back(s.isOk() ? "settled" : "bad"); });
  REQUIRE(f.settle());
  CHECK(order == std::vector<std::string>{"idle-ok", "configured", "settled"});

  std::optional<Status> unbuilt;
  f.queue.request(7, false, [&](const Status& s) { unbuilt = s; });
  REQUIRE(f.settle());
  REQUIRE(unbuilt.has_value());
  CHECK(unbuilt->code() == Code::kUnavailable);
  CHECK(f.queue.sent() == 1);
}

TEST_CASE("coordinator: a slow group PS delays only the registrations that need it") {
  // The group PS takes 1.5 s to take each configuration; liveness is judged in 200 ms.
  // Registrations are answered once the group expects the worker, and meanwhile the
  // loop answers an evaluator's heartbeats at once, so nobody is declared dead.
  constexpr auto kConfigTakes = milliseconds(1500);
  zmq::context_t ctx(1);
  FakeGroupPs group(ctx, kConfigTakes);
  FakeGroupPs central(ctx, milliseconds(0));  // answers the end-of-run queries with errors
  daemon::DaemonConfig cfg;
  cfg.role = "coordinator";
  cfg.mode = daemon::Mode::kSync;
  cfg.workers = 2;
  cfg.listen = "tcp://127.0.0.1:0";
  cfg.heartbeat_ms = 50;
  cfg.heartbeat_misses = 2;
  cfg.step_deadline_ms = 100;
  cfg.progress_ms = 0;
  coordinator::Topology topo;
  topo.central_endpoint = central.endpoint();
  topo.group_endpoints = {group.endpoint()};
  auto coordinator = coordinator::Coordinator::create(ctx, cfg, topo);
  REQUIRE(coordinator.isOk());
  std::atomic<bool> stop{false};
  auto summary = std::async(std::launch::async, [&] { return (*coordinator)->run(stop); });

  client::CoordinatorClient eval(ctx, (*coordinator)->endpoint(), cfg.job_id, milliseconds(3000));
  auto me = eval.registerAs(client::Role::kEvaluator, "eval");
  REQUIRE(me.isOk());
  std::atomic<bool> registering{true};
  std::atomic<int> failures{0}, during{0};
  std::atomic<long> slowest_ms{0};
  std::thread heartbeats([&] {
    while (registering) {
      const auto t0 = steady_clock::now();
      auto answer = eval.heartbeat(*me, {});
      const long ms = duration_cast<milliseconds>(steady_clock::now() - t0).count();
      slowest_ms = std::max(slowest_ms.load(), ms);
      if (!answer) ++failures;
      ++during;
      std::this_thread::sleep_for(milliseconds(30));  // a heartbeat period, not a wait
    }
  });

  // Two trainers at once: the second's configuration waits behind the first's.
  auto join = [&](const char* name) {
    client::CoordinatorClient c(ctx, (*coordinator)->endpoint(), cfg.job_id, milliseconds(10000));
    const auto t0 = steady_clock::now();
    auto a = c.registerAs(client::Role::kTrainer, name);
    const auto took = steady_clock::now() - t0;
    if (a.isOk()) (void)c.leave(*a, 0, 0);
    return std::make_pair(a.isOk(), took);
  };
  auto first = std::async(std::launch::async, join, "t1");
  auto second = std::async(std::launch::async, join, "t2");
  const auto [ok1, took1] = first.get();
  const auto [ok2, took2] = second.get();
  registering = false;
  heartbeats.join();
  (void)eval.leave(*me, 0, 0);
  CHECK(ok1);
  CHECK(ok2);
  CHECK(took1 >= kConfigTakes);  // answered once its group PS expected it
  CHECK(took2 >= kConfigTakes);
  CHECK(failures == 0);
  CHECK(during >= 20);              // heartbeats went on meanwhile...
  CHECK(slowest_ms.load() < 1000);  // ...none waited for the group PS
  CHECK(group.seen().size() <= 4);  // two joins and two leaves, some coalesced
  stop = true;
  const nlohmann::json s = summary.get();
  CHECK(s["stop_reason"] == "stop requested");
  CHECK(s.dump().find("declared dead") == std::string::npos);
}
