// Immutable tensor payloads shared between a producer and ZeroMQ's zero-copy send.
// A Payload is never modified after it is handed to a message; PayloadPool reuses a
// buffer only when nothing else (no message in flight) still holds it.
// Thread rule: a PayloadPool belongs to one thread; Payloads may be read from any.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace groupsgd {

using Payload = std::shared_ptr<const std::vector<float>>;

class PayloadPool {
 public:
  // A buffer of n floats that nobody else references (contents unspecified).
  std::shared_ptr<std::vector<float>> acquire(std::size_t n);

 private:
  std::vector<std::shared_ptr<std::vector<float>>> buffers_;
};

}  // namespace groupsgd
