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

// One shared device as the arbiter sees it: who holds it now, how many wait, and what it
// has served so far (the `--serve` dashboard's device view).
struct DeviceLeaseStats {
  std::string device;
  std::vector<std::uint64_t> holder_jobs;  // job ids of the current holders (none: idle)
  std::uint64_t waiting = 0;               // requests queued now
  std::uint64_t grants = 0;
  std::uint64_t expired = 0;  // leases taken back after lease_timeout_ms
  double wait_ms = 0;         // summed over its granted requests
  double held_ms = 0;         // summed over its holders' reports
};

// The arbiter's counters and its devices at one moment (ArbiterServer::snapshot()).
struct ArbiterSnapshot {
  ArbiterCounters counters;
  std::vector<DeviceLeaseStats> devices;  // by name
};

}  // namespace groupsgd::arbiter
