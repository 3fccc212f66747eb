#include "group_server_setup.h"

#include "groupsgd/codec/compression_spec.h"

namespace groupsgd::daemon {

groupps::GroupServerConfig groupServerConfig(const DaemonConfig& cfg, std::uint32_t group_id,
                                             const std::string& central_endpoint,
                                             const CurveKeys& curve) {
  groupps::GroupServerConfig g;
  g.group_id = group_id;
  g.central_endpoint = central_endpoint;
  g.optimizer = cfg.optimizer;
  g.exchange_period = cfg.exchangePeriod();
  g.step_deadline_ms = cfg.step_deadline_ms;
  g.max_grad_norm = cfg.max_grad_norm;
  g.quarantine_after = cfg.quarantine_after;
  g.quarantine_window_ms = static_cast<std::uint32_t>(cfg.quarantine_window_s * 1000);
  g.delta_compression = *parseCompressionSpec(cfg.compress_deltas);  // validated
  g.limits.job_id = cfg.job_id;
  g.curve = curve;
  return g;
}

}  // namespace groupsgd::daemon
