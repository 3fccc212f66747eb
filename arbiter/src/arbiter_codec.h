// One arbiter message <-> one ZeroMQ frame (schemas/arbiter.capnp). Decoding
// copies the frame into aligned words and reads it within small traversal and
// nesting limits. Thread rule: free functions and a value type; any thread.
#pragma once

#include <cstdint>
#include <memory>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <zmq.hpp>

#include "arbiter.capnp.h"
#include "groupsgd/common/status.h"

namespace groupsgd::arbiter {

inline constexpr std::uint16_t kArbiterProtocolVersion = 1;
inline constexpr std::size_t kMaxArbiterMessageBytes = 16u << 10;

// A builder whose root is an ArbiterMessage with the identity fields filled in.
struct ArbiterOut {
  ArbiterOut(std::uint64_t job_id, std::uint64_t worker_id, std::uint64_t seq);
  capnp::MallocMessageBuilder builder;
  proto::ArbiterMessage::Builder root;
  zmq::message_t frame();
};

// A decoded message; root() is valid while this lives.
class ArbiterIn {
 public:
  static Result<ArbiterIn> decode(const zmq::message_t& frame);
  proto::ArbiterMessage::Reader root() const { return root_; }

 private:
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  proto::ArbiterMessage::Reader root_;
};

}  // namespace groupsgd::arbiter
