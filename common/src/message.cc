#include "groupsgd/common/message.h"

#include <kj/exception.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace groupsgd {
namespace {

// ZeroMQ free callback: drops the reference the frame held on its payload.
void releasePayload(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

proto::Encoding toProto(kernels::Encoding e) {
  switch (e) {
    case kernels::Encoding::kDense: return proto::Encoding::DENSE;
    case kernels::Encoding::kFp16: return proto::Encoding::FP16;
    case kernels::Encoding::kTopK: return proto::Encoding::TOPK;
    case kernels::Encoding::kSign: return proto::Encoding::SIGN;
  }
  return proto::Encoding::DENSE;
}

kernels::Encoding fromProto(proto::Encoding e) {
  switch (e) {
    case proto::Encoding::FP16: return kernels::Encoding::kFp16;
    case proto::Encoding::TOPK: return kernels::Encoding::kTopK;
    case proto::Encoding::SIGN: return kernels::Encoding::kSign;
    default: return kernels::Encoding::kDense;
  }
}

// Byte length a tensor of n float32 elements may have in an encoding: exact for the
// fixed-size layouts, a range for top-k (its count is in the payload).
bool plausibleLength(proto::Encoding e, std::uint64_t n, std::uint64_t bytes) {
  switch (e) {
    case proto::Encoding::DENSE: return bytes == n * 4;
    case proto::Encoding::FP16: return bytes == n * 2;
    case proto::Encoding::TOPK: return bytes >= 4 && bytes <= 4 + n * 8;
    case proto::Encoding::SIGN: return bytes == kernels::encodedBytes(kernels::Encoding::kSign, n, 0);
  }
  return false;
}

std::uint64_t chunkCount(std::uint64_t bytes, std::uint64_t chunk) {
  return bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
}

}  // namespace

const char* bodyKindName(BodyKind kind) {
  switch (kind) {
    case BodyKind::ACK: return "ack";
    case BodyKind::ERROR: return "error";
    case BodyKind::REGISTER: return "register";
    case BodyKind::ASSIGNMENT: return "assignment";
    case BodyKind::HEARTBEAT: return "heartbeat";
    case BodyKind::HEARTBEAT_REPLY: return "heartbeatReply";
    case BodyKind::LEAVE: return "leave";
    case BodyKind::PULL: return "pull";
    case BodyKind::PUSH: return "push";
    case BodyKind::STEP_REPLY: return "stepReply";
    case BodyKind::GROUP_CONFIG: return "groupConfig";
    case BodyKind::FLUSH: return "flush";
    case BodyKind::GROUP_STATS_QUERY: return "groupStatsQuery";
    case BodyKind::GROUP_STATS: return "groupStats";
    case BodyKind::DELTA_PUSH: return "deltaPush";
    case BodyKind::FETCH: return "fetch";
    case BodyKind::MODEL_REPLY: return "modelReply";
    case BodyKind::CENTRAL_STATS_QUERY: return "centralStatsQuery";
    case BodyKind::CENTRAL_STATS: return "centralStats";
    case BodyKind::CHECKPOINT_REQUEST: return "checkpointRequest";
    case BodyKind::CHECKPOINT_DONE: return "checkpointDone";
  }
  return "unknown";
}

OutMessage::OutMessage(std::uint64_t job_id, std::uint64_t sender_id)
    : builder_(std::make_unique<capnp::MallocMessageBuilder>()),
      header_(builder_->initRoot<proto::Header>()) {
  header_.setProtocolVersion(kProtocolVersion);
  header_.setJobId(job_id);
  header_.setSenderId(sender_id);
}

void OutMessage::addTensor(Payload payload, std::uint32_t chunk_bytes) {
  Attached a;
  a.data = reinterpret_cast<const char*>(payload->data());
  a.bytes = payload->size() * sizeof(float);
  a.elements = payload->size();
  a.chunk = chunk_bytes == 0 ? kDefaultChunkBytes : chunk_bytes;
  a.owner = std::move(payload);
  tensors_.push_back(std::move(a));
}

void OutMessage::addEncodedTensor(std::shared_ptr<const std::vector<std::uint8_t>> bytes,
                                  kernels::Encoding encoding, std::uint64_t elements,
                                  std::uint32_t chunk_bytes) {
  Attached a;
  a.data = reinterpret_cast<const char*>(bytes->data());
  a.bytes = bytes->size();
  a.elements = elements;
  a.encoding = encoding;
  a.chunk = chunk_bytes == 0 ? kDefaultChunkBytes : chunk_bytes;
  a.owner = std::move(bytes);
  tensors_.push_back(std::move(a));
}

std::vector<zmq::message_t> OutMessage::toFrames() && {
  auto infos = header_.initTensors(static_cast<unsigned>(tensors_.size()));
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const Attached& t = tensors_[i];
    auto info = infos[static_cast<unsigned>(i)];
    info.setDtype(proto::DType::FLOAT32);
    info.setEncoding(toProto(t.encoding));
    info.setElements(t.elements);
    info.setByteLength(t.bytes);
    info.setChunkBytes(t.chunk);
  }
  std::vector<zmq::message_t> frames;
  kj::Array<capnp::word> words = capnp::messageToFlatArray(*builder_);
  auto bytes = words.asBytes();
  frames.emplace_back(bytes.begin(), bytes.size());
  for (auto& t : tensors_) {
    const std::uint64_t total = t.bytes;
    const char* base = t.data;
    const std::uint32_t chunk = t.chunk;
    const std::uint64_t n = chunkCount(total, chunk);
    for (std::uint64_t c = 0; c < n; ++c) {
      const std::uint64_t off = c * chunk;
      const std::uint64_t len = std::min<std::uint64_t>(chunk, total - off);
      if (len == 0) {
        frames.emplace_back();
        continue;
      }
      // Zero copy: the frame points into the payload and keeps it alive.
      frames.emplace_back(const_cast<char*>(base + off), len, &releasePayload,
                          new std::shared_ptr<const void>(t.owner));
    }
  }
  return frames;
}

OutMessage makeErrorReply(std::uint64_t job_id, std::uint64_t sender_id, const Status& status) {
  OutMessage m(job_id, sender_id);
  auto err = m.header().getBody().initError();
  err.setCode(static_cast<std::uint16_t>(status.code()));
  err.setMessage(status.message());
  return m;
}

std::uint64_t InMessage::tensorElements(std::size_t i) const {
  return header().getTensors()[static_cast<unsigned>(i)].getElements();
}

Status InMessage::readTensor(std::size_t i, std::span<float> out) const {
  if (i >= tensor_frames_.size()) {
    return invalidArgument("message carries " + std::to_string(tensor_frames_.size()) +
                           " tensors, tensor " + std::to_string(i) + " was expected");
  }
  auto info = header().getTensors()[static_cast<unsigned>(i)];
  if (info.getDtype() != proto::DType::FLOAT32) {
    return invalidArgument("tensor " + std::to_string(i) + " is not float32");
  }
  if (info.getElements() != out.size()) {
    return invalidArgument("tensor has " + std::to_string(info.getElements()) +
                           " elements, expected " + std::to_string(out.size()));
  }
  if (info.getEncoding() == proto::Encoding::DENSE) {
    auto* dst = reinterpret_cast<char*>(out.data());
    for (const auto& f : tensor_frames_[i]) {
      if (f.size() == 0) continue;  // an empty tensor's one frame; dst may be null then
      std::memcpy(dst, f.data(), f.size());  // frames may be unaligned: copy, never cast
      dst += f.size();
    }
    return Status::ok();
  }
  // Compressed: gather the chunks into one buffer, then decode (which validates).
  thread_local std::vector<std::uint8_t> gathered;
  gathered.resize(info.getByteLength());
  std::size_t off = 0;
  for (const auto& f : tensor_frames_[i]) {
    if (f.size() == 0) continue;  // an empty payload: gathered.data() may be null
    std::memcpy(gathered.data() + off, f.data(), f.size());
    off += f.size();
  }
  kernels::KernelStatus k = kernels::decode(fromProto(info.getEncoding()), gathered, out);
  if (k.ok()) return Status::ok();
  return Status(k.code == kernels::KernelStatus::Code::kDataLoss ? Code::kDataLoss
                                                                 : Code::kInvalidArgument,
                std::string(kernels::encodingName(fromProto(info.getEncoding()))) +
                    " tensor: " + k.message);
}

Result<TensorView> InMessage::viewTensor(std::size_t i, std::size_t elements) const {
  if (i >= tensor_frames_.size()) {
    return invalidArgument("message carries " + std::to_string(tensor_frames_.size()) +
                           " tensors, tensor " + std::to_string(i) + " was expected");
  }
  auto info = header().getTensors()[static_cast<unsigned>(i)];
  if (info.getElements() != elements) {
    return invalidArgument("tensor has " + std::to_string(info.getElements()) +
                           " elements, expected " + std::to_string(elements));
  }
  TensorView view;
  view.size = elements;
  if (elements == 0) return view;
  if (info.getEncoding() != proto::Encoding::DENSE || info.getChunkBytes() % sizeof(float) != 0) {
    // Decode (compressed) or reassemble (chunks splitting a float) into one owned buffer.
    auto& buf = owned_.emplace_back(elements);
    GSGD_RETURN_IF_ERROR(readTensor(i, buf));
    view.parts.emplace_back(buf.data(), buf.size());
    return view;
  }
  view.parts.reserve(tensor_frames_[i].size());
  for (const auto& f : tensor_frames_[i]) {
    const std::size_t n = f.size() / sizeof(float);
    if (n == 0) continue;
    if (reinterpret_cast<std::uintptr_t>(f.data()) % alignof(float) == 0) {
      view.parts.emplace_back(static_cast<const float*>(f.data()), n);
    } else {  // ZeroMQ's large frames are malloc'd and aligned; this is the fallback
      auto& buf = owned_.emplace_back(n);
      std::memcpy(buf.data(), f.data(), f.size());
      view.parts.emplace_back(buf.data(), n);
    }
  }
  return view;
}

kernels::Encoding InMessage::tensorEncoding(std::size_t i) const {
  return fromProto(header().getTensors()[static_cast<unsigned>(i)].getEncoding());
}

Result<InMessage> decodeMessage(std::vector<zmq::message_t>&& frames, const MessageLimits& limits) {
  if (frames.empty()) return invalidArgument("empty message");
  if (frames.size() > limits.max_frames) return resourceExhausted("too many frames");
  const zmq::message_t& head = frames[0];
  if (head.size() == 0 || head.size() % sizeof(capnp::word) != 0) {
    return invalidArgument("header frame of " + std::to_string(head.size()) +
                           " bytes is not a whole number of 8-byte words");
  }
  if (head.size() > limits.max_header_bytes) {
    return resourceExhausted("header frame of " + std::to_string(head.size()) + " bytes over limit");
  }
  InMessage msg;
  msg.header_words_ = kj::heapArray<capnp::word>(head.size() / sizeof(capnp::word));
  std::memcpy(msg.header_words_.begin(), head.data(), head.size());
  capnp::ReaderOptions opts;
  opts.traversalLimitInWords = limits.traversal_limit_words;
  opts.nestingLimit = limits.nesting_limit;
  std::uint64_t total_tensor_bytes = 0;
  try {
    msg.reader_ = std::make_unique<capnp::FlatArrayMessageReader>(msg.header_words_.asPtr(), opts);
    auto h = msg.reader_->getRoot<proto::Header>();
    // Traverse everything once now, so later field access cannot hit a bad pointer.
    (void)h.totalSize();
    if (h.getProtocolVersion() != kProtocolVersion) {
      return invalidArgument("protocol version " + std::to_string(h.getProtocolVersion()) +
                             " not supported (expected " + std::to_string(kProtocolVersion) + ")");
    }
    if (h.getJobId() != limits.job_id) {
      return permissionDenied("job " + std::to_string(h.getJobId()) + " is not this job (" +
                              std::to_string(limits.job_id) + ")");
    }
    auto infos = h.getTensors();
    if (infos.size() > limits.max_tensors) return resourceExhausted("too many tensors");
    std::size_t next = 1;
    msg.tensor_frames_.resize(infos.size());
    for (unsigned i = 0; i < infos.size(); ++i) {
      auto info = infos[i];
      const std::uint64_t elem_size = info.getDtype() == proto::DType::FLOAT16 ? 2 : 4;
      if (info.getDtype() != proto::DType::FLOAT32) {
        return invalidArgument("tensor " + std::to_string(i) + ": only float32 tensors are used");
      }
      if (info.getByteLength() > limits.max_tensor_bytes) {
        return resourceExhausted("tensor of " + std::to_string(info.getByteLength()) +
                                 " bytes over the limit of " +
                                 std::to_string(limits.max_tensor_bytes));
      }
      if (info.getElements() > limits.max_tensor_bytes / elem_size ||
          !plausibleLength(info.getEncoding(), info.getElements(), info.getByteLength())) {
        return invalidArgument("tensor byte length " + std::to_string(info.getByteLength()) +
                               " does not match " + std::to_string(info.getElements()) +
                               " elements");
      }
      if (info.getChunkBytes() == 0) return invalidArgument("tensor chunk size is zero");
      const std::uint64_t n = chunkCount(info.getByteLength(), info.getChunkBytes());
      if (next + n > frames.size()) {
        return invalidArgument("header announces more tensor frames than were received");
      }
      std::uint64_t seen = 0;
      for (std::uint64_t c = 0; c < n; ++c) {
        const std::uint64_t expect =
            std::min<std::uint64_t>(info.getChunkBytes(), info.getByteLength() - c * info.getChunkBytes());
        if (frames[next].size() != expect) {
          return invalidArgument("tensor " + std::to_string(i) + " frame " + std::to_string(c) +
                                 " has " + std::to_string(frames[next].size()) +
                                 " bytes, header says " + std::to_string(expect));
        }
        seen += frames[next].size();
        msg.tensor_frames_[i].push_back(std::move(frames[next]));
        ++next;
      }
      total_tensor_bytes += seen;
    }
    if (next != frames.size()) {
      return invalidArgument("message has " + std::to_string(frames.size() - next) +
                             " frames more than its header describes");
    }
  } catch (const kj::Exception& e) {
    return invalidArgument(std::string("malformed header: ") + e.getDescription().cStr());
  }
  msg.wire_bytes_ = head.size() + total_tensor_bytes;
  return msg;
}

}  // namespace groupsgd
