#include "groupsgd/daemon/curve_setup.h"

#include "groupsgd/common/log.h"

namespace groupsgd::daemon {
namespace {

// The head's key on a node with its own pair; the daemon's own key otherwise.
Result<std::string> serverKeyOf(const DaemonConfig& cfg, const std::string& own_public_key) {
  if (cfg.curve_server_key_file.empty()) return own_public_key;
  return loadPublicKeyFile(cfg.curve_server_key_file);
}

// Keys with a daemon's rights: its own, the head's (a node with its own pair) and the
// allow-list's node keys.
Result<std::set<std::string>> daemonKeysOf(const DaemonConfig& cfg, const std::string& own,
                                           const std::string& server) {
  auto nodes = loadNodeKeys(cfg.curve_allow_file);
  if (!nodes) return nodes.status();
  nodes->insert(own);
  nodes->insert(server);
  return nodes;
}

}  // namespace

Result<CurveSetup> startCurve(zmq::context_t& ctx, const DaemonConfig& cfg) {
  CurveSetup setup;
  if (cfg.curve_secret_key_file.empty()) return setup;
  if (!zmq_has("curve")) return failedPrecondition("this libzmq was built without CURVE");
  auto own = loadSecretKeyFile(cfg.curve_secret_key_file);
  if (!own) return own.status();
  auto server = serverKeyOf(cfg, own->public_key);
  if (!server) return server.status();
  auto allowed = loadAllowList(cfg.curve_allow_file);
  if (!allowed) return allowed.status();
  auto daemons = daemonKeysOf(cfg, own->public_key, *server);
  if (!daemons) return daemons.status();
  const std::size_t listed = allowed->size();
  allowed->insert(daemons->begin(), daemons->end());
  auto zap = ZapHandler::start(ctx, std::make_shared<AllowList>(std::move(*allowed)));
  if (!zap) return zap.status();
  setup.daemons = std::make_shared<AllowList>(std::move(*daemons));
  setup.keys = CurveKeys{own->public_key, own->secret_key, *server, (*zap)->allowList()};
  setup.keys.daemons = setup.daemons;
  setup.zap = std::move(*zap);
  GSGD_INFO("CURVE on every TCP link: "
            << (*server == own->public_key ? "server key " : "own key ") << own->public_key
            << (*server == own->public_key ? "" : ", head's key " + *server) << ", " << listed
            << " client key(s) allowed, " << setup.daemons->size() - 1 << " other daemon key(s)");
  return setup;
}

Result<AllowListChange> reloadAllowList(const DaemonConfig& cfg, const ZapHandler* zap,
                                        const std::string& own_public_key, AllowList* daemons) {
  if (zap == nullptr) return failedPrecondition("CURVE is off: there is no allow-list");
  auto allowed = loadAllowList(cfg.curve_allow_file);
  if (!allowed) return allowed.status();
  auto server = serverKeyOf(cfg, own_public_key);
  if (!server) return server.status();
  auto node_keys = daemonKeysOf(cfg, own_public_key, *server);
  if (!node_keys) return node_keys.status();
  allowed->insert(node_keys->begin(), node_keys->end());  // the daemons' own roles and nodes
  const AllowListChange c = zap->allowList()->replace(std::move(*allowed));
  if (daemons != nullptr) (void)daemons->replace(std::move(*node_keys));
  GSGD_INFO("CURVE allow-list reloaded from " << cfg.curve_allow_file << ": " << c.added
                                              << " added, " << c.removed << " removed, " << c.size
                                              << " admitted");
  return c;
}

}  // namespace groupsgd::daemon
