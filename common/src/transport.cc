#include "groupsgd/common/transport.h"

#include <algorithm>

#include "groupsgd/common/deadline.h"
#include "groupsgd/common/handshake_monitor.h"
#include "groupsgd/common/interrupt.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/zap_handler.h"

namespace groupsgd {

namespace {

// The default options, with CURVE on `side` when keys are enabled.
SocketOptions curveSocketOptions(const CurveKeys& keys, CurveSide side) {
  SocketOptions o;
  if (keys.enabled()) {
    o.curve_side = side;
    o.curve = keys;
  }
  return o;
}

}  // namespace

SocketOptions serverSocketOptions(const CurveKeys& keys) {
  return curveSocketOptions(keys, CurveSide::kServer);
}

SocketOptions clientSocketOptions(const CurveKeys& keys) {
  return curveSocketOptions(keys, CurveSide::kClient);
}

Result<zmq::socket_t> makeSocket(zmq::context_t& ctx, zmq::socket_type type,
                                 const SocketOptions& opts) {
  try {
    zmq::socket_t sock(ctx, type);
    sock.set(zmq::sockopt::linger, opts.linger_ms);
    sock.set(zmq::sockopt::maxmsgsize, opts.max_message_bytes);
    sock.set(zmq::sockopt::sndhwm, opts.send_hwm);
    sock.set(zmq::sockopt::rcvhwm, opts.recv_hwm);
    if (type == zmq::socket_type::router) sock.set(zmq::sockopt::router_mandatory, 1);
    if (opts.curve_side == CurveSide::kServer) {
      sock.set(zmq::sockopt::zap_domain, kZapDomain);  // a non-empty domain: always ask ZAP
      sock.set(zmq::sockopt::curve_server, true);
      sock.set(zmq::sockopt::curve_secretkey, opts.curve.secret_key);
    } else if (opts.curve_side == CurveSide::kClient) {
      if (opts.curve.server_public_key.empty()) {
        return invalidArgument("a CURVE client needs the server's public key");
      }
      sock.set(zmq::sockopt::curve_serverkey, opts.curve.server_public_key);
      sock.set(zmq::sockopt::curve_publickey, opts.curve.public_key);
      sock.set(zmq::sockopt::curve_secretkey, opts.curve.secret_key);
    }
    return sock;
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("cannot create socket: ") + e.what());
  }
}

Result<std::string> bindSocket(zmq::socket_t& sock, const std::string& endpoint) {
  try {
    sock.bind(endpoint);
    return sock.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return unavailable("cannot bind " + endpoint + ": " + e.what());
  }
}

Status connectSocket(zmq::socket_t& sock, const std::string& endpoint) {
  try {
    sock.connect(endpoint);
    return Status::ok();
  } catch (const zmq::error_t& e) {
    return invalidArgument("cannot connect to " + endpoint + ": " + e.what());
  }
}

Status sendFrames(zmq::socket_t& sock, std::vector<zmq::message_t>&& frames,
                  const zmq::message_t* routing_id) {
  try {
    if (routing_id != nullptr) {
      zmq::message_t id(routing_id->data(), routing_id->size());
      if (!sock.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return unavailable("peer queue full");
      }
    }
    for (std::size_t i = 0; i < frames.size(); ++i) {
      auto flags = zmq::send_flags::dontwait;
      if (i + 1 < frames.size()) flags = flags | zmq::send_flags::sndmore;
      if (!sock.send(frames[i], flags)) return unavailable("peer queue full");
    }
    return Status::ok();
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return unavailable("peer has gone");
    return unavailable(std::string("send failed: ") + e.what());
  }
}

Result<std::vector<zmq::message_t>> recvFrames(zmq::socket_t& sock) {
  std::vector<zmq::message_t> frames;
  try {
    while (true) {
      zmq::message_t m;
      if (!sock.recv(m, zmq::recv_flags::dontwait)) {
        if (frames.empty()) return unavailable("nothing to receive");
        return internalError("multipart message cut short");
      }
      const bool more = m.more();
      frames.push_back(std::move(m));
      if (!more) break;
    }
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("receive failed: ") + e.what());
  }
  return frames;
}

Result<RoutedFrames> recvRouted(zmq::socket_t& sock) {
  auto frames = recvFrames(sock);
  if (!frames) return frames.status();
  if (frames->size() < 2) return invalidArgument("routed message without body");
  RoutedFrames r;
  r.routing_id = std::move(frames->front());
  r.frames.reserve(frames->size() - 1);
  for (std::size_t i = 1; i < frames->size(); ++i) r.frames.push_back(std::move((*frames)[i]));
  return r;
}

Status replyTo(zmq::socket_t& sock, const zmq::message_t& routing_id, OutMessage&& msg) {
  return sendFrames(sock, std::move(msg).toFrames(), &routing_id);
}

Status sendSequence(zmq::socket_t& sock, std::vector<std::vector<zmq::message_t>>&& messages,
                    const zmq::message_t* routing_id) {
  for (auto& frames : messages)
    GSGD_RETURN_IF_ERROR(sendFrames(sock, std::move(frames), routing_id));
  return Status::ok();
}

Status replyInParts(zmq::socket_t& sock, const zmq::message_t& routing_id, OutMessage&& msg,
                    std::uint32_t part_bytes) {
  return sendSequence(sock, std::move(msg).toParts(part_bytes), &routing_id);
}

Status statusFromError(const InMessage& msg) {
  if (msg.kind() != BodyKind::ERROR) return Status::ok();
  auto e = msg.header().getBody().getError();
  int code = e.getCode();
  if (code <= 0 || code > static_cast<int>(Code::kFinished))
    code = static_cast<int>(Code::kInternal);
  return Status(static_cast<Code>(code), e.getMessage().cStr());
}

RpcClient::RpcClient(zmq::context_t& ctx, std::string endpoint, MessageLimits limits,
                     SocketOptions opts)
    : ctx_(ctx), endpoint_(std::move(endpoint)), limits_(limits), opts_(std::move(opts)) {}

RpcClient::~RpcClient() { reset(); }

void RpcClient::reset() {
  if (sock_ && monitor_) {
    // Stop the monitor before closing its end: libzmq then sends nothing more to it.
    (void)zmq_socket_monitor(sock_->handle(), nullptr, 0);
  }
  monitor_.reset();
  // A request still queued (its peer was unreachable) dies with the socket: with the usual
  // linger libzmq still delivers it to a peer that comes up within linger_ms, after we
  // gave it up (a registration sent to a dead head reached its restarted successor as a
  // second registration nobody used, and the new head waited for that ghost to leave).
  if (sock_) sock_->set(zmq::sockopt::linger, 0);
  sock_.reset();
}

Status RpcClient::ensureSocket() {
  if (sock_) return Status::ok();
  auto s = makeSocket(ctx_, zmq::socket_type::dealer, opts_);
  if (!s) return s.status();
  std::optional<zmq::socket_t> monitor;
  if (opts_.curve_side == CurveSide::kClient) {
    auto m = watchHandshake(ctx_, *s);
    if (!m) return m.status();
    monitor.emplace(std::move(*m));
  }
  GSGD_RETURN_IF_ERROR(connectSocket(*s, endpoint_));
  sock_.emplace(std::move(*s));
  monitor_ = std::move(monitor);
  return Status::ok();
}

Status RpcClient::send(std::vector<zmq::message_t>&& frames) {
  GSGD_RETURN_IF_ERROR(ensureSocket());
  Status sent = sendFrames(*sock_, std::move(frames));
  if (!sent) reset();
  return sent;
}

Result<InMessage> RpcClient::receive(std::chrono::steady_clock::time_point deadline) {
  return receiveUntil(deadline, "in time");
}

Result<InMessage> RpcClient::receiveUntil(std::chrono::steady_clock::time_point deadline,
                                          const std::string& within) {
  if (!sock_) return unavailable("no request in flight to " + endpoint_);
  while (true) {
    const auto left = timeLeft(deadline);
    if (left.count() <= 0) {
      reset();  // a late answer must not be read as the next call's
      return unavailable("no answer from " + endpoint_ + " " + within);
    }
    if (interruptRequested()) {
      reset();  // the answer, if it comes, must not be read as the next call's
      return interruptedStatus();
    }
    // With an interrupt check (interrupt.h) in slices, so the caller hears it soon.
    auto ready = pollReadable(*sock_, monitor_ ? &*monitor_ : nullptr,
                              interruptCheckInstalled() ? std::min(left, kInterruptSlice) : left);
    if (!ready) {
      reset();
      return ready.status();
    }
    if ((*ready & 2u) != 0) {
      Status refused = handshakeRefusal(*monitor_, endpoint_);
      if (!refused) {
        reset();  // the daemon closed this connection; the next call starts afresh
        return refused;
      }
    }
    if ((*ready & 1u) == 0) continue;
    auto frames = recvFrames(*sock_);
    if (!frames) {
      reset();
      return frames.status();
    }
    auto msg = decodeMessage(std::move(*frames), limits_);
    if (!msg) reset();  // the rest of a bad reply must not be read as the next one
    return msg;
  }
}

Result<InMessage> RpcClient::callRaw(OutMessage&& msg, std::chrono::milliseconds timeout) {
  GSGD_RETURN_IF_ERROR(send(std::move(msg).toFrames()));
  return receiveUntil(std::chrono::steady_clock::now() + timeout,
                      "within " + std::to_string(timeout.count()) + " ms");
}

Result<InMessage> RpcClient::call(OutMessage&& msg, std::chrono::milliseconds timeout) {
  auto reply = callRaw(std::move(msg), timeout);
  if (!reply) return reply;
  Status err = statusFromError(*reply);
  if (!err) return err;
  return reply;
}

}  // namespace groupsgd
