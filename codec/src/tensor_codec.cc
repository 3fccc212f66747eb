#include "groupsgd/codec/tensor_codec.h"

#include <string>

#include "groupsgd/kernels/ops.h"

namespace groupsgd {

proto::Encoding toWire(kernels::Encoding encoding) {
  switch (encoding) {
    case kernels::Encoding::kDense:
      return proto::Encoding::DENSE;
    case kernels::Encoding::kFp16:
      return proto::Encoding::FP16;
    case kernels::Encoding::kTopK:
      return proto::Encoding::TOPK;
    case kernels::Encoding::kSign:
      return proto::Encoding::SIGN;
  }
  return proto::Encoding::DENSE;
}

kernels::Encoding fromWire(proto::Encoding encoding) {
  switch (encoding) {
    case proto::Encoding::FP16:
      return kernels::Encoding::kFp16;
    case proto::Encoding::TOPK:
      return kernels::Encoding::kTopK;
    case proto::Encoding::SIGN:
      return kernels::Encoding::kSign;
    default:
      return kernels::Encoding::kDense;
  }
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
