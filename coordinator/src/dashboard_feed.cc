#include "groupsgd/coordinator/dashboard_feed.h"

#include <cmath>
#include <limits>

namespace groupsgd::coordinator {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// NaN and infinities are not JSON: null.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

DashboardFeed::DashboardFeed(std::size_t capacity, double stride_s)
    : capacity_(capacity < 4 ? 4 : capacity), stride_s_(stride_s) {}

void DashboardFeed::noteCentral(double mean_staleness, std::uint64_t updates_applied,
                                std::uint64_t max_stale) {
  stale_sum_ = mean_staleness * static_cast<double>(updates_applied);
  merged_ = updates_applied;
  max_stale_ = max_stale;
  central_known_ = true;
}

void DashboardFeed::sample(DashboardPoint p) {
  if (!points_.empty() && p.t_s - points_.back().p.t_s < stride_s_) return;
  if (central_known_) {
    p.stale_mean = merged_ > merged_at_point_ ? (stale_sum_ - stale_sum_at_point_) /
                                                    static_cast<double>(merged_ - merged_at_point_)
                                              : kUnknown;
    p.stale_max = static_cast<double>(max_stale_);
    stale_sum_at_point_ = stale_sum_;
    merged_at_point_ = merged_;
  } else {
    p.stale_mean = p.stale_max = kUnknown;
  }
  double rate = kUnknown;
  if (!points_.empty() && p.t_s > points_.back().p.t_s) {
    rate = (p.samples - points_.back().p.samples) / (p.t_s - points_.back().p.t_s);
  }
  points_.push_back({p, rate});
  if (points_.size() < capacity_) return;
  // Full: keep every other point (the first and the newest stay) and sample half as
  // often. A kept point's rate then spans two intervals: recompute it from its new
  // predecessor.
  std::vector<Kept> kept;
  for (std::size_t i = 0; i < points_.size(); i += 2) kept.push_back(points_[i]);
  if (points_.size() % 2 == 0) kept.push_back(points_.back());
  for (std::size_t i = 1; i < kept.size(); ++i) {
    const double dt = kept[i].p.t_s - kept[i - 1].p.t_s;
    if (dt > 0) kept[i].samples_per_s = (kept[i].p.samples - kept[i - 1].p.samples) / dt;
  }
  points_ = std::move(kept);
  stride_s_ *= 2;
}

void DashboardFeed::noteMembership(double t_s, const std::map<std::string, std::uint32_t>& groups) {
  if (!membership_.empty() && membership_.back().second == groups) return;
  membership_.emplace_back(t_s, groups);
  if (membership_.size() > capacity_) membership_.erase(membership_.begin());
}

void DashboardFeed::readEvents(const nlohmann::json& events) {
  for (; events_read_ < events.size(); ++events_read_) {
    const nlohmann::json& e = events[events_read_];
    if (e.value("kind", "") != "straggler" || !e.contains("worker")) continue;
    stragglers_[e["worker"].get<std::uint64_t>()] = {e.value("onset", false), e.value("text", ""),
                                                     e.value("t_s", 0.0)};
  }
}

const StragglerMark* DashboardFeed::straggler(std::uint64_t worker) const {
  auto it = stragglers_.find(worker);
  return it == stragglers_.end() ? nullptr : &it->second;
}

nlohmann::json DashboardFeed::historyJson() const {
  nlohmann::json t = nlohmann::json::array(), samples = t, rate = t, acc = t, loss = t, smean = t,
                 smax = t, groups = t, version = t;
  for (const Kept& k : points_) {
    t.push_back(number(k.p.t_s));
    samples.push_back(number(k.p.samples));
    rate.push_back(number(k.samples_per_s));
    acc.push_back(number(k.p.test_acc));
    loss.push_back(number(k.p.test_loss));
    smean.push_back(number(k.p.stale_mean));
    smax.push_back(number(k.p.stale_max));
    groups.push_back(number(k.p.groups));
    version.push_back(number(k.p.central_version));
  }
  return {{"stride_s", stride_s_},   {"t_s", t},
          {"samples", samples},      {"samples_per_s", rate},
          {"test_acc", acc},         {"test_loss", loss},
          {"staleness_mean", smean}, {"staleness_max", smax},
          {"groups", groups},        {"central_version", version}};
}

nlohmann::json DashboardFeed::membershipJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [t, groups] : membership_) out.push_back({{"t_s", t}, {"groups", groups}});
  return out;
}

}  // namespace groupsgd::coordinator
