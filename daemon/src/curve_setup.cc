#include "groupsgd/daemon/curve_setup.h"

#include "groupsgd/common/log.h"

namespace groupsgd::daemon {

Result<CurveSetup> startCurve(zmq::context_t& ctx, const DaemonConfig& cfg) {
  CurveSetup setup;
  if (cfg.curve_secret_key_file.empty()) return setup;
  if (!zmq_has("curve")) return failedPrecondition("this libzmq was built without CURVE");
  auto own = loadSecretKeyFile(cfg.curve_secret_key_file);
  if (!own) return own.status();
  auto allowed = loadAllowList(cfg.curve_allow_file);
  if (!allowed) return allowed.status();
  const std::size_t listed = allowed->size();
  allowed->insert(own->public_key);
  auto zap = ZapHandler::start(ctx, std::make_shared<AllowList>(std::move(*allowed)));
  if (!zap) return zap.status();
  setup.keys = CurveKeys{own->public_key, own->secret_key, own->public_key, (*zap)->allowList()};
  setup.zap = std::move(*zap);
  GSGD_INFO("CURVE on every TCP link: server key " << own->public_key << ", " << listed
                                                   << " client key(s) allowed");
  return setup;
}

Result<AllowListChange> reloadAllowList(const DaemonConfig& cfg, const ZapHandler* zap,
                                        const std::string& own_public_key) {
  if (zap == nullptr) return failedPrecondition("CURVE is off: there is no allow-list");
  auto allowed = loadAllowList(cfg.curve_allow_file);
  if (!allowed) return allowed.status();
  allowed->insert(own_public_key);  // the daemon's own roles and nodes
  const AllowListChange c = zap->allowList()->replace(std::move(*allowed));
  GSGD_INFO("CURVE allow-list reloaded from " << cfg.curve_allow_file << ": " << c.added
                                              << " added, " << c.removed << " removed, "
                                              << c.size << " admitted");
  return c;
}

}  // namespace groupsgd::daemon
