#include "groupsgd/coordinator/admission_book.h"

namespace groupsgd::coordinator {

Status AdmissionBook::checkNotQuarantined(const std::string& host, std::uint32_t pid,
                                          const std::string& key) {
  if (!key.empty() && quarantined_keys_.count(key) != 0) {
    ++counters_.quarantine_refusals;
    return quarantined("CURVE key " + key + " is quarantined");
  }
  if (quarantined_procs_.count({host, pid}) != 0) {
    ++counters_.quarantine_refusals;
    return quarantined("process " + std::to_string(pid) + " on " + host + " is quarantined");
  }
  return Status::ok();
}

void AdmissionBook::quarantine(const adaptive::WorkerRecord& w) {
  quarantined_procs_.insert({w.host, w.pid});
  // Under CURVE the key is the identity: a new name or pid does not make a new worker.
  if (!w.public_key.empty()) quarantined_keys_.insert(w.public_key);
  ++counters_.quarantined;
}

void AdmissionBook::release(const adaptive::WorkerRecord& w) {
  quarantined_procs_.erase({w.host, w.pid});
  quarantined_keys_.erase(w.public_key);
}

std::size_t AdmissionBook::trainersSeen(const adaptive::Registry& registry) const {
  std::set<Process> seen = told_finished_;
  for (const auto& [id, w] : registry.all()) {
    if (w.role == adaptive::WorkerRole::kTrainer) seen.insert({w.host, w.pid});
  }
  return seen.size();
}

}  // namespace groupsgd::coordinator
