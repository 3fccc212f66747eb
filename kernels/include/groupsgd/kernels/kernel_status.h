// The outcome of a kernels call that can fail on input it does not control: a malformed
// payload from a peer, or an error reported by the CUDA runtime. kernels sits below common,
// so it cannot return common::Status; the codes below have the same names and meanings as
// their namesakes in common::Code, so a caller maps one to the other by name.
// Thread rule: a plain value.
#pragma once

#include <string>
#include <utility>

namespace groupsgd::kernels {

struct [[nodiscard]] KernelStatus {
  enum class Code {
    kOk,
    kInvalidArgument,  // sizes that do not fit together (a payload of the wrong length)
    kDataLoss,         // a payload whose content is corrupt (bad index, NaN, bad padding)
    kUnavailable,      // no CUDA device, or a build without CUDA
    kInternal,         // any other CUDA runtime error
  };

  Code code = Code::kOk;
  std::string message;  // empty when ok

  bool ok() const { return code == Code::kOk; }
  static KernelStatus success() { return {}; }
  static KernelStatus error(Code code, std::string message) { return {code, std::move(message)}; }
};

// The name the compression interface uses for the same type.
using DecodeError = KernelStatus;

const char* kernelCodeName(KernelStatus::Code code);

}  // namespace groupsgd::kernels
