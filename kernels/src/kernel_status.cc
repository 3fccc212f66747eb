#include "groupsgd/kernels/kernel_status.h"

namespace groupsgd::kernels {

const char* kernelCodeName(KernelStatus::Code code) {
  switch (code) {
    case KernelStatus::Code::kOk:
      return "ok";
    case KernelStatus::Code::kInvalidArgument:
      return "invalid_argument";
    case KernelStatus::Code::kDataLoss:
      return "data_loss";
    case KernelStatus::Code::kUnavailable:
      return "unavailable";
    case KernelStatus::Code::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace groupsgd::kernels
