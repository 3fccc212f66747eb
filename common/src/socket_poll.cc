#include "groupsgd/common/socket_poll.h"

#include <array>
#include <cerrno>
#include <string>

namespace groupsgd {

Result<std::uint32_t> pollReadable(std::span<zmq::socket_t* const> socks,
                                   std::chrono::milliseconds timeout) {
  if (socks.size() > 32) return invalidArgument("more than 32 sockets to poll");
  std::array<zmq::pollitem_t, 32> items{};
  std::array<std::size_t, 32> index{};
  std::size_t count = 0;
  for (std::size_t k = 0; k < socks.size(); ++k) {
    if (socks[k] == nullptr) continue;
    items[count] = {socks[k]->handle(), 0, ZMQ_POLLIN, 0};
    index[count++] = k;
  }
  try {
    zmq::poll(items.data(), count, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::uint32_t{0};
    return unavailable(std::string("poll failed: ") + e.what());
  }
  std::uint32_t ready = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if ((items[i].revents & ZMQ_POLLIN) != 0) ready |= 1u << index[i];
  }
  return ready;
}

}  // namespace groupsgd
