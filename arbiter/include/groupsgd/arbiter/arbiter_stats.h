// The arbiter's counters as plain values (the `stats` answer of
// schemas/arbiter.capnp). Thread rule: plain values; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace groupsgd::arbiter {

struct JobLeaseStats {
  std::uint64_t job_id = 0;
  std::uint64_t grants = 0;
  double wait_ms = 0;  // summed over its workers' requests
  double held_ms = 0;  // summed over its workers' releases
};

struct ArbiterCounters {
  std::string policy;
  std::uint64_t grants = 0;
  std::uint64_t expired = 0;
  std::uint64_t stray_releases = 0;
  std::vector<JobLeaseStats> jobs;  // by job id
};

}  // namespace groupsgd::arbiter
