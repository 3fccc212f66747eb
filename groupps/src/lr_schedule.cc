#include "groupsgd/groupps/lr_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <utility>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::groupps {
namespace {

constexpr std::array<base::EnumName<LrScheduleKind>, 4> kNames{{
    {LrScheduleKind::kConstant, "constant"},
    {LrScheduleKind::kWarmupLinear, "warmup_linear"},
    {LrScheduleKind::kCosine, "cosine"},
    {LrScheduleKind::kStep, "step"},
}};

// Fraction of the decay [warmup, end) done at `samples`, in [0, 1].
double decayDone(const LrSchedule& s, std::uint64_t samples) {
  if (samples >= s.decay_end_samples) return 1.0;
  const double span = static_cast<double>(s.decay_end_samples - s.warmup_samples);
  return static_cast<double>(samples - s.warmup_samples) / span;
}

}  // namespace

bool parseLrScheduleKind(std::string_view text, LrScheduleKind* out) {
  return base::parseInto(kNames, text, out);
}

const char* lrScheduleKindName(LrScheduleKind kind) { return base::nameOf(kNames, kind); }

std::string lrScheduleProblem(const LrSchedule& s) {
  const std::string name = lrScheduleKindName(s.kind);
  if (!(s.base_lr > 0) || !std::isfinite(s.base_lr)) return "the learning rate must be > 0";
  if (!(s.min_lr >= 0) || s.min_lr > s.base_lr) {
    return "min_lr must be in [0, lr] (" + std::to_string(s.min_lr) + " with lr " +
           std::to_string(s.base_lr) + ")";
  }
  if (s.decays() && s.decay_end_samples == 0) {
    return "schedule " + name +
           " decays to min_lr at schedule_samples: set schedule_samples or max_samples";
  }
  if (s.decays() && s.decay_end_samples <= s.warmup_samples) {
    return "schedule " + name + " ends its decay at " + std::to_string(s.decay_end_samples) +
           " samples, not after its warm-up of " + std::to_string(s.warmup_samples);
  }
  if (s.kind == LrScheduleKind::kStep && s.step_samples == 0) {
    return "schedule step needs step_samples > 0";
  }
  if (s.kind == LrScheduleKind::kStep && !(s.step_gamma > 0 && s.step_gamma <= 1)) {
    return "step_gamma must be in (0, 1], got " + std::to_string(s.step_gamma);
  }
  return "";
}

double learningRateAt(const LrSchedule& s, std::uint64_t samples) {
  if (samples < s.warmup_samples) {
    return s.base_lr * static_cast<double>(samples) / static_cast<double>(s.warmup_samples);
  }
  switch (s.kind) {
    case LrScheduleKind::kConstant:
      return s.base_lr;
    case LrScheduleKind::kWarmupLinear:
      return s.base_lr + (s.min_lr - s.base_lr) * decayDone(s, samples);
    case LrScheduleKind::kCosine:
      return s.min_lr + (s.base_lr - s.min_lr) * 0.5 *
                            (1.0 + std::cos(std::numbers::pi * decayDone(s, samples)));
    case LrScheduleKind::kStep: {
      const double drops =
          std::floor(static_cast<double>(samples) /
                     static_cast<double>(std::max<std::uint64_t>(1, s.step_samples)));
      return std::max(s.min_lr, s.base_lr * std::pow(s.step_gamma, drops));
    }
  }
  return s.base_lr;
}

namespace {

constexpr std::array<std::pair<LrScheduleKind, proto::LrScheduleKind>, 4> kWire{{
    {LrScheduleKind::kConstant, proto::LrScheduleKind::CONSTANT},
    {LrScheduleKind::kWarmupLinear, proto::LrScheduleKind::WARMUP_LINEAR},
    {LrScheduleKind::kCosine, proto::LrScheduleKind::COSINE},
    {LrScheduleKind::kStep, proto::LrScheduleKind::STEP},
}};

}  // namespace

void toProto(const LrSchedule& s, proto::LrSchedule::Builder out) {
  for (const auto& [kind, wire] : kWire) {
    if (kind == s.kind) out.setKind(wire);
  }
  out.setBaseLr(static_cast<float>(s.base_lr));
  out.setWarmupSamples(s.warmup_samples);
  out.setDecayEndSamples(s.decay_end_samples);
  out.setMinLr(static_cast<float>(s.min_lr));
  out.setStepSamples(s.step_samples);
  out.setStepGamma(static_cast<float>(s.step_gamma));
}

LrSchedule fromProto(proto::LrSchedule::Reader in) {
  LrSchedule s;
  for (const auto& [kind, wire] : kWire) {
    if (wire == in.getKind()) s.kind = kind;
  }
  s.base_lr = in.getBaseLr();
  s.warmup_samples = in.getWarmupSamples();
  s.decay_end_samples = in.getDecayEndSamples();
  s.min_lr = in.getMinLr();
  s.step_samples = in.getStepSamples();
  s.step_gamma = in.getStepGamma();
  return s;
}

}  // namespace groupsgd::groupps
