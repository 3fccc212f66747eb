#include "groupsgd/centralps/replication.h"

#include <cstdint>
#include <cstring>
#include <span>

namespace groupsgd::centralps {
namespace {

constexpr std::uint32_t kMagic = 0x50525347;  // "GSRP" little-endian
constexpr std::uint16_t kFormat = 1;

// The header frame, field by field (no struct padding on the wire).
constexpr std::size_t kHeaderBytes = 4 + 2 + 2 + 8 * 6 + 4 + 8 + 4 + 4 + 8;

class Writer {
 public:
  explicit Writer(std::size_t n) : bytes_(n) {}
  template <typename T>
  void put(T v) {
    std::memcpy(bytes_.data() + at_, &v, sizeof v);
    at_ += sizeof v;
  }
  zmq::message_t done() { return zmq::message_t(bytes_.data(), bytes_.size()); }

 private:
  std::vector<unsigned char> bytes_;
  std::size_t at_ = 0;
};

class Reader {
 public:
  explicit Reader(const zmq::message_t& m) : p_(static_cast<const unsigned char*>(m.data())) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, p_ + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }

 private:
  const unsigned char* p_;
  std::size_t at_ = 0;
};

zmq::message_t floatFrame(const std::vector<float>& v) {
  return zmq::message_t(v.data(), v.size() * sizeof(float));
}

Result<std::vector<float>> readFloats(const zmq::message_t& frame, std::size_t count,
                                      const char* what) {
  if (frame.size() != count * sizeof(float)) {
    return invalidArgument(std::string("replication: ") + what + " frame of " +
                           std::to_string(frame.size()) + " bytes, expected " +
                           std::to_string(count * sizeof(float)) + " (truncated or mis-sized)");
  }
  std::vector<float> out(count);
  if (count > 0) std::memcpy(out.data(), frame.data(), frame.size());
  return out;
}

// Frames after the header: tensors (by kind), then the text.
std::size_t tensorFrames(ReplicationKind kind) {
  switch (kind) {
    case ReplicationKind::kSnapshot:
      return 2;  // model, optimizer state
    case ReplicationKind::kUpdate:
      return 1;  // delta
    default:
      return 0;
  }
}

}  // namespace

const char* replicationKindName(ReplicationKind kind) {
  switch (kind) {
    case ReplicationKind::kHello:
      return "hello";
    case ReplicationKind::kSnapshot:
      return "snapshot";
    case ReplicationKind::kUpdate:
      return "update";
    case ReplicationKind::kAck:
      return "ack";
    case ReplicationKind::kHeartbeat:
      return "heartbeat";
    case ReplicationKind::kSuperseded:
      return "superseded";
    case ReplicationKind::kRefused:
      return "refused";
    case ReplicationKind::kCoordinatorState:
      return "coordinator state";
  }
  return "unknown";
}

namespace {

zmq::message_t headerFrame(const ReplicationMessage& m) {
  Writer w(kHeaderBytes);
  w.put(kMagic);
  w.put(kFormat);
  w.put(static_cast<std::uint16_t>(m.kind));
  w.put(m.term);
  w.put(m.version);
  w.put(m.run_samples);
  w.put(m.samples);
  w.put(m.tau);
  w.put(m.param_count);
  w.put(m.weight);
  w.put(m.mean_samples);
  w.put(static_cast<std::uint32_t>(m.optimizer.kind));
  w.put(m.optimizer.buffers);
  w.put(m.optimizer.steps);
  return w.done();
}

}  // namespace

std::vector<zmq::message_t> encodeReplication(const ReplicationMessage& m) {
  std::vector<zmq::message_t> frames;
  frames.push_back(headerFrame(m));
  if (m.kind == ReplicationKind::kSnapshot) {
    frames.push_back(floatFrame(m.tensor));
    frames.push_back(floatFrame(m.optimizer.values));
  } else if (m.kind == ReplicationKind::kUpdate) {
    frames.push_back(floatFrame(m.tensor));
  }
  frames.emplace_back(m.text.data(), m.text.size());
  return frames;
}

std::vector<zmq::message_t> encodeReplication(const ReplicationMessage& m,
                                              const TensorView& delta) {
  std::vector<zmq::message_t> frames;
  frames.push_back(headerFrame(m));
  zmq::message_t tensor(delta.size * sizeof(float));
  if (reinterpret_cast<std::uintptr_t>(tensor.data()) % alignof(float) == 0) {
    delta.copyRange(0, std::span<float>(static_cast<float*>(tensor.data()), delta.size));
  } else {  // a tiny message kept inside zmq's own struct: through an aligned buffer
    std::vector<float> values(delta.size);
    delta.copyRange(0, values);
    if (!values.empty()) std::memcpy(tensor.data(), values.data(), tensor.size());
  }
  frames.push_back(std::move(tensor));
  frames.emplace_back(m.text.data(), m.text.size());
  return frames;
}

Result<ReplicationMessage> decodeReplication(const std::vector<zmq::message_t>& frames,
                                             TensorView* in_place) {
  if (frames.empty() || frames[0].size() != kHeaderBytes) {
    return invalidArgument("replication: header frame of " +
                           std::to_string(frames.empty() ? 0 : frames[0].size()) +
                           " bytes, expected " + std::to_string(kHeaderBytes));
  }
  Reader r(frames[0]);
  if (r.get<std::uint32_t>() != kMagic) return invalidArgument("replication: bad magic");
  if (const auto format = r.get<std::uint16_t>(); format != kFormat) {
    return invalidArgument("replication: format " + std::to_string(format) + ", this build reads " +
                           std::to_string(kFormat));
  }
  ReplicationMessage m;
  const auto kind = r.get<std::uint16_t>();
  if (kind < 1 || kind > static_cast<std::uint16_t>(ReplicationKind::kCoordinatorState)) {
    return invalidArgument("replication: unknown kind " + std::to_string(kind));
  }
  m.kind = static_cast<ReplicationKind>(kind);
  m.term = r.get<std::uint64_t>();
  m.version = r.get<std::uint64_t>();
  m.run_samples = r.get<std::uint64_t>();
  m.samples = r.get<std::uint64_t>();
  m.tau = r.get<std::uint64_t>();
  m.param_count = r.get<std::uint64_t>();
  m.weight = r.get<float>();
  m.mean_samples = r.get<double>();
  const auto optimizer_kind = r.get<std::uint32_t>();
  if (optimizer_kind > static_cast<std::uint32_t>(kernels::OptimizerKind::kAdamW)) {
    return invalidArgument("replication: unknown optimizer kind " + std::to_string(optimizer_kind));
  }
  m.optimizer.kind = static_cast<kernels::OptimizerKind>(optimizer_kind);
  m.optimizer.buffers = r.get<std::uint32_t>();
  m.optimizer.steps = r.get<std::uint64_t>();
  const std::size_t expected = 1 + tensorFrames(m.kind) + 1;
  if (frames.size() != expected) {
    return invalidArgument(std::string("replication: a ") + replicationKindName(m.kind) + " has " +
                           std::to_string(expected) + " frames, this one " +
                           std::to_string(frames.size()));
  }
  if (m.param_count > (std::uint64_t{1} << 36)) {
    return invalidArgument("replication: implausible parameter count " +
                           std::to_string(m.param_count));
  }
  if (in_place != nullptr) *in_place = TensorView{};
  if (m.kind == ReplicationKind::kUpdate && in_place != nullptr &&
      reinterpret_cast<std::uintptr_t>(frames[1].data()) % alignof(float) == 0) {
    if (frames[1].size() != m.param_count * sizeof(float)) {
      return invalidArgument("replication: tensor frame of " + std::to_string(frames[1].size()) +
                             " bytes, expected " + std::to_string(m.param_count * sizeof(float)) +
                             " (truncated or mis-sized)");
    }
    in_place->size = m.param_count;
    in_place->parts.clear();
    if (m.param_count > 0) {
      in_place->parts.emplace_back(static_cast<const float*>(frames[1].data()), m.param_count);
    }
  } else if (m.kind == ReplicationKind::kSnapshot || m.kind == ReplicationKind::kUpdate) {
    auto tensor = readFloats(frames[1], m.param_count, "tensor");
    if (!tensor) return tensor.status();
    m.tensor = std::move(*tensor);
  }
  if (m.kind == ReplicationKind::kSnapshot) {
    if (m.optimizer.buffers > 4) {
      return invalidArgument("replication: " + std::to_string(m.optimizer.buffers) +
                             " optimizer buffers");
    }
    auto state = readFloats(frames[2], m.optimizer.buffers * m.param_count, "optimizer state");
    if (!state) return state.status();
    m.optimizer.values = std::move(*state);
  }
  const zmq::message_t& text = frames.back();
  m.text.assign(static_cast<const char*>(text.data()), text.size());
  return m;
}

}  // namespace groupsgd::centralps
