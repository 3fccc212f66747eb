// The story of one run as the coordinator tells it: when it started, when training began,
// when the target was reached (and by which report), the regroups, and the events the
// summary lists (each also logged, and printed with the progress lines when they are on).
// Thread rule: plain data of the coordinator thread (no locks).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd::coordinator {

class RunLog {
 public:
  using Clock = std::chrono::steady_clock;

  // print: events also go to standard output (with the progress lines).
  explicit RunLog(bool print) : print_(print) {}

  // Appends an event at the run's current time; the returned entry may take more fields.
  nlohmann::json& event(const std::string& kind, const std::string& text,
                        double predicted_gain = 0);
  const nlohmann::json& events() const { return events_; }

  double uptimeS() const { return secondsSince(started_); }
  // The first trainer's admission starts the training clock.
  void trainingBegins() {
    if (!training_started_) training_started_ = Clock::now();
  }
  bool training() const { return training_started_.has_value(); }
  // Seconds since training began (0 before).
  double trainingS() const { return training_started_ ? secondsSince(*training_started_) : 0.0; }

  void targetReached(double acc, double loss = -1) {
    time_to_target_s_ = trainingS();
    acc_at_target_ = acc;
    loss_at_target_ = loss;
  }
  std::optional<double> timeToTargetS() const { return time_to_target_s_; }
  double accAtTarget() const { return acc_at_target_; }
  double lossAtTarget() const { return loss_at_target_; }  // -1: none reported

  void countRegroup() { ++regroups_; }
  std::uint64_t regroups() const { return regroups_; }

  // What a standby head follows (coordinator_state.cc): the training clock, the regroups
  // and the events. changes() grows with each event, regroup and the training's start
  // (what is worth sending again).
  nlohmann::json state() const;
  std::uint64_t changes() const { return events_.size() + regroups_ + (training() ? 1 : 0); }
  // A promoted standby's log goes on from state(), taken age_s ago: the training clock
  // (events' t_s, time_to_target_s, elapsed_s) runs on from the primary's, its regroups
  // and events come first. DataLoss when the state is malformed (nothing changed).
  Status resume(const nlohmann::json& state, double age_s);

  static double secondsSince(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

 private:
  bool print_;
  Clock::time_point started_ = Clock::now();
  std::optional<Clock::time_point> training_started_;
  std::optional<double> time_to_target_s_;
  double acc_at_target_ = -1;  // the report that reached the target (later ones may dip)
  double loss_at_target_ = -1;
  std::uint64_t regroups_ = 0;
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace groupsgd::coordinator
