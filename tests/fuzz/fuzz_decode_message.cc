// Fuzz target: the message codec a peer's bytes reach first. The input is cut into
// ZeroMQ frames (fuzz_check.h's length-prefixed scheme), decoded with limits, and when the
// decoder accepts it every tensor is read into a buffer of its announced size.
// Oracles: no crash or sanitizer report; an accepted message's wire size is the sum of its
// frames; readTensor refuses a buffer of the wrong size and an index past the last tensor.
#include <cstring>

#include "fuzz_check.h"
#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/message.h"

using namespace groupsgd;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  MessageLimits limits;
  limits.job_id = 1;
  limits.max_tensor_bytes = 64u << 10;  // small, so one input stays fast
  limits.max_frames = 64;
  const auto pieces = fuzz::splitFrames(data, size, limits.max_frames + 1);
  std::vector<zmq::message_t> frames;
  std::uint64_t total = 0;
  for (const auto& p : pieces) {
    frames.emplace_back(p.data(), p.size());
    total += p.size();
  }
  auto msg = decodeMessage(std::move(frames), limits);
  if (!msg) {
    FUZZ_CHECK(!msg.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(msg->wireBytes() == total);
  (void)bodyKindName(msg->kind());
  std::vector<float> out;
  for (std::size_t i = 0; i < msg->tensorCount(); ++i) {
    const std::uint64_t n = msg->tensorElements(i);
    FUZZ_CHECK(n <= limits.max_tensor_bytes / 4);
    out.assign(n, 0.0f);
    // May refuse a bad compressed payload; must not crash.
    (void)msg->readTensor(i, out, decodePayload);
    (void)msg->tensorEncoding(i);
    out.assign(n + 1, 0.0f);
    FUZZ_CHECK(!msg->readTensor(i, out, decodePayload).isOk());
  }
  FUZZ_CHECK(!msg->readTensor(msg->tensorCount(), out, decodePayload).isOk());
  return 0;
}
