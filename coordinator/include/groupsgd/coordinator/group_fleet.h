// The coordinator's group PS slots, one per group id: where the slot's PS is and how to
// reach it, which node daemon hosts it (0: this daemon), whether it has failed, and the
// group's exchange period K. Slots get their PS in order (from the topology at start, or
// as node daemons offer group PSes); a failed slot can be pointed at a spare PS.
// Thread rule: one thread (the coordinator's) uses a fleet.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/message.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/coordinator/background_call.h"

namespace groupsgd::coordinator {

class GroupFleet {
 public:
  // slots: the configured number of groups, each with exchange period `period`.
  GroupFleet(zmq::context_t& ctx, MessageLimits limits, std::uint32_t slots, std::uint32_t period);

  std::uint32_t slots() const { return static_cast<std::uint32_t>(slots_.size()); }
  // Slots that have a PS; they are slots 0 .. ready()-1.
  std::uint32_t ready() const { return ready_; }
  bool allReady() const { return ready_ >= slots(); }
  // The next slot without a PS gets the one at endpoint, hosted by node (0: this daemon).
  // Returns its group id; call only while !allReady().
  std::uint32_t add(const std::string& endpoint, SocketOptions options, std::uint64_t node);
  // Slot g's PS is replaced by another (a spare on node): g is no longer failed.
  void replace(std::uint32_t g, const std::string& endpoint, SocketOptions options,
               std::uint64_t node);

  bool failed(std::uint32_t g) const { return g < slots_.size() && slots_[g].failed; }
  void markFailed(std::uint32_t g) { slots_.at(g).failed = true; }
  std::vector<std::uint32_t> failedGroups() const;

  // "" / 0 for a slot without a PS.
  const std::string& endpoint(std::uint32_t g) const;
  std::uint64_t node(std::uint32_t g) const { return g < slots_.size() ? slots_[g].node : 0; }
  // The slot's own socket (g < ready()), for calls made on this thread.
  RpcClient& client(std::uint32_t g) { return *slots_.at(g).client; }
  // Where a call on another thread goes (g < ready()).
  CallTarget link(std::uint32_t g) const;

  std::uint32_t period(std::uint32_t g) const { return slots_.at(g).period; }
  void setPeriod(std::uint32_t g, std::uint32_t k) { slots_.at(g).period = k; }

  // What slot g's PS last reported of its lr schedule (GroupStats): the lr it stepped
  // with and the run's samples it believes applied. lr 0: nothing reported yet.
  void noteSchedule(std::uint32_t g, float lr, std::uint64_t run_samples) {
    slots_.at(g).learning_rate = lr;
    slots_.at(g).run_samples = run_samples;
  }
  float learningRate(std::uint32_t g) const { return slots_.at(g).learning_rate; }
  std::uint64_t runSamples(std::uint32_t g) const { return slots_.at(g).run_samples; }

 private:
  struct Slot {
    std::unique_ptr<RpcClient> client;  // null until the slot has a PS
    std::uint64_t node = 0;
    bool failed = false;
    std::uint32_t period = 1;
    float learning_rate = 0;
    std::uint64_t run_samples = 0;
  };
  zmq::context_t& ctx_;
  MessageLimits limits_;
  std::vector<Slot> slots_;
  std::uint32_t ready_ = 0;
};

}  // namespace groupsgd::coordinator
