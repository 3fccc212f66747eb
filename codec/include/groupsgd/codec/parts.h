// Receiving a tensor sent in parts (docs/protocol.md, "Parts"). PartStream
// checks the order of one stream's parts: they must arrive in order, each
// exactly once, slices adjacent, with the same count and total as part 0;
// anything else (a missing, repeated or mismatched part) is refused.
// PartAssembler keeps a stream's part messages until the whole tensor is there
// and then shows it in place as one TensorView, summing squares part by part as
// they arrive (the check of a whole tensor overlaps its receipt). Thread rule:
// owned by one thread; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "groupsgd/common/message.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/tensor_view.h"

namespace groupsgd {

class PartStream {
 public:
  // Checks that `p` (a part of `elements` elements) is the next part of this
  // stream. Part 0 starts the stream. On failure the stream is unchanged.
  Status accept(const PartPosition& p, std::uint64_t elements);
  bool started() const { return next_ > 0; }
  bool complete() const { return next_ > 0 && next_ == count_; }
  std::uint32_t received() const { return next_; }
  std::uint32_t count() const { return count_; }
  std::uint64_t totalElements() const { return total_; }
  void reset() { *this = PartStream(); }

 private:
  std::uint32_t next_ = 0;
  std::uint32_t count_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t received_elements_ = 0;
};

class PartAssembler {
 public:
  // Adds a part message (msg.part() set). Fails (and leaves the assembler as it
  // was) when it is not the next part of the stream or its slice cannot be
  // read.
  Status add(InMessage&& msg);
  bool complete() const { return stream_.complete(); }
  bool started() const { return stream_.started(); }
  // The first part: its header is the whole message's header.
  const InMessage& first() const { return parts_.front(); }
  // The whole tensor in place (valid while the assembler holds the parts).
  TensorView view() const;
  // Sum of squares of every element received (not finite iff an element is
  // not).
  double sumSquares() const { return squares_; }
  std::uint64_t totalElements() const { return stream_.totalElements(); }
  void clear();

 private:
  PartStream stream_;
  std::vector<InMessage> parts_;
  std::vector<TensorView> views_;
  double squares_ = 0;
};

// The one tensor of a received message, in place: tensor 0 of a whole message (decoded
// with decodePayload when compressed) or, when `assembled` is set, the tensor assembled
// from its parts. Either must hold `elements` floats.
Result<TensorView> viewReceivedTensor(const InMessage& msg, const TensorView* assembled,
                                      std::size_t elements);

}  // namespace groupsgd

#include <chrono>
#include <span>

namespace groupsgd {

class RpcClient;

// Reads tensor 0 of a reply into out (out.size() elements): at once when the
// reply is whole (decoded with decodePayload when compressed), else part by part,
// each copied into place as it arrives on rpc until the deadline. On failure rpc is
// reset, so the rest of the reply is never read as the answer to the next call.
Status receiveTensorInto(RpcClient& rpc, const InMessage& first, std::span<float> out,
                         std::chrono::steady_clock::time_point deadline);

}  // namespace groupsgd
