// CURVE for a daemon: loads its key pair and allow-list and starts the ZAP handler in its
// ZeroMQ context. Call before any socket of that context binds: libzmq admits every
// client while no handler is running. The daemon's own public key is always admitted
// (its roles connect to each other with it). A node daemon with its own pair names the
// head's public key (curve.server_key_file): it connects to the head with it and admits
// it with a daemon's rights. On the head, allow-list lines labelled `node` are node
// daemons' keys: admitted, and given a daemon's rights (keys.daemons).
// Thread rule: main thread, at startup.
#pragma once

#include <memory>

#include <zmq.hpp>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::daemon {

struct CurveSetup {
  CurveKeys keys;                      // empty when CURVE is not configured
  std::unique_ptr<ZapHandler> zap;     // null when CURVE is not configured
  std::shared_ptr<AllowList> daemons;  // keys.daemons, replaced on reload
};

Result<CurveSetup> startCurve(zmq::context_t& ctx, const DaemonConfig& cfg);

// Reads curve_allow_file again and replaces the live list (plus the daemon's own key):
// new handshakes and every further message of an open connection see the new list. A
// file that does not parse changes nothing. Without CURVE: failed_precondition.
// daemons (CurveSetup::daemons; null: not reloaded) gets the new node keys too.
Result<AllowListChange> reloadAllowList(const DaemonConfig& cfg, const ZapHandler* zap,
                                        const std::string& own_public_key,
                                        AllowList* daemons = nullptr);

}  // namespace groupsgd::daemon
