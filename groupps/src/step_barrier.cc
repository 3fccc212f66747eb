#include "groupsgd/groupps/step_barrier.h"

#include <algorithm>

#include "groupsgd/kernels/ops.h"

namespace groupsgd::groupps {
namespace {
constexpr std::size_t kStreamSumBytes = std::size_t{16} << 20;
}  // namespace

StepBarrier::StepBarrier(std::size_t param_count) : sum_(param_count, 0.0f) {
  unwritten_.reset(sum_.size());
}

void StepBarrier::configure(const std::vector<MemberInfo>& members) {
  std::unordered_map<std::uint64_t, MemberInfo> next;
  std::unordered_map<std::uint64_t, bool> next_active;
  for (const auto& m : members) {
    next[m.worker_id] = m;
    auto it = active_.find(m.worker_id);
    next_active[m.worker_id] = it != active_.end() && it->second;
  }
  members_ = std::move(next);
  active_ = std::move(next_active);
}

const MemberInfo* StepBarrier::member(std::uint64_t worker_id) const {
  auto it = members_.find(worker_id);
  return it == members_.end() ? nullptr : &it->second;
}

void StepBarrier::remove(std::uint64_t worker_id) {
  members_.erase(worker_id);
  active_.erase(worker_id);
}

void StepBarrier::markActive(std::uint64_t worker_id) {
  if (members_.count(worker_id) != 0) active_[worker_id] = true;
}

void StepBarrier::excuse(std::uint64_t worker_id) {
  if (auto it = active_.find(worker_id); it != active_.end()) it->second = false;
}

std::size_t StepBarrier::activeCount() const {
  return static_cast<std::size_t>(
      std::count_if(active_.begin(), active_.end(), [](const auto& a) { return a.second; }));
}

bool StepBarrier::hasArrived(std::uint64_t worker_id) const {
  return std::find(arrived_.begin(), arrived_.end(), worker_id) != arrived_.end();
}

Status StepBarrier::checkAdd(std::uint64_t worker_id, std::uint32_t batch_size,
                             std::size_t size) const {
  if (size != sum_.size()) {
    return invalidArgument("gradient of " + std::to_string(size) + " elements, model has " +
                           std::to_string(sum_.size()));
  }
  if (batch_size == 0) return invalidArgument("gradient of an empty batch");
  if (hasArrived(worker_id)) {
    return failedPrecondition("worker " + std::to_string(worker_id) +
                              " already pushed for this step");
  }
  return Status::ok();
}

void StepBarrier::ensureClear() {
  if (!dirty_) return;
  unwritten_.reset(sum_.size());  // nothing to clear: written ranges are stored into
  dirty_ = false;
}

void StepBarrier::clearAfterClose() { ensureClear(); }

bool StepBarrier::takeRange(std::size_t offset, std::size_t size) {
  ensureClear();
  return unwritten_.take(offset, offset + size, [this](std::size_t lo, std::size_t hi) {
    std::fill(sum_.begin() + static_cast<std::ptrdiff_t>(lo),
              sum_.begin() + static_cast<std::ptrdiff_t>(hi), 0.0f);
  });
}

void StepBarrier::zeroUnwritten() {
  unwritten_.takeAll([this](std::size_t lo, std::size_t hi) {
    std::fill(sum_.begin() + static_cast<std::ptrdiff_t>(lo),
              sum_.begin() + static_cast<std::ptrdiff_t>(hi), 0.0f);
  });
}

void StepBarrier::accumulate(std::uint32_t batch_size, std::span<const float> part,
                             std::size_t offset) {
  const auto into = std::span<float>(sum_).subspan(offset, part.size());
  if (takeRange(offset, part.size())) {
    kernels::scaleInto(static_cast<float>(batch_size), part, into);
  } else {
    kernels::axpy(static_cast<float>(batch_size), part, into);
  }
}

void StepBarrier::addPart(std::uint32_t batch_size, std::span<const float> part,
                          std::size_t offset) {
  accumulate(batch_size, part, offset);
}

kernels::FiniteAdd StepBarrier::addPartIfFinite(std::uint32_t batch_size,
                                                std::span<const float> part, std::size_t offset) {
  const auto into = std::span<float>(sum_).subspan(offset, part.size());
  if (!takeRange(offset, part.size())) {
    return kernels::axpyIfFinite(static_cast<float>(batch_size), part, into);
  }
  // A sum larger than the cache is read from memory by the optimizer anyway: stored
  // around the cache, saving the read of every line before it is overwritten.
  const bool stream = sum_.size() * sizeof(float) >= kStreamSumBytes;
  const kernels::FiniteAdd r =
      kernels::storeIfFinite(static_cast<float>(batch_size), part, into, stream);
  // Not stored past a non-finite block: that rest holds an older step's values, and is
  // written now, so it must read zero.
  std::fill(into.begin() + static_cast<std::ptrdiff_t>(r.added), into.end(), 0.0f);
  return r;
}

void StepBarrier::removePart(std::uint32_t batch_size, std::span<const float> part,
                             std::size_t offset) {
  kernels::axpy(-static_cast<float>(batch_size), part,
                std::span<float>(sum_).subspan(offset, part.size()));
}

Status StepBarrier::commit(std::uint64_t worker_id, std::uint32_t batch_size, float loss) {
  GSGD_RETURN_IF_ERROR(checkAdd(worker_id, batch_size, sum_.size()));
  recordAdd(worker_id, batch_size, loss);
  return Status::ok();
}

Status StepBarrier::skip(std::uint64_t worker_id) {
  if (hasArrived(worker_id)) {
    return failedPrecondition("worker " + std::to_string(worker_id) +
                              " already pushed for this step");
  }
  ensureClear();  // a step of skips closes with a zero sum (zeroed at the close)
  arrived_.push_back(worker_id);
  markActive(worker_id);
  return Status::ok();
}

void StepBarrier::recordAdd(std::uint64_t worker_id, std::uint32_t batch_size, float loss) {
  samples_ += batch_size;
  loss_sum_ += static_cast<double>(loss) * batch_size;
  arrived_.push_back(worker_id);
  markActive(worker_id);
}

Status StepBarrier::add(std::uint64_t worker_id, std::uint32_t batch_size, float loss,
                        std::span<const float> grad) {
  GSGD_RETURN_IF_ERROR(checkAdd(worker_id, batch_size, grad.size()));
  accumulate(batch_size, grad, 0);
  recordAdd(worker_id, batch_size, loss);
  return Status::ok();
}

Status StepBarrier::add(std::uint64_t worker_id, std::uint32_t batch_size, float loss,
                        const TensorView& grad) {
  GSGD_RETURN_IF_ERROR(checkAdd(worker_id, batch_size, grad.size));
  std::size_t off = 0;
  for (const auto& part : grad.parts) {
    accumulate(batch_size, part, off);
    off += part.size();
  }
  recordAdd(worker_id, batch_size, loss);
  return Status::ok();
}

bool StepBarrier::complete() const {
  if (arrived_.empty()) return false;
  for (const auto& [id, active] : active_) {
    if (active && !hasArrived(id)) return false;
  }
  return true;
}

std::vector<std::uint64_t> StepBarrier::missing() const {
  std::vector<std::uint64_t> out;
  for (const auto& [id, active] : active_) {
    if (active && !hasArrived(id)) out.push_back(id);
  }
  return out;
}

StepBarrier::Closed StepBarrier::closeUnscaled(std::span<float>* sum, float* scale) {
  Closed c;
  c.samples = samples_;
  c.mean_loss =
      samples_ == 0 ? 0.0f : static_cast<float>(loss_sum_ / static_cast<double>(samples_));
  c.reported = std::move(arrived_);
  ensureClear();  // a close right after the last close: all of it unwritten
  if (c.reported.empty()) {
    std::fill(sum_.begin(), sum_.end(), 0.0f);  // nothing arrived
    unwritten_.reset(0);
  } else {
    zeroUnwritten();  // what nobody's gradient covered sums to zero
  }
  *scale = samples_ > 0 ? 1.0f / static_cast<float>(samples_) : 1.0f;
  *sum = sum_;
  dirty_ = true;  // the next add() clears the buffer first
  arrived_.clear();
  samples_ = 0;
  loss_sum_ = 0;
  return c;
}

StepBarrier::Closed StepBarrier::closeInPlace(std::span<const float>* mean) {
  std::span<float> sum;
  float scale = 1.0f;
  Closed c = closeUnscaled(&sum, &scale);
  if (c.samples > 0) kernels::scale(sum, scale);
  *mean = sum;
  return c;
}

StepBarrier::Closed StepBarrier::close(std::span<float> mean) {
  std::span<const float> in_place;
  Closed c = closeInPlace(&in_place);
  kernels::copy(in_place, mean);
  return c;
}

}  // namespace groupsgd::groupps
