#include "groupsgd/codec/tensor_codec.h"

#include <array>
#include <string>

#include "groupsgd/kernels/ops.h"

namespace groupsgd {

namespace {

// Each encoding of the kernels and its name on the wire.
struct WireEncoding {
  kernels::Encoding kernel;
  proto::Encoding wire;
};

constexpr std::array<WireEncoding, 4> kWireEncodings{{
    {kernels::Encoding::kDense, proto::Encoding::DENSE},
    {kernels::Encoding::kFp16, proto::Encoding::FP16},
    {kernels::Encoding::kTopK, proto::Encoding::TOPK},
    {kernels::Encoding::kSign, proto::Encoding::SIGN},
}};

}  // namespace

proto::Encoding toWire(kernels::Encoding encoding) {
  for (const auto& e : kWireEncodings) {
    if (e.kernel == encoding) return e.wire;
  }
  return proto::Encoding::DENSE;
}

kernels::Encoding fromWire(proto::Encoding encoding) {
  for (const auto& e : kWireEncodings) {
    if (e.wire == encoding) return e.kernel;
  }
  return kernels::Encoding::kDense;
}

Status decodePayload(proto::Encoding encoding, std::span<const std::uint8_t> payload,
                     std::span<float> out) {
  const kernels::KernelStatus k = kernels::decode(fromWire(encoding), payload, out);
  if (k.ok()) return Status::ok();
  return Status(
      k.code == kernels::KernelStatus::Code::kDataLoss ? Code::kDataLoss : Code::kInvalidArgument,
      std::string(kernels::encodingName(fromWire(encoding))) + " tensor: " + k.message);
}

double sumSquares(const TensorView& view) {
  double s = 0;
  for (const auto& p : view.parts) s += kernels::sumSquares(p);
  return s;
}

std::size_t countNonFinite(const TensorView& view) {
  std::size_t n = 0;
  for (const auto& p : view.parts) n += kernels::countNonFinite(p);
  return n;
}

}  // namespace groupsgd
