// The device arbiter's view for `job list` and the dashboard: each shared device's holder,
// queue and waits, and each job's lease waits, with job ids turned into job names.
#include <map>
#include <string>

#include "job_host_impl.h"

namespace groupsgd::jobs {

using ojson = nlohmann::ordered_json;

namespace {

double meanOrZero(double total, std::uint64_t count) {
  return count == 0 ? 0.0 : total / static_cast<double>(count);
}

}  // namespace

ojson JobHost::arbiterJson() const {
  if (arbiter_ == nullptr) return nullptr;
  std::map<std::uint64_t, std::string> names;  // leases are keyed by the job's id
  for (const auto& rec : table_.jobs()) names[rec.id] = rec.name;
  const auto nameOf = [&](std::uint64_t id) {
    const auto it = names.find(id);
    return it == names.end() ? "job " + std::to_string(id) : it->second;
  };
  const arbiter::ArbiterSnapshot snap = arbiter_->snapshot();
  ojson devices = ojson::array();
  for (const auto& d : snap.devices) {
    ojson holders = ojson::array();
    for (std::uint64_t id : d.holder_jobs) holders.push_back(nameOf(id));
    devices.push_back({{"device", d.device},
                       {"holders", holders},
                       {"waiting", d.waiting},
                       {"grants", d.grants},
                       {"expired", d.expired},
                       {"mean_wait_ms", meanOrZero(d.wait_ms, d.grants)},
                       {"held_s", d.held_ms / 1000.0}});
  }
  ojson jobs = ojson::array();
  for (const auto& j : snap.counters.jobs) {
    jobs.push_back({{"job", nameOf(j.job_id)},
                    {"grants", j.grants},
                    {"mean_wait_ms", meanOrZero(j.wait_ms, j.grants)},
                    {"wait_s", j.wait_ms / 1000.0},
                    {"held_s", j.held_ms / 1000.0}});
  }
  return {{"policy", snap.counters.policy},
          {"grants", snap.counters.grants},
          {"expired", snap.counters.expired},
          {"devices", devices},
          {"jobs", jobs}};
}

}  // namespace groupsgd::jobs
