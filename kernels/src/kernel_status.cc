#include "groupsgd/kernels/kernel_status.h"

#include <array>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::kernels {

constexpr std::array<base::EnumName<KernelStatus::Code>, 5> kKernelCodeNames{{
    {KernelStatus::Code::kOk, "ok"},
    {KernelStatus::Code::kInvalidArgument, "invalid_argument"},
    {KernelStatus::Code::kDataLoss, "data_loss"},
    {KernelStatus::Code::kUnavailable, "unavailable"},
    {KernelStatus::Code::kInternal, "internal"},
}};

const char* kernelCodeName(KernelStatus::Code code) { return base::nameOf(kKernelCodeNames, code); }

}  // namespace groupsgd::kernels
