// The device arbiter: serves device leases to workers over ZeroMQ
// (schemas/arbiter.capnp, docs/arbiter.md) with one of the LeaseTable policies.
// One ROUTER socket; a waiting worker gets a `waiting` keepalive every
// keepalive_ms so it can tell a busy device from a dead arbiter; a lease held
// longer than lease_timeout_ms is taken back (a worker that died or hung while
// holding it); a grant that cannot be delivered (the worker is gone) passes to
// the next waiter. Thread rule: create() on any thread, then run() on exactly
// one thread, which owns the socket and all state from then on; endpoint() is
// immutable after create(); setJobWeight() and snapshot() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "groupsgd/arbiter/arbiter_stats.h"
#include "groupsgd/arbiter/lease_table.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/status.h"

namespace groupsgd::arbiter {

struct ArbiterConfig {
  std::string listen = "tcp://127.0.0.1:5570";  // port 0 or '*': chosen by the kernel
  Policy policy = Policy::kCrossover;
  JobWeights weights;  // crossover only; jobs not listed weigh 1
  std::uint32_t lease_timeout_ms = 10000;
  std::uint32_t keepalive_ms = 200;
  CurveKeys curve;  // empty: plain TCP
};

class ArbiterServer {
 public:
  static Result<std::unique_ptr<ArbiterServer>> create(zmq::context_t& ctx,
                                                       const ArbiterConfig& cfg);
  ~ArbiterServer();
  const std::string& endpoint() const;
  // Serves until stop is set (checked at least every 50 ms).
  void run(const std::atomic<bool>& stop);
  // A job's crossover weight (> 0), e.g. from a submitted job's own configuration; any
  // thread: run() applies it within 50 ms, to the job's next rounds.
  void setJobWeight(std::uint64_t job, double weight);
  // The counters and devices as run() last published them (every keepalive_ms); any
  // thread. Empty before run() starts.
  ArbiterSnapshot snapshot() const;

 private:
  struct State;
  explicit ArbiterServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace groupsgd::arbiter
