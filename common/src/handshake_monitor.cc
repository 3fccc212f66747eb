#include "groupsgd/common/handshake_monitor.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "groupsgd/common/transport.h"

namespace groupsgd {

Result<zmq::socket_t> watchHandshake(zmq::context_t& ctx, zmq::socket_t& sock) {
  static std::atomic<std::uint64_t> next{0};
  const std::string address = "inproc://groupsgd-handshake-" + std::to_string(::getpid()) + "-" +
                              std::to_string(next.fetch_add(1));
  if (zmq_socket_monitor(sock.handle(), address.c_str(), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) {
    return unavailable(std::string("cannot monitor a socket: ") + zmq_strerror(zmq_errno()));
  }
  try {
    zmq::socket_t monitor(ctx, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(address);
    return monitor;
  } catch (const zmq::error_t& e) {
    (void)zmq_socket_monitor(sock.handle(), nullptr, 0);
    return unavailable(std::string("cannot monitor a socket: ") + e.what());
  }
}

Status zapRefusalStatus(int zap_status, const std::string& endpoint) {
  if (zap_status == 300) {
    return unavailable("the daemon at " + endpoint +
                       " could not check this key now (ZAP status 300); retrying");
  }
  std::string why =
      zap_status == 400 ? "not in its allow-list" : "ZAP status " + std::to_string(zap_status);
  return permissionDenied("the daemon at " + endpoint + " refused this key (" + why + ")");
}

Status handshakeRefusal(zmq::socket_t& monitor, const std::string& endpoint) {
  Status refusal;
  // Each event is two frames: 2 bytes event, 4 bytes value (here the ZAP status), then
  // the peer's address.
  auto frames = recvFrames(monitor);
  while (frames) {
    if (!frames->empty() && (*frames)[0].size() >= 6) {
      std::uint16_t event = 0;
      std::uint32_t value = 0;
      std::memcpy(&event, (*frames)[0].data(), sizeof event);
      std::memcpy(&value, static_cast<const char*>((*frames)[0].data()) + 2, sizeof value);
      if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        refusal = zapRefusalStatus(static_cast<int>(value), endpoint);
      }
    }
    frames = recvFrames(monitor);
  }
  return refusal;
}

}  // namespace groupsgd
