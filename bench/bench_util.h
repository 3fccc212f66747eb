// Helpers shared by the benchmark programs: timing and percentiles,
// and driving a group PS as the coordinator would (GroupConfig) and as a worker would
// (pull until the group has its model) through the in-process cluster the cluster tests
// use too (groupsgd/testbed/in_process_cluster.h). Benchmarks print one JSON object per
// line.
// Thread rule: every function is reentrant; a zmq context or client passed in belongs to
// the calling thread as usual.
#pragma once

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/client/client.h"
#include "groupsgd/common/allocator.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/testbed/in_process_cluster.h"

namespace groupsgd::bench {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

inline double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// p in [0, 1], nearest rank on a sorted copy; 0 for an empty sample.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::lround(p * static_cast<double>(v.size() - 1)));
  return v[std::min(rank, v.size() - 1)];
}

inline void emit(const json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// glibc keeps large blocks in the process instead of returning them to the kernel after
// every free: blocks up to 32 MiB (a 4 MiB ZeroMQ receive frame) come from the heap, and a
// free heap top is kept up to 1 GiB (trim) with 256 MiB of slack (top pad, which also keeps
// per-thread heaps from being unmapped). Without it, each large message lands in fresh pages
// and pays one page fault per 4 KiB. Call before any thread starts. False if refused.
inline bool tuneMalloc() { return groupsgd::tuneAllocatorForLargeBuffers(); }

using testbed::InProcessCluster;
using testbed::pullWhenReady;

// How long a member pulls before the group PS has its first model (a large model takes a
// while to come from the central PS).
inline constexpr std::chrono::milliseconds kReadyLimit{20000};

// Sends group 0 a GroupConfig listing workers 1..members (batch 32, this epoch), as the
// coordinator does; K as given, a step deadline of 120 s.
inline Status configureMembers(zmq::context_t& ctx, const std::string& group_endpoint,
                               std::uint32_t members, std::uint64_t epoch, std::uint32_t k) {
  return testbed::configureGroup(ctx, group_endpoint, testbed::numberedMembers(members),
                                 {epoch, k, 120000});
}

inline client::Assignment memberAssignment(std::uint64_t worker_id, std::uint64_t epoch,
                                           const std::string& group_endpoint, std::size_t params) {
  client::Assignment a;
  a.worker_id = worker_id;
  a.epoch = epoch;
  a.group_endpoint = group_endpoint;
  a.param_count = params;
  a.batch_size = 32;
  return a;
}

// A member thread's start: pulls the model into replica (failed set when it cannot), waits
// at `pulled` until every member has, and returns the step to push first.
inline std::uint64_t pullAndMeet(client::GroupClient& client, std::vector<float>& replica,
                                 std::atomic<bool>& failed, std::barrier<>& pulled) {
  auto r = pullWhenReady(client, replica, kReadyLimit);
  if (!r) failed = true;
  pulled.arrive_and_wait();
  return r ? r->step : 0;
}

// The central PS settings of a benchmark: no update bound its synthetic deltas could trip.
inline centralps::CentralConfig benchCentralConfig(std::size_t params) {
  centralps::CentralConfig cfg;
  cfg.param_count = params;
  cfg.max_delta_norm = 1e30;
  return cfg;
}

// The group PS settings of a benchmark: no gradient bound, and step and exchange time
// limits (120 s) that no measured step reaches.
inline groupps::GroupServerConfig benchGroupConfig() {
  groupps::GroupServerConfig cfg;
  cfg.max_grad_norm = 1e30;
  cfg.step_deadline_ms = 120000;
  cfg.exchange_timeout_ms = 120000;
  return cfg;
}

}  // namespace groupsgd::bench
