// What the coordinator remembers for the dashboard page (docs/operations.md "Watching a
// run") beyond the state of the moment: a bounded history of the run's figures, the
// group membership each time it changed, and each worker's straggler state as the
// detector's last event about it said (flagged / recovered, with its text).
// Bounded: the history keeps at most `capacity` points; when full, every other point is
// dropped (never the first or the newest) and the sampling stride doubles, so the whole
// run stays, ever coarser. The
// membership timeline keeps its newest `capacity` changes.
// Thread rule: plain data of the coordinator thread (no locks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace groupsgd::coordinator {

// One moment of the run. NaN: not known (yet).
struct DashboardPoint {
  double t_s = 0;              // seconds since training began
  double samples = 0;          // samples trained so far
  double test_acc = 0;         // the evaluator's latest report
  double test_loss = 0;        // its validation loss
  double stale_mean = 0;       // mean staleness of the deltas merged since the last point
  double stale_max = 0;        // largest staleness of a merged delta so far
  double groups = 0;           // groups in use
  double central_version = 0;  // central model version
};

struct StragglerMark {
  bool flagged = false;  // onset (true) or recovery (false)
  std::string reason;    // the detector's text (the log's straggler event)
  double t_s = 0;
};

class DashboardFeed {
 public:
  explicit DashboardFeed(std::size_t capacity = 512, double stride_s = 1.0);

  // Adds a point when at least the stride has passed since the last one kept.
  void sample(DashboardPoint p);
  // The central PS's cumulative staleness figures; sample() turns them into a per-interval
  // mean (the deltas merged between two points).
  void noteCentral(double mean_staleness, std::uint64_t updates_applied, std::uint64_t max_stale);
  // The grouping now (worker name -> group), kept when it differs from the last one.
  void noteMembership(double t_s, const std::map<std::string, std::uint32_t>& groups);
  // Reads the run's events (run_log.h) from where it stopped last time.
  void readEvents(const nlohmann::json& events);

  const StragglerMark* straggler(std::uint64_t worker) const;
  // {"t_s": [...], "samples": [...], "samples_per_s": [...], ...}: one array per figure.
  nlohmann::json historyJson() const;
  // [{"t_s", "groups": {"NAME": G, ...}}, ...], oldest first.
  nlohmann::json membershipJson() const;
  double strideS() const { return stride_s_; }
  std::size_t points() const { return points_.size(); }

 private:
  struct Kept {
    DashboardPoint p;
    double samples_per_s;  // since the previous point kept
  };
  std::size_t capacity_;
  double stride_s_;
  std::vector<Kept> points_;
  // The central PS's figures at the last point and now.
  double stale_sum_at_point_ = 0, stale_sum_ = 0;
  std::uint64_t merged_at_point_ = 0, merged_ = 0, max_stale_ = 0;
  bool central_known_ = false;
  std::vector<std::pair<double, std::map<std::string, std::uint32_t>>> membership_;
  std::map<std::uint64_t, StragglerMark> stragglers_;
  std::size_t events_read_ = 0;
};

}  // namespace groupsgd::coordinator
