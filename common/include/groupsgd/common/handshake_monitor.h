// What a CURVE client hears when the server refuses its key. libzmq reports a refused
// handshake only to a socket monitor (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, with the ZAP
// status code); without one the client's messages just wait and the caller sees a
// timeout. RpcClient (transport.h) watches its CURVE sockets with these.
// Thread rule: the monitor socket belongs to the thread that owns the watched socket.
#pragma once

#include <string>

#include <zmq.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd {

// Starts monitoring sock's failed authentications; returns the socket the events arrive
// on (a PAIR on an inproc address of ctx). Call before connecting sock.
Result<zmq::socket_t> watchHandshake(zmq::context_t& ctx, zmq::socket_t& sock);

// Reads the events waiting on monitor (never blocks). A refusal by the server's ZAP
// handler (status 400, or any but 300) is kPermissionDenied, "the daemon at ENDPOINT
// refused this key (not in its allow-list)"; a temporary one (300) is kUnavailable, so a
// caller may retry; no refusal is ok.
Status handshakeRefusal(zmq::socket_t& monitor, const std::string& endpoint);

// The status for a ZAP status code sent back to a refused client (exposed for tests).
Status zapRefusalStatus(int zap_status, const std::string& endpoint);

}  // namespace groupsgd
