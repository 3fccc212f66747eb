#include "groupsgd/codec/parts.h"

#include <string>

#include "groupsgd/codec/tensor_codec.h"

namespace groupsgd {

Status PartStream::accept(const PartPosition& p, std::uint64_t elements) {
  if (next_ == 0) {
    if (p.index != 0) {
      return invalidArgument("part " + std::to_string(p.index) +
                             " arrived before part 0 (missing parts)");
    }
  } else {
    if (p.index < next_) {
      return invalidArgument("part " + std::to_string(p.index) + " repeated (expected part " +
                             std::to_string(next_) + ")");
    }
    if (p.index > next_) {
      return invalidArgument("part " + std::to_string(p.index) + " arrived, part " +
                             std::to_string(next_) + " is missing");
    }
    if (p.count != count_ || p.total_elements != total_) {
      return invalidArgument("part " + std::to_string(p.index) + " says " +
                             std::to_string(p.count) + " parts of " +
                             std::to_string(p.total_elements) + " elements, part 0 said " +
                             std::to_string(count_) + " of " + std::to_string(total_));
    }
  }
  if (p.offset != received_elements_) {
    return invalidArgument("part " + std::to_string(p.index) + " starts at element " +
                           std::to_string(p.offset) + ", expected " +
                           std::to_string(received_elements_));
  }
  const std::uint64_t after = received_elements_ + elements;
  const bool last = p.index + 1 == p.count;
  if (after > p.total_elements || (last && after != p.total_elements) ||
      (!last && after == p.total_elements)) {
    return invalidArgument("part " + std::to_string(p.index) + " of " + std::to_string(p.count) +
                           " ends at element " + std::to_string(after) + " of " +
                           std::to_string(p.total_elements));
  }
  if (next_ == 0) {
    count_ = p.count;
    total_ = p.total_elements;
  }
  received_elements_ = after;
  ++next_;
  return Status::ok();
}

Status PartAssembler::add(InMessage&& msg) {
  if (!msg.part()) return invalidArgument("not a part message");
  const std::uint64_t elements = msg.tensorElements(0);
  PartStream next = stream_;
  GSGD_RETURN_IF_ERROR(next.accept(*msg.part(), elements));
  auto view = msg.viewTensor(0, elements);
  if (!view) return view.status();
  squares_ += groupsgd::sumSquares(*view);
  stream_ = next;
  views_.push_back(std::move(*view));
  parts_.push_back(std::move(msg));
  return Status::ok();
}

TensorView PartAssembler::view() const {
  TensorView all;
  all.size = stream_.totalElements();
  for (const auto& v : views_) all.parts.insert(all.parts.end(), v.parts.begin(), v.parts.end());
  return all;
}

Result<TensorView> viewReceivedTensor(const InMessage& msg, const TensorView* assembled,
                                      std::size_t elements) {
  if (assembled == nullptr) return msg.viewTensor(0, elements, decodePayload);
  if (assembled->size != elements) {
    return invalidArgument("tensor has " + std::to_string(assembled->size) +
                           " elements, expected " + std::to_string(elements));
  }
  return *assembled;
}

void PartAssembler::clear() {
  stream_.reset();
  parts_.clear();
  views_.clear();
  squares_ = 0;
}

}  // namespace groupsgd

#include "groupsgd/common/transport.h"

namespace groupsgd {
namespace {

Status copyPart(const InMessage& msg, PartStream* stream, std::span<float> out) {
  if (!msg.part()) return invalidArgument("a part was expected");
  const PartPosition& p = *msg.part();
  if (p.total_elements != out.size()) {
    return invalidArgument("tensor has " + std::to_string(p.total_elements) +
                           " elements, expected " + std::to_string(out.size()));
  }
  const std::uint64_t elements = msg.tensorElements(0);
  GSGD_RETURN_IF_ERROR(stream->accept(p, elements));
  return msg.readTensor(0, out.subspan(p.offset, elements));
}

}  // namespace

Status receiveTensorInto(RpcClient& rpc, const InMessage& first, std::span<float> out,
                         std::chrono::steady_clock::time_point deadline) {
  if (!first.part()) return first.readTensor(0, out, decodePayload);
  PartStream stream;
  Status s = copyPart(first, &stream, out);
  while (s && !stream.complete()) {
    auto next = rpc.receive(deadline);
    if (!next) return next.status();  // rpc reset itself
    if (next->kind() != first.kind()) {
      s = invalidArgument(std::string("'") + bodyKindName(next->kind()) +
                          "' arrived in the middle of a reply sent in parts");
      break;
    }
    s = copyPart(*next, &stream, out);
  }
  if (!s) rpc.reset();
  return s;
}

}  // namespace groupsgd
