#include "groupsgd/arbiter/arbiter_server.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "groupsgd/arbiter/lease_client.h"
#include "groupsgd/common/transport.h"

using namespace groupsgd;
using namespace groupsgd::arbiter;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// An arbiter serving on its own thread, on a port the kernel chose.
struct RunningArbiter {
  explicit RunningArbiter(ArbiterConfig cfg) {
    cfg.listen = "tcp://127.0.0.1:*";
    auto made = ArbiterServer::create(ctx, cfg);
    REQUIRE(made.isOk());
    server = std::move(*made);
    thread = std::thread([this] { server->run(stop); });
  }
  ~RunningArbiter() { shutdown(); }
  void shutdown() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }
  zmq::context_t ctx{1};
  std::unique_ptr<ArbiterServer> server;
  std::atomic<bool> stop{false};
  std::thread thread;
};

ArbiterConfig config(Policy policy, std::uint32_t lease_timeout_ms = 10000) {
  ArbiterConfig c;
  c.policy = policy;
  c.lease_timeout_ms = lease_timeout_ms;
  c.keepalive_ms = 50;
  return c;
}

// Polls until pred() or the deadline.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds within = 5000ms) {
  const auto end = Clock::now() + within;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

// A call (an acquire that may wait) on its own thread: `done` once it returned `status`.
struct InBackground {
  std::atomic<bool> done{false};
  Status status;
  std::thread thread;
  explicit InBackground(std::function<Status()> call)
      : thread([this, call = std::move(call)] {
          status = call();
          done.store(true);
        }) {}
};

}  // namespace

TEST_CASE(
    "arbiter server: a second job waits for the device until the first "
    "releases it") {
  RunningArbiter a(config(Policy::kFifo));
  zmq::context_t ctx(1);
  LeaseClient job1(ctx, a.server->endpoint(), 1), job2(ctx, a.server->endpoint(), 2);
  REQUIRE(job1.acquire(1, "gpu0", 0).isOk());
  InBackground second([&] { return job2.acquire(1, "gpu0", 0); });
  // Several keepalive periods later job 2 must still be waiting (a fixed time on purpose).
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(second.done.load());
  REQUIRE(job1.release(1, "gpu0", 1.0).isOk());
  CHECK(eventually([&] { return second.done.load(); }));
  second.thread.join();
  CHECK(second.status.isOk());
  auto st = job1.stats(2000ms);
  REQUIRE(st.isOk());
  CHECK(st->policy == "fifo");
  CHECK(st->grants == 2);
  REQUIRE(st->jobs.size() == 2);
  CHECK(st->jobs[1].job_id == 2);
  CHECK(st->jobs[1].wait_ms > 0);
}

TEST_CASE("arbiter server: the snapshot shows each device's holder, queue and waits") {
  RunningArbiter a(config(Policy::kFifo));
  CHECK(a.server->snapshot().devices.empty());
  zmq::context_t ctx(1);
  LeaseClient job1(ctx, a.server->endpoint(), 1), job2(ctx, a.server->endpoint(), 2);
  REQUIRE(job1.acquire(1, "gpu0", 0).isOk());
  REQUIRE(job2.acquire(1, "gpu1", 0).isOk());
  InBackground second([&] { return job2.acquire(3, "gpu0", 0); });
  const auto device = [&](const std::string& name) {
    for (const auto& d : a.server->snapshot().devices) {
      if (d.device == name) return d;
    }
    return DeviceLeaseStats{};
  };
  // Published each keepalive period: job 1 holds gpu0 while job 2 waits for it.
  REQUIRE(eventually([&] { return device("gpu0").waiting == 1; }));
  CHECK(device("gpu0").holder_jobs == std::vector<std::uint64_t>{1});
  CHECK(device("gpu1").holder_jobs == std::vector<std::uint64_t>{2});
  CHECK(device("gpu0").grants == 1);
  std::this_thread::sleep_for(100ms);
  REQUIRE(job1.release(1, "gpu0", 40.0).isOk());
  CHECK(eventually([&] { return second.done.load(); }));
  second.thread.join();
  REQUIRE(eventually([&] {
    const auto d = device("gpu0");
    return d.grants == 2 && d.waiting == 0 && d.holder_jobs == std::vector<std::uint64_t>{2};
  }));
  const auto gpu0 = device("gpu0");
  CHECK(gpu0.wait_ms >= 100);  // job 2 waited out the sleep above
  CHECK(gpu0.held_ms == doctest::Approx(40.0));
  CHECK(a.server->snapshot().counters.grants == 3);
}

TEST_CASE(
    "arbiter server: keepalives let a worker wait longer than its answer "
    "timeout") {
  RunningArbiter a(config(Policy::kCrossover));
  zmq::context_t ctx(1);
  LeaseClientOptions quick;
  quick.answer_timeout = 200ms;
  LeaseClient holder(ctx, a.server->endpoint(), 1, quick),
      waiter(ctx, a.server->endpoint(), 2, quick);
  REQUIRE(holder.acquire(4, "gpu0", 0).isOk());
  InBackground got([&] { return waiter.acquire(4, "gpu0", 0); });
  std::this_thread::sleep_for(700ms);  // the device is busy for 3.5 answer timeouts
  CHECK_FALSE(got.done.load());
  REQUIRE(holder.release(4, "gpu0", 700).isOk());
  CHECK(eventually([&] { return got.done.load(); }));
  got.thread.join();
  CHECK(got.status.isOk());
}

TEST_CASE("arbiter server: a lease held past the lease timeout is taken back") {
  RunningArbiter a(config(Policy::kFifo, 300));
  zmq::context_t ctx(1);
  LeaseClient hung(ctx, a.server->endpoint(), 1), next(ctx, a.server->endpoint(), 2);
  REQUIRE(hung.acquire(1, "gpu0", 0).isOk());
  const auto t0 = Clock::now();
  REQUIRE(next.acquire(1, "gpu0", 0).isOk());  // never released by `hung`
  CHECK(Clock::now() - t0 >= 250ms);
  auto st = next.stats(2000ms);
  REQUIRE(st.isOk());
  CHECK(st->expired == 1);
  // The hung worker's late release is a stray one and takes nothing from the
  // new holder.
  REQUIRE(hung.release(1, "gpu0", 400).isOk());
  CHECK(eventually([&] {
    auto s = next.stats(2000ms);
    return s.isOk() && s->stray_releases == 1;
  }));
}

TEST_CASE("arbiter server: a dead arbiter is reported within the answer timeout") {
  std::string endpoint;
  {
    RunningArbiter a(config(Policy::kCrossover));
    endpoint = a.server->endpoint();
  }  // gone: nothing listens there any more
  zmq::context_t ctx(1);
  LeaseClientOptions o;
  o.answer_timeout = 300ms;
  LeaseClient c(ctx, endpoint, 1, o);
  const auto t0 = Clock::now();
  Status s = c.acquire(1, "gpu0", 0);
  CHECK(s.code() == Code::kUnavailable);
  CHECK(Clock::now() - t0 < 2000ms);
  CHECK(c.release(1, "gpu0", 0).isOk());  // never blocks
}

TEST_CASE(
    "arbiter server: a malformed request gets an error and the arbiter "
    "keeps serving") {
  RunningArbiter a(config(Policy::kFifo));
  zmq::context_t ctx(1);
  auto raw = makeSocket(ctx, zmq::socket_type::dealer);
  REQUIRE(raw.isOk());
  REQUIRE(connectSocket(*raw, a.server->endpoint()).isOk());
  std::vector<zmq::message_t> junk;
  junk.emplace_back("not a capnp message", 19);
  REQUIRE(sendFrames(*raw, std::move(junk)).isOk());
  zmq::pollitem_t item{raw->handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, 3000ms);
  REQUIRE((item.revents & ZMQ_POLLIN) != 0);
  auto reply = recvFrames(*raw);
  REQUIRE(reply.isOk());
  CHECK(reply->size() == 1);
  LeaseClient ok(ctx, a.server->endpoint(), 1);
  CHECK(ok.acquire(1, "gpu0", 0).isOk());
  // An acquire without a device is refused with a reason.
  CHECK(ok.acquire(2, "", 0).code() == Code::kInvalidArgument);
}

TEST_CASE("lease client: leases follow the job id the daemon assigned, not the flag's") {
  RunningArbiter a(config(Policy::kFifo));
  zmq::context_t ctx(1);
  LeaseClient client(ctx, a.server->endpoint(), 1);  // --job-id default
  client.setJobId(7);                                // a --serve daemon's job 7 took this worker
  REQUIRE(client.acquire(3, "gpu0", 0).isOk());
  REQUIRE(client.release(3, "gpu0", 1.0).isOk());
  auto st = client.stats(2000ms);
  REQUIRE(st.isOk());
  REQUIRE(st->jobs.size() == 1);
  CHECK(st->jobs[0].job_id == 7);
  CHECK(st->jobs[0].grants == 1);
}
