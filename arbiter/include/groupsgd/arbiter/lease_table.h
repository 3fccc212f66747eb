// Who may compute on which shared device: the arbiter's policies without
// sockets or clocks, so they can be tested step by step (docs/arbiter.md).
//
// A lease is keyed by (job id, worker id). A worker asks for a device before a
// step's compute (acquire) and gives it back after (release). Policies:
//   none       every request is granted at once (no arbitration; the jobs
//   contend for
//              the device on their own, e.g. the emulated device's file lock);
//   fifo       one holder per device, waiters served in the order they asked;
//   crossover  one holder per device; waiters are served by job *round* (a
//   job's group
//              step): a round gets a start tag when its first worker asks, and
//              the device goes to the waiter of the round with the smallest
//              tag. So every device serves the same job first, that job's
//              workers finish their compute together and communicate while the
//              other job computes. Tags are start-time fair queueing over jobs:
//              tag = max(job's pass, virtual time), pass += 1/weight, so a job
//              never waits more than one round of an equal-weight job per
//              device and a job of weight 2 gets two rounds for one of a
//              weight-1 job.
// Thread rule: not thread-safe; owned by the arbiter's thread.
#pragma once

#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd::arbiter {

enum class Policy { kNone, kFifo, kCrossover };
const char* policyName(Policy p);
Result<Policy> parsePolicy(const std::string& text);

struct LeaseKey {
  std::uint64_t job = 0;
  std::uint64_t worker = 0;
  auto operator<=>(const LeaseKey&) const = default;
};

struct Grant {
  std::string device;
  LeaseKey key;
  // The grantee takes the device's lock before computing: it may be granted ahead, while
  // the holder before it still computes (handoff asked, exclusive policy).
  bool locked = false;
};

// Job id -> weight (> 0); jobs not listed weigh 1.
using JobWeights = std::map<std::uint64_t, double>;
// Parses "JOB=W[,JOB=W...]" (e.g. "1=2,2=1").
Result<JobWeights> parseJobWeights(const std::string& text);

class LeaseTable {
 public:
  LeaseTable(Policy policy, JobWeights weights);

  // `key` is ready to compute `step` on `device`. Returns what is granted now:
  // the asker (if the device is free, or always under none) or nothing (it
  // waits). A key that asks again while it waits or holds the device replaces
  // its old request or lease.
  // handoff: the asker computes under the device's lock, so with policy fifo or
  // crossover it may be granted one ahead, while a holder that also asked with handoff
  // still computes (the holder's unlock then hands the device over without a round trip
  // to the arbiter). At most one lease is granted ahead per device.
  std::vector<Grant> acquire(const std::string& device, LeaseKey key, std::uint64_t step,
                             bool handoff = false);
  // The holder gives the device back. Returns the waiters granted as a result;
  // empty when `key` did not hold it (a stray release: *stray is set when
  // given).
  std::vector<Grant> release(const std::string& device, LeaseKey key, bool* stray = nullptr);
  // Drops `key` from `device` (an expired lease or a waiter that is gone) and
  // grants on.
  std::vector<Grant> forget(const std::string& device, LeaseKey key);

  // A job's weight from now on (its next rounds); weight > 0.
  void setWeight(std::uint64_t job, double weight) { weights_[job] = weight; }

  Policy policy() const { return policy_; }
  std::vector<LeaseKey> holders(const std::string& device) const;
  std::size_t waiting(const std::string& device) const;

 private:
  struct Waiter {
    LeaseKey key;
    double tag = 0;             // crossover: start tag of its round
    std::uint64_t round = 0;    // crossover: order in which rounds began (ties)
    std::uint64_t arrival = 0;  // order of requests
    bool handoff = false;
  };
  struct Device {
    // At most one unless policy none, or two when the second was granted ahead (the
    // first computes, the second waits for the device's lock).
    std::vector<LeaseKey> holders;
    std::vector<LeaseKey> handoff;  // holders that compute under the device's lock
    std::vector<Waiter> waiting;
  };
  struct Round {
    std::uint64_t step = 0;
    double tag = 0;
    std::uint64_t order = 0;
  };
  struct Job {
    double pass = 0;           // start tag of the job's next round
    std::deque<Round> rounds;  // its recent rounds (workers of several groups)
  };

  Round& roundOf(LeaseKey key, std::uint64_t step);
  std::vector<Grant> grantNext(const std::string& device, Device& d);
  void drop(Device& d, LeaseKey key);

  Policy policy_;
  JobWeights weights_;
  std::map<std::string, Device> devices_;
  std::map<std::uint64_t, Job> jobs_;
  double virtual_time_ = 0;  // the largest tag granted so far
  std::uint64_t rounds_begun_ = 0;
  std::uint64_t arrivals_ = 0;
};

}  // namespace groupsgd::arbiter
