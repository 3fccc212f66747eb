#include "arbiter_codec.h"

#include <cstring>

#include <kj/exception.h>

namespace groupsgd::arbiter {

ArbiterOut::ArbiterOut(std::uint64_t job_id, std::uint64_t worker_id, std::uint64_t seq)
    : root(builder.initRoot<proto::ArbiterMessage>()) {
  root.setProtocolVersion(kArbiterProtocolVersion);
  root.setJobId(job_id);
  root.setWorkerId(worker_id);
  root.setSeq(seq);
}

zmq::message_t ArbiterOut::frame() {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  return zmq::message_t(bytes.begin(), bytes.size());
}

Result<ArbiterIn> ArbiterIn::decode(const zmq::message_t& frame) {
  if (frame.empty() || frame.size() % sizeof(capnp::word) != 0 ||
      frame.size() > kMaxArbiterMessageBytes) {
    return invalidArgument("arbiter message of " + std::to_string(frame.size()) +
                           " bytes is not a Cap'n Proto message of at most " +
                           std::to_string(kMaxArbiterMessageBytes));
  }
  ArbiterIn in;
  in.words_ = kj::heapArray<capnp::word>(frame.size() / sizeof(capnp::word));
  std::memcpy(in.words_.begin(), frame.data(),
              frame.size());  // frames may be unaligned
  capnp::ReaderOptions opts;
  opts.traversalLimitInWords = kMaxArbiterMessageBytes / sizeof(capnp::word);
  opts.nestingLimit = 8;
  try {
    in.reader_ = std::make_unique<capnp::FlatArrayMessageReader>(in.words_.asPtr(), opts);
    in.root_ = in.reader_->getRoot<proto::ArbiterMessage>();
    (void)in.root_.totalSize();  // traverse once: later reads cannot hit a bad pointer
    if (in.root_.getProtocolVersion() != kArbiterProtocolVersion) {
      return invalidArgument("arbiter protocol version " +
                             std::to_string(in.root_.getProtocolVersion()) + ", expected " +
                             std::to_string(kArbiterProtocolVersion));
    }
    (void)in.root_.getDevice();
    (void)in.root_.getBody().which();
  } catch (const kj::Exception& e) {
    return invalidArgument(std::string("malformed arbiter message: ") + e.getDescription().cStr());
  }
  return in;
}

}  // namespace groupsgd::arbiter
