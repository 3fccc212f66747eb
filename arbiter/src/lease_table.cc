#include "groupsgd/arbiter/lease_table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::arbiter {
namespace {

// Rounds remembered per job: enough for every group of a job to be a few steps
// apart.
constexpr std::size_t kRoundsKept = 64;

}  // namespace

constexpr std::array<base::EnumName<Policy>, 3> kPolicyNames{{
    {Policy::kNone, "none"},
    {Policy::kFifo, "fifo"},
    {Policy::kCrossover, "crossover"},
}};

const char* policyName(Policy p) { return base::nameOf(kPolicyNames, p, "?"); }

Result<Policy> parsePolicy(const std::string& text) {
  if (const auto p = base::parse(kPolicyNames, text)) return *p;
  return invalidArgument("arbiter policy must be none, fifo or crossover, got '" + text + "'");
}

Result<JobWeights> parseJobWeights(const std::string& text) {
  JobWeights out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    const std::string job = item.substr(0, eq);
    const bool digits = !job.empty() && job.find_first_not_of("0123456789") == std::string::npos;
    char* end = nullptr;
    errno = 0;
    const double w = eq == std::string::npos ? 0 : std::strtod(item.c_str() + eq + 1, &end);
    if (!digits || eq == std::string::npos || end != item.c_str() + item.size() || errno != 0 ||
        !std::isfinite(w) || w <= 0) {
      return invalidArgument(
          "job weights are JOB=W with W > 0, comma-separated (e.g. 1=2,2=1); "
          "got '" +
          item + "'");
    }
    out[std::strtoull(job.c_str(), nullptr, 10)] = w;
  }
  return out;
}

LeaseTable::LeaseTable(Policy policy, JobWeights weights)
    : policy_(policy), weights_(std::move(weights)) {}

LeaseTable::Round& LeaseTable::roundOf(LeaseKey key, std::uint64_t step) {
  Job& job = jobs_[key.job];
  for (Round& r : job.rounds) {
    if (r.step == step) return r;
  }
  // A new round starts no earlier than now in virtual time: an idle job earns
  // no credit.
  const auto w = weights_.find(key.job);
  const double weight = w == weights_.end() ? 1.0 : w->second;
  Round r{step, std::max(job.pass, virtual_time_), rounds_begun_++};
  job.pass = r.tag + 1.0 / weight;
  job.rounds.push_back(r);
  if (job.rounds.size() > kRoundsKept) job.rounds.pop_front();
  return job.rounds.back();
}

void LeaseTable::drop(Device& d, LeaseKey key) {
  std::erase(d.holders, key);
  std::erase(d.handoff, key);
  std::erase_if(d.waiting, [&](const Waiter& w) { return w.key == key; });
}

std::vector<Grant> LeaseTable::grantNext(const std::string& device, Device& d) {
  std::vector<Grant> granted;
  const auto under_lock = [&d](LeaseKey k) {
    return std::find(d.handoff.begin(), d.handoff.end(), k) != d.handoff.end();
  };
  while (!d.waiting.empty()) {
    // Exclusive policies: the device is free, or its one holder computes under the lock
    // and nobody is granted ahead yet.
    const bool ahead = !d.holders.empty();
    if (policy_ != Policy::kNone &&
        (d.holders.size() > 1 || (ahead && !under_lock(d.holders.front())))) {
      break;
    }
    auto next = d.waiting.begin();
    if (policy_ == Policy::kCrossover) {
      next = std::min_element(
          d.waiting.begin(), d.waiting.end(), [](const Waiter& a, const Waiter& b) {
            return std::tie(a.tag, a.round, a.arrival) < std::tie(b.tag, b.round, b.arrival);
          });
    }
    // Only a waiter that takes the lock itself may go ahead (it must not overlap).
    if (policy_ != Policy::kNone && ahead && !next->handoff) break;
    if (policy_ == Policy::kCrossover) virtual_time_ = std::max(virtual_time_, next->tag);
    const bool locked = policy_ != Policy::kNone && next->handoff;
    d.holders.push_back(next->key);
    if (locked) d.handoff.push_back(next->key);
    granted.push_back({device, next->key, locked});
    d.waiting.erase(next);
  }
  return granted;
}

std::vector<Grant> LeaseTable::acquire(const std::string& device, LeaseKey key, std::uint64_t step,
                                       bool handoff) {
  Device& d = devices_[device];
  drop(d, key);
  Waiter w{key, 0, 0, arrivals_++, handoff};
  if (policy_ == Policy::kCrossover) {
    const Round& r = roundOf(key, step);
    w.tag = r.tag;
    w.round = r.order;
  }
  d.waiting.push_back(w);
  return grantNext(device, d);
}

std::vector<Grant> LeaseTable::release(const std::string& device, LeaseKey key, bool* stray) {
  auto it = devices_.find(device);
  const bool held = it != devices_.end() &&
                    std::find(it->second.holders.begin(), it->second.holders.end(), key) !=
                        it->second.holders.end();
  if (stray) *stray = !held;
  if (!held) return {};
  return forget(device, key);
}

std::vector<Grant> LeaseTable::forget(const std::string& device, LeaseKey key) {
  auto it = devices_.find(device);
  if (it == devices_.end()) return {};
  drop(it->second, key);
  return grantNext(device, it->second);
}

std::vector<LeaseKey> LeaseTable::holders(const std::string& device) const {
  auto it = devices_.find(device);
  return it == devices_.end() ? std::vector<LeaseKey>{} : it->second.holders;
}

std::size_t LeaseTable::waiting(const std::string& device) const {
  auto it = devices_.find(device);
  return it == devices_.end() ? 0 : it->second.waiting.size();
}

}  // namespace groupsgd::arbiter
