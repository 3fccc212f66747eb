#include "groupsgd/common/status.h"

#include <array>

#include "groupsgd/base/enum_names.h"

namespace groupsgd {

constexpr std::array<base::EnumName<Code>, 12> kCodeNames{{
    {Code::kOk, "ok"},
    {Code::kInvalidArgument, "invalid_argument"},
    {Code::kNotFound, "not_found"},
    {Code::kFailedPrecondition, "failed_precondition"},
    {Code::kUnavailable, "unavailable"},
    {Code::kResourceExhausted, "resource_exhausted"},
    {Code::kPermissionDenied, "permission_denied"},
    {Code::kDataLoss, "data_loss"},
    {Code::kAborted, "aborted"},
    {Code::kInternal, "internal"},
    {Code::kQuarantined, "quarantined"},
    {Code::kFinished, "finished"},
}};

const char* codeName(Code code) { return base::nameOf(kCodeNames, code); }

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(codeName(code_)) + ": " + message_;
}

}  // namespace groupsgd
