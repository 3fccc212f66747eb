#include "groupsgd/daemon/group_server_setup.h"

#include <nlohmann/json.hpp>

#include "groupsgd/codec/compression_spec.h"
#include "groupsgd/daemon/config_options.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::daemon {

groupps::GroupServerConfig groupServerConfig(const DaemonConfig& cfg, std::uint32_t group_id,
                                             const std::string& central_endpoint,
                                             const CurveKeys& curve) {
  groupps::GroupServerConfig g;
  g.group_id = group_id;
  g.central_endpoint = central_endpoint;
  g.optimizer = cfg.optimizer;
  if (!cfg.optimizer_decay_1d && !cfg.external_model) {
    g.no_decay = kernels::oneDimParamRanges(cfg.model);
  }
  g.placement = cfg.optimizer_placement;
  g.exchange_period = cfg.exchangePeriod();
  g.step_deadline_ms = cfg.step_deadline_ms;
  g.exchange_timeout_ms = cfg.exchange_timeout_ms;
  g.max_grad_norm = cfg.max_grad_norm;
  g.quarantine_after = cfg.quarantine_after;
  g.quarantine_window_ms = static_cast<std::uint32_t>(cfg.quarantine_window_s * 1000);
  g.delta_compression = *parseCompressionSpec(cfg.compress_deltas);  // validated
  g.limits.job_id = cfg.job_id;
  g.curve = curve;
  return g;
}

groupps::LrSchedule lrScheduleOf(const DaemonConfig& cfg) {
  const LrScheduleOptions& o = cfg.lr_schedule;
  groupps::LrSchedule s;
  s.kind = o.kind;
  s.base_lr = cfg.optimizer.lr;
  s.warmup_samples = o.warmup_samples;
  s.decay_end_samples = o.schedule_samples != 0 ? o.schedule_samples : cfg.max_samples;
  s.min_lr = o.min_lr;
  s.step_samples = o.step_samples;
  s.step_gamma = o.step_gamma;
  return s;
}

std::string groupSettingsJson(const DaemonConfig& job) { return groupPsStartSettings(job).dump(); }

Status applyGroupSettings(const std::string& settings, DaemonConfig* node) {
  const auto j = nlohmann::json::parse(settings, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalidArgument("job settings are not a JSON object");
  DaemonConfig cfg = *node;
  GSGD_RETURN_IF_ERROR(applyJson(j, &cfg));
  if (auto spec = parseCompressionSpec(cfg.compress_deltas); !spec) return spec.status();
  *node = std::move(cfg);
  return Status::ok();
}

}  // namespace groupsgd::daemon
