// The device arbiter hosted by groupsgdd (arbiter_listen; docs/arbiter.md): started in
// `--role all` and `--role node`, on a thread of its own with its own socket, stopped
// when the returned object is destroyed.
// Thread rule: create and destroy on the main thread.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include <zmq.hpp>

#include "groupsgd/arbiter/arbiter_server.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/status.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::daemon {

class ArbiterHost {
 public:
  ArbiterHost(std::unique_ptr<arbiter::ArbiterServer> server);
  ~ArbiterHost();
  // A job's crossover weight (its job file's arbiter_weight); any thread.
  void setJobWeight(std::uint64_t job, double weight) { server_->setJobWeight(job, weight); }
  // Its counters and devices, at most keepalive_ms old; any thread.
  arbiter::ArbiterSnapshot snapshot() const { return server_->snapshot(); }

 private:
  std::unique_ptr<arbiter::ArbiterServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// nullptr when arbiter_listen is empty; an error when it cannot bind.
Result<std::unique_ptr<ArbiterHost>> startArbiter(zmq::context_t& ctx, const DaemonConfig& cfg,
                                                  const CurveKeys& keys);

}  // namespace groupsgd::daemon
