// How a link compresses its tensors, as operators write it: "dense", "fp16", "sign" or
// "topk:RATIO" (RATIO in (0, 1], e.g. "topk:0.01"). Pure; any thread.
#pragma once

#include <string>

#include "groupsgd/common/status.h"
#include "groupsgd/kernels/compression.h"

namespace groupsgd {

struct CompressionSpec {
  kernels::Encoding encoding = kernels::Encoding::kDense;
  float ratio = 0.01f;  // top-k only
  std::string toString() const;
};

Result<CompressionSpec> parseCompressionSpec(const std::string& text);

}  // namespace groupsgd
