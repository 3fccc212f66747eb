// ZeroMQ plumbing shared by every role: sockets with safe options (bounded LINGER,
// inbound size limit, ROUTER_MANDATORY), multipart send/receive that never throws, and
// RpcClient, a request/reply client with a deadline on every call (lazy-pirate: a timed-out
// socket is replaced so a late answer can never be taken for the next call's).
// Thread rule: a socket, and so an RpcClient, is used by its owner thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/status.h"

namespace groupsgd {

// Which end of a CURVE handshake a socket is (docs/operations.md, "Securing the links").
enum class CurveSide { kNone, kServer, kClient };

struct SocketOptions {
  int linger_ms = 100;                         // never block shutdown on a dead peer
  std::int64_t max_message_bytes = 1ll << 30;  // per frame, enforced by libzmq
  int send_hwm = 1000;
  int recv_hwm = 1000;
  CurveSide curve_side = CurveSide::kNone;  // kNone: plain TCP
  CurveKeys curve;                          // used unless kNone
};
// Options for a socket that binds (server) or connects (client) with the given keys;
// plain when the keys are empty.
SocketOptions serverSocketOptions(const CurveKeys& keys);
SocketOptions clientSocketOptions(const CurveKeys& keys);

// Creates a socket with the options above; ROUTER sockets also get ROUTER_MANDATORY so
// a send to a departed peer fails loudly instead of vanishing.
Result<zmq::socket_t> makeSocket(zmq::context_t& ctx, zmq::socket_type type,
                                 const SocketOptions& opts = {});
// Binds and returns the resolved endpoint (port 0 / '*' becomes the real port).
Result<std::string> bindSocket(zmq::socket_t& sock, const std::string& endpoint);
Status connectSocket(zmq::socket_t& sock, const std::string& endpoint);

// Sends frames as one multipart message, optionally prefixed by a ROUTER routing id.
// Non-blocking: a full queue or an unknown peer is an error, never a hang.
Status sendFrames(zmq::socket_t& sock, std::vector<zmq::message_t>&& frames,
                  const zmq::message_t* routing_id = nullptr);
// Receives one whole multipart message (call after poll said readable).
Result<std::vector<zmq::message_t>> recvFrames(zmq::socket_t& sock);

// A ROUTER-received message split into the peer's routing id and the rest.
struct RoutedFrames {
  zmq::message_t routing_id;
  std::vector<zmq::message_t> frames;
};
Result<RoutedFrames> recvRouted(zmq::socket_t& sock);

// Sends an OutMessage to a ROUTER peer (copying the routing id).
Status replyTo(zmq::socket_t& sock, const zmq::message_t& routing_id, OutMessage&& msg);
// The same, a large dense tensor in parts of part_bytes (OutMessage::toParts).
Status replyInParts(zmq::socket_t& sock, const zmq::message_t& routing_id, OutMessage&& msg,
                    std::uint32_t part_bytes);
// Sends each message of a sequence (parts) in order; stops at the first failure.
Status sendSequence(zmq::socket_t& sock, std::vector<std::vector<zmq::message_t>>&& messages,
                    const zmq::message_t* routing_id = nullptr);

class RpcClient {
 public:
  RpcClient(zmq::context_t& ctx, std::string endpoint, MessageLimits limits,
            SocketOptions opts = {});
  ~RpcClient();
  RpcClient(RpcClient&&) = default;
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;
  const std::string& endpoint() const { return endpoint_; }
  const SocketOptions& options() const { return opts_; }
  // Sends msg and waits up to timeout for one reply; an ErrorReply comes back as its
  // Status. Any failure resets the socket. A CURVE client hears at once when the server
  // refuses its key (kPermissionDenied, "... refused this key ..."; handshake_monitor.h)
  // instead of waiting out the timeout.
  Result<InMessage> call(OutMessage&& msg, std::chrono::milliseconds timeout);
  // Like call(), but an ErrorReply is returned as a message, not as a Status.
  Result<InMessage> callRaw(OutMessage&& msg, std::chrono::milliseconds timeout);
  // The pieces of a call, for requests and replies sent in parts: send one message
  // without waiting; receive the next message until the deadline (decoded; an error
  // reply is returned as a message). Any failure, and a timeout, resets the socket, as
  // does reset() (a caller that stops reading a reply half way must call it).
  Status send(std::vector<zmq::message_t>&& frames);
  Result<InMessage> receive(std::chrono::steady_clock::time_point deadline);
  void reset();

 private:
  Status ensureSocket();
  Result<InMessage> receiveUntil(std::chrono::steady_clock::time_point deadline,
                                 const std::string& within);
  zmq::context_t& ctx_;
  std::string endpoint_;
  MessageLimits limits_;
  SocketOptions opts_;
  std::optional<zmq::socket_t> sock_;
  std::optional<zmq::socket_t> monitor_;  // sock_'s handshake events (CURVE clients only)
};

// Converts an ErrorReply message into its Status (kOk if msg is no error).
Status statusFromError(const InMessage& msg);

}  // namespace groupsgd
