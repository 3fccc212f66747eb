// A worker's side of the device arbiter (docs/arbiter.md): ask for the shared
// device before a step's compute, give it back after. acquire() never waits
// longer than answer_timeout without hearing from the arbiter: a queued request
// is kept alive by the arbiter's `waiting` messages, and silence means the
// arbiter is gone (the caller then computes unarbitrated). Replies are matched
// by sequence number, and a silent socket is replaced, so a late answer is
// never taken for a later request. Thread rule: one owner thread (it owns a
// ZeroMQ socket).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "groupsgd/arbiter/arbiter_stats.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/status.h"

namespace groupsgd::arbiter {

struct LeaseClientOptions {
  std::chrono::milliseconds answer_timeout{1000};  // longest silence taken for a busy device
  std::chrono::milliseconds max_wait{60000};       // longest wait for a grant in any case
  CurveKeys curve;                                 // empty: plain TCP
};

class LeaseClient {
 public:
  LeaseClient(zmq::context_t& ctx, std::string endpoint, std::uint64_t job_id,
              LeaseClientOptions opts = {});
  ~LeaseClient();
  LeaseClient(const LeaseClient&) = delete;
  LeaseClient& operator=(const LeaseClient&) = delete;
  const std::string& endpoint() const { return endpoint_; }
  // The job the leases are asked for (a multi-job daemon assigns it at registration).
  void setJobId(std::uint64_t job_id) { job_id_ = job_id; }

  // Blocks until `device` is granted for `step`. kUnavailable when the arbiter
  // was silent for answer_timeout (or max_wait passed); the arbiter's refusal
  // as its Status.
  // handoff: this worker computes under the device's lock file, so the arbiter may grant
  // it ahead of the holder's release; *locked (if given) is then set when it must take
  // that lock before computing (the grant was grantLocked).
  Status acquire(std::uint64_t worker_id, const std::string& device, std::uint64_t step,
                 bool handoff = false, bool* locked = nullptr);
  // Gives the device back; sends and returns without waiting for anything.
  Status release(std::uint64_t worker_id, const std::string& device, double held_ms);
  // The arbiter's counters (tools, tests, benchmarks).
  Result<ArbiterCounters> stats(std::chrono::milliseconds timeout);

 private:
  Status ensureSocket();
  zmq::context_t& ctx_;
  std::string endpoint_;
  std::uint64_t job_id_;
  LeaseClientOptions opts_;
  std::optional<zmq::socket_t> sock_;
  std::uint64_t seq_ = 0;
};

}  // namespace groupsgd::arbiter
