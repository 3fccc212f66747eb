// The group optimizer's learning-rate schedule, a function of the run's samples applied
// (not of steps, so adaptive batch sizes and regroups do not bend it): constant, linear
// warm-up then linear decay, warm-up then cosine decay, or step decay
// (docs/config.md, "Learning-rate schedules").
// Thread rule: a plain value and pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "group.capnp.h"

namespace groupsgd::groupps {

enum class LrScheduleKind { kConstant, kWarmupLinear, kCosine, kStep };

// Names are "constant", "warmup_linear", "cosine", "step"; parse returns false otherwise.
bool parseLrScheduleKind(std::string_view text, LrScheduleKind* out);
const char* lrScheduleKindName(LrScheduleKind kind);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  double base_lr = 0.1;
  // Every kind: the lr rises linearly from 0 to base_lr over the first warmup_samples.
  std::uint64_t warmup_samples = 0;
  // warmup_linear, cosine: the lr reaches min_lr here and stays there.
  std::uint64_t decay_end_samples = 0;
  double min_lr = 0;  // no kind goes below it after the warm-up
  // step: lr = base_lr * step_gamma^floor(samples / step_samples).
  std::uint64_t step_samples = 0;
  double step_gamma = 0.1;

  bool decays() const {
    return kind == LrScheduleKind::kWarmupLinear || kind == LrScheduleKind::kCosine;
  }
};

// Why the schedule cannot be used ("" when it can): a decaying kind without an end past
// its warm-up, step without step_samples or with a gamma outside (0, 1], a min_lr
// outside [0, base_lr], a base_lr that is not positive.
std::string lrScheduleProblem(const LrSchedule& s);

// The learning rate after `samples` samples applied (the schedule must be usable).
double learningRateAt(const LrSchedule& s, std::uint64_t samples);

// Its form in GroupConfig (schemas/group.capnp), the only translation to and from the wire.
void toProto(const LrSchedule& s, proto::LrSchedule::Builder out);
LrSchedule fromProto(proto::LrSchedule::Reader in);

}  // namespace groupsgd::groupps
