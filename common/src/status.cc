#include "groupsgd/common/status.h"

namespace groupsgd {

const char* codeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kFailedPrecondition:
      return "failed_precondition";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kResourceExhausted:
      return "resource_exhausted";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kDataLoss:
      return "data_loss";
    case Code::kAborted:
      return "aborted";
    case Code::kInternal:
      return "internal";
    case Code::kQuarantined:
      return "quarantined";
    case Code::kFinished:
      return "finished";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(codeName(code_)) + ": " + message_;
}

}  // namespace groupsgd
