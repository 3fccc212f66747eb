// Who may join a run, and what was refused: worker ids and data shards handed out, the
// quarantine book (processes and CURVE keys that may not come back), the trainers told
// the run is over, the registrations still waiting for their group PS, and the counters
// the status and the summary report.
// Thread rule: plain data of the coordinator thread (no locks).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "groupsgd/adaptive/registry.h"
#include "groupsgd/common/status.h"

namespace groupsgd::coordinator {

class AdmissionBook {
 public:
  // What was refused or quarantined in this run (status, summary, metrics).
  struct Counters {
    std::uint64_t quarantine_refusals = 0;  // registrations/heartbeats refused
    std::uint64_t quarantined = 0;          // workers quarantined in this run
    std::uint64_t identity_refused = 0;     // a request under another key's worker id
    std::uint64_t stale_heartbeats = 0;     // from an old epoch, an unknown or dead worker
  };

  explicit AdmissionBook(std::uint32_t shard_count) : shard_count_(shard_count) {}

  // The id the next registration gets; take it once the registration is accepted.
  std::uint64_t nextId() const { return next_id_; }
  std::uint64_t takeId() { return next_id_++; }
  // Shards go round robin over the configured trainer count.
  std::uint32_t takeShard() { return next_shard_++ % shard_count_; }

  // Refused (and counted) when the process or the key is quarantined; ok otherwise.
  Status checkNotQuarantined(const std::string& host, std::uint32_t pid, const std::string& key);
  // A worker quarantined by its group: its process and its key may not come back.
  void quarantine(const adaptive::WorkerRecord& w);
  // An operator cleared it (control method unquarantine): it may register again.
  void release(const adaptive::WorkerRecord& w);
  void countQuarantineRefusal() { ++counters_.quarantine_refusals; }
  void countIdentityRefused() { ++counters_.identity_refused; }
  void countStaleHeartbeat() { ++counters_.stale_heartbeats; }
  const Counters& counters() const { return counters_; }

  // A trainer (host, pid) that registered after the end and was told `finished`.
  void toldFinished(const std::string& host, std::uint32_t pid) {
    told_finished_.insert({host, pid});
  }
  // Trainers (distinct host and pid) seen: registered, or told `finished`.
  std::size_t trainersSeen(const adaptive::Registry& registry) const;

  // Trainers whose registration waits for its group PS to expect them (never judged
  // silent meanwhile).
  void admitting(std::uint64_t id) { admitting_.insert(id); }
  void admitted(std::uint64_t id) { admitting_.erase(id); }
  bool isAdmitting(std::uint64_t id) const { return admitting_.count(id) != 0; }

 private:
  using Process = std::pair<std::string, std::uint32_t>;  // host, pid
  std::uint32_t shard_count_;
  std::uint64_t next_id_ = 1;
  std::uint32_t next_shard_ = 0;
  std::set<Process> told_finished_;
  std::set<std::uint64_t> admitting_;
  std::set<Process> quarantined_procs_;
  std::set<std::string> quarantined_keys_;
  Counters counters_;
};

}  // namespace groupsgd::coordinator
