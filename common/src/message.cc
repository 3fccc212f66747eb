#include "groupsgd/common/message.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include <kj/exception.h>

#include "groupsgd/base/enum_names.h"

namespace groupsgd {
namespace {

// ZeroMQ free callback: drops the reference the frame held on its payload.
void releasePayload(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

// Byte length a tensor of n float32 elements may have in an encoding: exact for the
// fixed-size layouts, a range for top-k (its count is in the payload).
bool plausibleLength(proto::Encoding e, std::uint64_t n, std::uint64_t bytes) {
  switch (e) {
    case proto::Encoding::DENSE:
      return bytes == n * 4;
    case proto::Encoding::FP16:
      return bytes == n * 2;
    case proto::Encoding::TOPK:
      return bytes >= 4 && bytes <= 4 + n * 8;
    case proto::Encoding::SIGN:
      return bytes == 4 + (n + 7) / 8;  // scale, then a bit each
  }
  return false;
}

std::uint64_t chunkCount(std::uint64_t bytes, std::uint64_t chunk) {
  return bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
}

}  // namespace

constexpr std::array<base::EnumName<BodyKind>, 25> kBodyKindNames{{
    {BodyKind::ACK, "ack"},
    {BodyKind::ERROR, "error"},
    {BodyKind::REGISTER, "register"},
    {BodyKind::ASSIGNMENT, "assignment"},
    {BodyKind::HEARTBEAT, "heartbeat"},
    {BodyKind::HEARTBEAT_REPLY, "heartbeatReply"},
    {BodyKind::LEAVE, "leave"},
    {BodyKind::PULL, "pull"},
    {BodyKind::PUSH, "push"},
    {BodyKind::STEP_REPLY, "stepReply"},
    {BodyKind::GROUP_CONFIG, "groupConfig"},
    {BodyKind::FLUSH, "flush"},
    {BodyKind::GROUP_STATS_QUERY, "groupStatsQuery"},
    {BodyKind::GROUP_STATS, "groupStats"},
    {BodyKind::DELTA_PUSH, "deltaPush"},
    {BodyKind::FETCH, "fetch"},
    {BodyKind::MODEL_REPLY, "modelReply"},
    {BodyKind::CENTRAL_STATS_QUERY, "centralStatsQuery"},
    {BodyKind::CENTRAL_STATS, "centralStats"},
    {BodyKind::CHECKPOINT_REQUEST, "checkpointRequest"},
    {BodyKind::CHECKPOINT_DONE, "checkpointDone"},
    {BodyKind::PUSH_CREDIT, "pushCredit"},
    {BodyKind::JOB_REDIRECT, "jobRedirect"},
    {BodyKind::DATA_CLAIM, "dataClaim"},
    {BodyKind::DATA_GRANT, "dataGrant"},
}};

constexpr std::array<base::EnumName<proto::Encoding>, 4> kWireEncodingNames{{
    {proto::Encoding::DENSE, "dense"},
    {proto::Encoding::FP16, "fp16"},
    {proto::Encoding::TOPK, "topk"},
    {proto::Encoding::SIGN, "sign"},
}};

const char* bodyKindName(BodyKind kind) { return base::nameOf(kBodyKindNames, kind); }

const char* encodingName(proto::Encoding encoding) {
  return base::nameOf(kWireEncodingNames, encoding);
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
                                  proto::Encoding encoding, std::uint64_t elements,
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

void OutMessage::describeTensors() {
  auto infos = header_.initTensors(static_cast<unsigned>(tensors_.size()));
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const Attached& t = tensors_[i];
    auto info = infos[static_cast<unsigned>(i)];
    info.setDtype(proto::DType::FLOAT32);
    info.setEncoding(t.encoding);
    info.setElements(t.elements);
    info.setByteLength(t.bytes);
    info.setChunkBytes(t.chunk);
  }
}

std::vector<zmq::message_t> OutMessage::toFrames() && {
  describeTensors();
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

std::uint64_t partElementsFor(std::uint64_t total, std::uint32_t part_bytes) {
  const std::uint64_t by_size = std::max<std::uint64_t>(1, part_bytes / sizeof(float));
  const std::uint64_t by_count = (total + kMaxParts - 1) / kMaxParts;
  return std::max(by_size, by_count);
}

std::uint32_t OutMessage::partCount(std::uint64_t elements_per_part) const {
  if (tensors_.size() != 1 || elements_per_part == 0) return 1;
  const std::uint64_t n = tensors_[0].elements;
  return static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, (n + elements_per_part - 1) / elements_per_part));
}

std::vector<zmq::message_t> OutMessage::partFrames(std::uint32_t index,
                                                   std::uint64_t elements_per_part) {
  const Attached& t = tensors_.at(0);
  const std::uint32_t count = partCount(elements_per_part);
  const std::uint64_t offset = static_cast<std::uint64_t>(index) * elements_per_part;
  const std::uint64_t len = std::min<std::uint64_t>(elements_per_part, t.elements - offset);
  auto part = header_.initPart();
  part.setIndex(index);
  part.setCount(count);
  part.setOffset(offset);
  part.setTotalElements(t.elements);
  if (!header_.hasTensors() || header_.getTensors().size() != 1) header_.initTensors(1);
  auto info = header_.getTensors()[0];
  info.setDtype(proto::DType::FLOAT32);
  info.setEncoding(proto::Encoding::DENSE);
  info.setElements(len);
  info.setByteLength(len * sizeof(float));
  info.setChunkBytes(static_cast<std::uint32_t>(len * sizeof(float)));
  std::vector<zmq::message_t> frames;
  kj::Array<capnp::word> words = capnp::messageToFlatArray(*builder_);
  auto bytes = words.asBytes();
  frames.emplace_back(bytes.begin(), bytes.size());
  frames.emplace_back(const_cast<char*>(t.data + offset * sizeof(float)), len * sizeof(float),
                      &releasePayload, new std::shared_ptr<const void>(t.owner));
  return frames;
}

std::vector<std::vector<zmq::message_t>> OutMessage::toParts(std::uint32_t part_bytes) && {
  std::vector<std::vector<zmq::message_t>> out;
  const bool parted = tensors_.size() == 1 && tensors_[0].encoding == proto::Encoding::DENSE &&
                      part_bytes > 0 && tensors_[0].bytes > part_bytes;
  if (!parted) {
    out.push_back(std::move(*this).toFrames());
    return out;
  }
  const std::uint64_t per = partElementsFor(tensors_[0].elements, part_bytes);
  const std::uint32_t n = partCount(per);
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(partFrames(i, per));
  return out;
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

Status InMessage::readTensor(std::size_t i, std::span<float> out, PayloadDecoder decode) const {
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
      if (f.empty()) continue;               // an empty tensor's one frame; dst may be null then
      std::memcpy(dst, f.data(), f.size());  // frames may be unaligned: copy, never cast
      dst += f.size();
    }
    return Status::ok();
  }
  if (decode == nullptr) {
    return invalidArgument(std::string("tensor ") + std::to_string(i) + " is " +
                           encodingName(info.getEncoding()) +
                           "-compressed and this receiver does not decode it");
  }
  // Compressed: gather the chunks into one buffer, then decode (which validates).
  thread_local std::vector<std::uint8_t> gathered;
  gathered.resize(info.getByteLength());
  std::size_t off = 0;
  for (const auto& f : tensor_frames_[i]) {
    if (f.empty()) continue;  // an empty payload: gathered.data() may be null
    std::memcpy(gathered.data() + off, f.data(), f.size());
    off += f.size();
  }
  return decode(info.getEncoding(), gathered, out);
}

Result<TensorView> InMessage::viewTensor(std::size_t i, std::size_t elements,
                                         PayloadDecoder decode) const {
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
    GSGD_RETURN_IF_ERROR(readTensor(i, buf, decode));
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

proto::Encoding InMessage::tensorEncoding(std::size_t i) const {
  return header().getTensors()[static_cast<unsigned>(i)].getEncoding();
}

namespace {

// Step 1: the frame count and the header frame's size, before anything is parsed.
Status checkFrameShape(const std::vector<zmq::message_t>& frames, const MessageLimits& limits) {
  if (frames.empty()) return invalidArgument("empty message");
  if (frames.size() > limits.max_frames) return resourceExhausted("too many frames");
  const zmq::message_t& head = frames[0];
  if (head.empty() || head.size() % sizeof(capnp::word) != 0) {
    return invalidArgument("header frame of " + std::to_string(head.size()) +
                           " bytes is not a whole number of 8-byte words");
  }
  if (head.size() > limits.max_header_bytes) {
    return resourceExhausted("header frame of " + std::to_string(head.size()) +
                             " bytes over limit");
  }
  return Status::ok();
}

// Step 3: the header is for this receiver (protocol version, job).
Status checkHeaderIdentity(proto::Header::Reader h, const MessageLimits& limits) {
  if (h.getProtocolVersion() != kProtocolVersion) {
    return invalidArgument("protocol version " + std::to_string(h.getProtocolVersion()) +
                           " not supported (expected " + std::to_string(kProtocolVersion) + ")");
  }
  if (!limits.any_job && h.getJobId() != limits.job_id) {
    return permissionDenied("job " + std::to_string(h.getJobId()) + " is not this job (" +
                            std::to_string(limits.job_id) + ")");
  }
  return Status::ok();
}

// Step 4, per tensor: its description is plausible within the limits.
Status checkTensorInfo(unsigned i, proto::TensorInfo::Reader info, const MessageLimits& limits) {
  const std::uint64_t elem_size = info.getDtype() == proto::DType::FLOAT16 ? 2 : 4;
  if (info.getDtype() != proto::DType::FLOAT32) {
    return invalidArgument("tensor " + std::to_string(i) + ": only float32 tensors are used");
  }
  if (info.getByteLength() > limits.max_tensor_bytes) {
    return resourceExhausted("tensor of " + std::to_string(info.getByteLength()) +
                             " bytes over the limit of " + std::to_string(limits.max_tensor_bytes));
  }
  if (info.getElements() > limits.max_tensor_bytes / elem_size ||
      !plausibleLength(info.getEncoding(), info.getElements(), info.getByteLength())) {
    return invalidArgument("tensor byte length " + std::to_string(info.getByteLength()) +
                           " does not match " + std::to_string(info.getElements()) + " elements");
  }
  if (info.getChunkBytes() == 0) return invalidArgument("tensor chunk size is zero");
  return Status::ok();
}

// Step 5, per tensor: exactly the frames its description announces, each of its size.
Status takeTensorFrames(unsigned i, proto::TensorInfo::Reader info,
                        std::vector<zmq::message_t>& frames, std::size_t* next,
                        std::vector<zmq::message_t>* out, std::uint64_t* bytes) {
  const std::uint64_t n = chunkCount(info.getByteLength(), info.getChunkBytes());
  if (*next + n > frames.size()) {
    return invalidArgument("header announces more tensor frames than were received");
  }
  for (std::uint64_t c = 0; c < n; ++c) {
    const std::uint64_t expect = std::min<std::uint64_t>(
        info.getChunkBytes(), info.getByteLength() - c * info.getChunkBytes());
    if (frames[*next].size() != expect) {
      return invalidArgument("tensor " + std::to_string(i) + " frame " + std::to_string(c) +
                             " has " + std::to_string(frames[*next].size()) +
                             " bytes, header says " + std::to_string(expect));
    }
    *bytes += frames[*next].size();
    out->push_back(std::move(frames[*next]));
    ++*next;
  }
  return Status::ok();
}

// Step 6: a part message describes one dense slice that lies inside its whole tensor.
Result<PartPosition> checkPart(proto::Header::Reader h, const MessageLimits& limits) {
  auto p = h.getPart();
  PartPosition pos{p.getIndex(), p.getCount(), p.getOffset(), p.getTotalElements()};
  if (pos.count < 2 || pos.count > limits.max_parts) {
    return invalidArgument("part count " + std::to_string(pos.count) + " outside 2.." +
                           std::to_string(limits.max_parts));
  }
  if (pos.index >= pos.count) {
    return invalidArgument("part " + std::to_string(pos.index) + " out of range (count " +
                           std::to_string(pos.count) + ")");
  }
  if (h.getTensors().size() != 1 || h.getTensors()[0].getEncoding() != proto::Encoding::DENSE) {
    return invalidArgument("a part carries exactly one dense tensor slice");
  }
  const std::uint64_t elements = h.getTensors()[0].getElements();
  if (elements == 0) return invalidArgument("empty part");
  if (elements * sizeof(float) > limits.max_part_bytes) {
    return resourceExhausted("part of " + std::to_string(elements * sizeof(float)) +
                             " bytes over the limit of " + std::to_string(limits.max_part_bytes));
  }
  if (pos.total_elements > limits.max_tensor_bytes / sizeof(float) ||
      pos.offset > pos.total_elements || elements > pos.total_elements - pos.offset) {
    return invalidArgument("part slice [" + std::to_string(pos.offset) + ", +" +
                           std::to_string(elements) + ") outside a tensor of " +
                           std::to_string(pos.total_elements) + " elements");
  }
  return pos;
}

}  // namespace

Result<InMessage> decodeMessage(std::vector<zmq::message_t>&& frames, const MessageLimits& limits) {
  GSGD_RETURN_IF_ERROR(checkFrameShape(frames, limits));
  const zmq::message_t& head = frames[0];
  InMessage msg;
  // Step 2: an aligned copy of the header, read within traversal and nesting limits.
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
    GSGD_RETURN_IF_ERROR(checkHeaderIdentity(h, limits));
    auto infos = h.getTensors();
    if (infos.size() > limits.max_tensors) return resourceExhausted("too many tensors");
    std::size_t next = 1;
    msg.tensor_frames_.resize(infos.size());
    for (unsigned i = 0; i < infos.size(); ++i) {
      GSGD_RETURN_IF_ERROR(checkTensorInfo(i, infos[i], limits));
      GSGD_RETURN_IF_ERROR(takeTensorFrames(i, infos[i], frames, &next, &msg.tensor_frames_[i],
                                            &total_tensor_bytes));
    }
    if (next != frames.size()) {
      return invalidArgument("message has " + std::to_string(frames.size() - next) +
                             " frames more than its header describes");
    }
    if (h.hasPart()) {
      auto part = checkPart(h, limits);
      if (!part) return part.status();
      msg.part_ = *part;
    }
  } catch (const kj::Exception& e) {
    return invalidArgument(std::string("malformed header: ") + e.getDescription().cStr());
  }
  msg.wire_bytes_ = frames[0].size() + total_tensor_bytes;
  return msg;
}

}  // namespace groupsgd
