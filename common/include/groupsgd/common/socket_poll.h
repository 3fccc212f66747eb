// Waiting for ZeroMQ sockets to become readable, with the one rule every serving loop
// needs: a signal (EINTR) is not an error, just an early return with nothing to read.
// Thread rule: call from the thread that owns the sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include <zmq.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd {

// Which sockets have a message after waiting up to `timeout`: bit k for socks[k] (at
// most 32; null entries are skipped); 0 when none did in time or a signal cut the wait
// short. A real poll failure (a context shut down, a bad socket) is an error.
Result<std::uint32_t> pollReadable(std::span<zmq::socket_t* const> socks,
                                   std::chrono::milliseconds timeout);

// Two sockets (bit 0: first, bit 1: second, which may be null).
inline Result<std::uint32_t> pollReadable(zmq::socket_t& first, zmq::socket_t* second,
                                          std::chrono::milliseconds timeout) {
  zmq::socket_t* const both[] = {&first, second};
  return pollReadable(std::span<zmq::socket_t* const>(both), timeout);
}

// One socket: true when it has a message.
inline Result<bool> pollReadable(zmq::socket_t& sock, std::chrono::milliseconds timeout) {
  auto ready = pollReadable(sock, nullptr, timeout);
  if (!ready) return ready.status();
  return *ready != 0;
}

}  // namespace groupsgd
