// The synchronous step of one group: which members must report, who has, and the
// batch-size-weighted sum of their gradients. Knows nothing about sockets or time, so
// the barrier and averaging rules are unit-tested directly.
// Thread rule: owned by the group PS thread; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "groupsgd/common/status.h"
#include "groupsgd/common/tensor_view.h"
#include "groupsgd/groupps/unwritten_ranges.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::groupps {

// What happens to a member after its next gradient (mirrors proto::Directive).
enum class Leaving { kNo, kReassign, kStop };

struct MemberInfo {
  std::uint64_t worker_id = 0;
  std::uint32_t batch_size = 0;    // assigned batch (the real weight is the pushed batch)
  std::uint64_t epoch = 0;         // pushes from an older epoch are refused
  Leaving leaving = Leaving::kNo;  // its next gradient is its last in this group
  std::string public_key{};        // CURVE key it registered with ("" = no CURVE)
};

class StepBarrier {
 public:
  explicit StepBarrier(std::size_t param_count);

  // Replaces the member list. Members that stay keep their "active" flag; gradients that
  // already arrived for the open step stay in it (a drained member's last step counts).
  void configure(const std::vector<MemberInfo>& members);
  const MemberInfo* member(std::uint64_t worker_id) const;
  // Removes one member (after its last gradient); its arrival, if any, stays in the step.
  void remove(std::uint64_t worker_id);
  std::size_t memberCount() const { return members_.size(); }
  // A member becomes active when it first pulls; only active members are waited for.
  void markActive(std::uint64_t worker_id);
  // A member a step closed without: not waited for until it is marked active again.
  void excuse(std::uint64_t worker_id);
  bool hasArrived(std::uint64_t worker_id) const;
  // Members waited for (active, not excused).
  std::size_t activeCount() const;
  std::size_t arrivals() const { return arrived_.size(); }

  // Adds one gradient of batch_size samples to the open step (caller checked size,
  // finiteness and membership).
  Status add(std::uint64_t worker_id, std::uint32_t batch_size, float loss,
             std::span<const float> grad);
  // The same from a gradient seen in place in its message's frames (no copy first).
  Status add(std::uint64_t worker_id, std::uint32_t batch_size, float loss, const TensorView& grad);
  // A gradient arriving in parts: each part is summed as it arrives (addPart), taken out
  // again if the push is refused or dropped before its last part (removePart: the sum is
  // restored up to rounding), and the push counts as arrived once whole (commit).
  void addPart(std::uint32_t batch_size, std::span<const float> part, std::size_t offset);
  // addPart for a part not yet checked, in one pass (kernels::axpyIfFinite): adds nothing
  // from the first block holding a NaN or an infinity on (added < part.size()).
  kernels::FiniteAdd addPartIfFinite(std::uint32_t batch_size, std::span<const float> part,
                                     std::size_t offset);
  void removePart(std::uint32_t batch_size, std::span<const float> part, std::size_t offset);
  Status commit(std::uint64_t worker_id, std::uint32_t batch_size, float loss);
  // A member that skipped this step (its gradient was not finite): arrived, so not
  // waited for, with no weight in the mean; a step of skips only closes with samples 0
  // (and a zero sum, scale 1).
  Status skip(std::uint64_t worker_id);
  // True when at least one gradient arrived and every active member has reported.
  bool complete() const;
  // Members that are active but have not reported (for "late" accounting).
  std::vector<std::uint64_t> missing() const;

  struct Closed {
    std::uint64_t samples = 0;
    float mean_loss = 0;
    std::vector<std::uint64_t> reported;  // workers whose gradients are in the mean
  };
  // Writes the weighted mean gradient sum_i b_i g_i / sum_i b_i into mean and opens the
  // next step. Requires arrivals() > 0.
  Closed close(std::span<float> mean);
  // The same without a copy: the mean is computed in the barrier's own buffer and
  // returned; it stays valid until the next add().
  Closed closeInPlace(std::span<const float>* mean);
  // The same, unscaled: *sum is the weighted sum, *scale the factor (1 / samples) that
  // makes it the mean; the caller scales it part by part (the group PS does, fused with
  // the optimizer and the reply). Valid until clearAfterClose() or the next add.
  Closed closeUnscaled(std::span<float>* sum, float* scale);
  // Opens the next step's sum (otherwise the next add does it): marks it all unwritten,
  // without touching the buffer.
  void clearAfterClose();

 private:
  // The open step's sum is what was written into it: a range nothing was written into yet
  // holds an older step's values and is stored into (b * g, what adding into zero gives
  // exactly), or zeroed at the close. A closed step's sum lives in the same buffer until
  // the next add.
  Status checkAdd(std::uint64_t worker_id, std::uint32_t batch_size, std::size_t size) const;
  void accumulate(std::uint32_t batch_size, std::span<const float> part, std::size_t offset);
  void recordAdd(std::uint64_t worker_id, std::uint32_t batch_size, float loss);

  std::unordered_map<std::uint64_t, MemberInfo> members_;
  std::unordered_map<std::uint64_t, bool> active_;
  std::vector<std::uint64_t> arrived_;
  void ensureClear();
  // Marks [offset, offset + size) of the sum written: true when it was all unwritten (store
  // into it); otherwise its unwritten pieces were zeroed (add into it).
  bool takeRange(std::size_t offset, std::size_t size);
  void zeroUnwritten();
  std::vector<float> sum_;     // the open step's sum, or the closed step's mean (no arrivals)
  UnwrittenRanges unwritten_;  // of sum_ in the open step
  bool dirty_ = false;         // sum_ holds a closed step's mean
  std::uint64_t samples_ = 0;
  double loss_sum_ = 0;
};

}  // namespace groupsgd::groupps
