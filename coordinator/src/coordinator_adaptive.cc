// The coordinator's side of the adaptive controller's input: trainers' step timings.
#include <algorithm>

#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

void Coordinator::observeSteps(WorkerRecord& w, const InMessage& msg) {
  auto hb = msg.header().getBody().getHeartbeat();
  // The heartbeat's means cover the steps since the previous one (a new registration
  // starts its count again).
  const std::uint64_t steps = hb.getSteps();
  const double n = static_cast<double>(steps >= w.steps ? steps - w.steps : steps);
  w.total_compute_ms += n * hb.getComputeMs();
  w.total_comm_ms += n * hb.getCommMs();
  w.total_wait_ms += n * hb.getWaitMs();
  if (!adaptive_) return;
  auto recent = hb.getRecentSteps();
  if (recent.size() > 0) {
    for (auto st : recent) {
      adaptive_->observe(w.id, {st.getBatch(), st.getComputeMs(), st.getCommMs()}, st.getStep());
    }
  } else if (hb.getBatchSize() > 0 && hb.getComputeMs() > 0) {
    // A trainer that reports means only (the Python binding): one sample per heartbeat.
    adaptive_->observe(w.id, {hb.getBatchSize(), hb.getComputeMs(), hb.getCommMs()}, steps);
  }
  // Its first steps or a shift in its step times: judge now, not at the next window.
  if (hb.getSpeedChanged()) next_control_ = std::min(next_control_, Clock::now());
}

}  // namespace groupsgd::coordinator
