// A received float32 tensor seen in place: the spans of its chunks, in order, pointing
// into the ZeroMQ frames that carried it (InMessage::viewTensor), so a server can check,
// accumulate or apply a large tensor without first copying it into a buffer of its own.
// Valid as long as the InMessage it came from. Its sum of squares and non-finite count
// are in the codec library (tensor_codec.h), with the kernels' loops.
// Thread rule: a view is read-only; read it from any thread while its message lives.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace groupsgd {

struct TensorView {
  std::vector<std::span<const float>> parts;  // consecutive pieces of the tensor
  std::size_t size = 0;                       // elements in all parts together

  // Copies elements [offset, offset + out.size()) into out (caller keeps it in range).
  void copyRange(std::size_t offset, std::span<float> out) const;
  // The pieces of the parts that hold elements [offset, offset + n), in order, appended to
  // *out: the range seen in place, without the copy (caller keeps it in range).
  void rangePieces(std::size_t offset, std::size_t n,
                   std::vector<std::span<const float>>* out) const;
};

}  // namespace groupsgd
