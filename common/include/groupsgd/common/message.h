// The message codec: one Cap'n Proto header frame followed by raw tensor frames.
// OutMessage builds a header and attaches immutable payloads (sent without copying);
// decodeMessage() validates received frames (protocol version, job, traversal limits,
// frame sizes against the header) before any field or byte is used. Compressed tensors
// travel as their encoded bytes: the codecs are not known here (groupsgd::codec,
// tensor_codec.h, decodes them).
// Thread rule: an OutMessage / InMessage belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <zmq.hpp>

#include "envelope.capnp.h"
#include "groupsgd/common/payload.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/tensor_view.h"

namespace groupsgd {

// 2: large dense tensors travel as a sequence of part messages (Header.part).
inline constexpr std::uint16_t kProtocolVersion = 2;
// Tensors travel in chunks of at most this size: one huge frame serialises the
// connection and forces a huge receive allocation (see docs/protocol.md).
inline constexpr std::uint32_t kDefaultChunkBytes = 4u << 20;

// A dense tensor of more bytes than this travels as a sequence of part messages of this
// size (the last may be shorter), so the receiver can check, sum and forward one part
// while the next is on the wire (docs/protocol.md, "Parts"; the size is measured in
// docs/benchmarks.md).
inline constexpr std::uint32_t kDefaultPartBytes = 1u << 20;
// At most this many parts per tensor: a larger tensor gets larger parts (a sender queues
// all of its parts at once, and ZeroMQ's queues hold 1000 messages).
inline constexpr std::uint32_t kMaxParts = 512;
// Parts of a push a member sends before the group PS grants the rest (flow control).
inline constexpr std::uint32_t kPushWindowParts = 2;

struct MessageLimits {
  std::uint64_t job_id = 1;
  bool any_job = false;  // a multi-job daemon's front: every job id passes (it routes by job)
  std::uint64_t max_header_bytes = 64u << 10;
  std::uint64_t max_tensor_bytes = 1ull << 30;  // per tensor
  std::uint32_t max_tensors = 4;
  std::uint32_t max_frames = 4096;
  std::uint64_t traversal_limit_words = 16u << 10;  // header only: small
  int nesting_limit = 16;
  std::uint64_t max_part_bytes = 64u << 20;  // one part's tensor slice ("oversize" above)
  std::uint32_t max_parts = kMaxParts;
};

// Where one part message's slice goes in the whole tensor (Header.part).
struct PartPosition {
  std::uint32_t index = 0;
  std::uint32_t count = 0;
  std::uint64_t offset = 0;  // elements
  std::uint64_t total_elements = 0;
};

// Elements per part for a tensor of `total` elements sent with parts of `part_bytes`
// (at least kMaxParts-th of the tensor, a whole number of floats).
std::uint64_t partElementsFor(std::uint64_t total, std::uint32_t part_bytes);

using ProtoHeader = proto::Header;
using BodyKind = proto::Header::Body::Which;
const char* bodyKindName(BodyKind kind);
const char* encodingName(proto::Encoding encoding);  // "dense", "fp16", "topk", "sign"

// Turns a compressed payload into exactly out.size() float32 elements, or says why not
// (groupsgd::decodePayload, in the codec library, is the one with the kernels' codecs).
using PayloadDecoder = Status (*)(proto::Encoding encoding, std::span<const std::uint8_t> payload,
                                  std::span<float> out);

class OutMessage {
 public:
  explicit OutMessage(std::uint64_t job_id, std::uint64_t sender_id = 0);
  OutMessage(OutMessage&&) = default;
  OutMessage& operator=(OutMessage&&) = default;

  proto::Header::Builder header() { return header_; }
  // Attaches a float32 tensor; the payload is kept alive until ZeroMQ has sent it.
  void addTensor(Payload payload, std::uint32_t chunk_bytes = kDefaultChunkBytes);
  // Attaches a compressed float32 tensor of `elements` elements (kernels::Compressor's
  // bytes; toWire() in tensor_codec.h names its encoding).
  void addEncodedTensor(std::shared_ptr<const std::vector<std::uint8_t>> bytes,
                        proto::Encoding encoding, std::uint64_t elements,
                        std::uint32_t chunk_bytes = kDefaultChunkBytes);
  // Serialises the header and turns payloads into zero-copy frames. Consumes *this.
  std::vector<zmq::message_t> toFrames() &&;
  // Like toFrames(), but a message whose one tensor is dense and larger than part_bytes
  // becomes a sequence of part messages (each the same header with Header.part set and
  // one slice of the tensor, zero-copy); anything else is one message. Consumes *this.
  std::vector<std::vector<zmq::message_t>> toParts(std::uint32_t part_bytes) &&;
  // Part i of n of the one dense tensor attached (elements_per_part each, the last
  // shorter): one message, zero-copy. Can be called any number of times; header fields
  // may be changed between calls. For senders that produce the tensor part by part.
  std::vector<zmq::message_t> partFrames(std::uint32_t index, std::uint64_t elements_per_part);
  // Parts the attached dense tensor makes with elements_per_part elements each.
  std::uint32_t partCount(std::uint64_t elements_per_part) const;

 private:
  std::unique_ptr<capnp::MallocMessageBuilder> builder_;
  proto::Header::Builder header_;
  struct Attached {
    std::shared_ptr<const void> owner;  // keeps the bytes alive while ZeroMQ sends them
    const char* data = nullptr;
    std::uint64_t bytes = 0;
    std::uint64_t elements = 0;
    proto::Encoding encoding = proto::Encoding::DENSE;
    std::uint32_t chunk = kDefaultChunkBytes;
  };
  std::vector<Attached> tensors_;
  void describeTensors();
};

// Builds an ErrorReply header for the given status (common in every server).
OutMessage makeErrorReply(std::uint64_t job_id, std::uint64_t sender_id, const Status& status);

class InMessage {
 public:
  proto::Header::Reader header() const { return reader_->getRoot<proto::Header>(); }
  BodyKind kind() const { return header().getBody().which(); }
  std::size_t tensorCount() const { return tensor_frames_.size(); }
  std::uint64_t tensorElements(std::size_t i) const;
  // Writes tensor i into out; fails unless it has exactly out.size() elements. A
  // compressed tensor goes through `decode` (which validates its payload: indices,
  // lengths, values) and is refused when there is none: pass decodePayload wherever a
  // sender may compress.
  Status readTensor(std::size_t i, std::span<float> out, PayloadDecoder decode = nullptr) const;
  // Tensor i in place: the dense chunks as spans into the frames, no copy. A chunk that
  // is not 4-byte aligned or splits a float, and a compressed tensor (decoded), are
  // copied into buffers this message owns. Same checks as readTensor; valid while the
  // message lives.
  Result<TensorView> viewTensor(std::size_t i, std::size_t elements,
                                PayloadDecoder decode = nullptr) const;
  proto::Encoding tensorEncoding(std::size_t i) const;
  // Set when this message is one part of a tensor sent in parts (checked by
  // decodeMessage: index < count, slice inside the tensor, one dense tensor).
  const std::optional<PartPosition>& part() const { return part_; }
  // Bytes of the whole message (header + tensors), for metrics.
  std::uint64_t wireBytes() const { return wire_bytes_; }

 private:
  friend Result<InMessage> decodeMessage(std::vector<zmq::message_t>&& frames,
                                         const MessageLimits& limits);
  kj::Array<capnp::word> header_words_;  // aligned copy: frames are not 8-byte aligned
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  std::vector<std::vector<zmq::message_t>> tensor_frames_;  // per tensor, its chunks
  std::uint64_t wire_bytes_ = 0;
  mutable std::vector<std::vector<float>> owned_;  // viewTensor's copies (rare path)
  std::optional<PartPosition> part_;
};

// frames = [header, tensor chunk frames...] (routing frames already removed).
// Checks: a parsable header within limits, protocol version, job id, tensor count,
// frame count and every frame's size against the TensorInfo list.
Result<InMessage> decodeMessage(std::vector<zmq::message_t>&& frames, const MessageLimits& limits);

}  // namespace groupsgd
