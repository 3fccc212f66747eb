#include "groupsgd/codec/compression_spec.h"

#include <cmath>
#include <cstdlib>

namespace groupsgd {

std::string CompressionSpec::toString() const {
  std::string s = kernels::encodingName(encoding);
  if (encoding == kernels::Encoding::kTopK) s += ":" + std::to_string(ratio);
  return s;
}

Result<CompressionSpec> parseCompressionSpec(const std::string& text) {
  CompressionSpec spec;
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  if (!kernels::parseEncoding(name, &spec.encoding)) {
    return invalidArgument("compression '" + text + "': use dense, fp16, sign or topk:RATIO");
  }
  if (spec.encoding == kernels::Encoding::kTopK) {
    if (colon == std::string::npos)
      return invalidArgument("compression 'topk' needs a ratio: topk:0.01");
    const std::string r = text.substr(colon + 1);
    char* end = nullptr;
    const double v = std::strtod(r.c_str(), &end);
    if (r.empty() || end != r.c_str() + r.size() || !(v > 0) || v > 1) {
      return invalidArgument("compression '" + text + "': the top-k ratio must be in (0, 1]");
    }
    spec.ratio = static_cast<float>(v);
  } else if (colon != std::string::npos) {
    return invalidArgument("compression '" + text + "': only topk takes a ratio");
  }
  return spec;
}

}  // namespace groupsgd
