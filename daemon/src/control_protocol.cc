#include "groupsgd/daemon/control_protocol.h"

#include <array>
#include <utility>

namespace groupsgd::daemon {
namespace {

constexpr std::array<std::pair<ControlError, const char*>, 8> kNames{{
    {ControlError::kParseError, "parse_error"},
    {ControlError::kInvalidRequest, "invalid_request"},
    {ControlError::kMethodNotFound, "method_not_found"},
    {ControlError::kInvalidParams, "invalid_params"},
    {ControlError::kTooLarge, "too_large"},
    {ControlError::kRefused, "refused"},
    {ControlError::kPermissionDenied, "permission_denied"},
    {ControlError::kInternal, "internal"},
}};

}  // namespace

const char* controlErrorName(ControlError code) {
  for (const auto& [c, name] : kNames) {
    if (c == code) return name;
  }
  return "internal";
}

std::optional<ControlError> parseControlError(std::string_view name) {
  for (const auto& [c, n] : kNames) {
    if (name == n) return c;
  }
  return std::nullopt;
}

ControlError controlErrorFor(Code code) {
  switch (code) {
    case Code::kInvalidArgument:
    case Code::kNotFound:
      return ControlError::kInvalidParams;
    case Code::kPermissionDenied:
      return ControlError::kPermissionDenied;
    case Code::kInternal:
    case Code::kOk:  // an ok Status is not an error: a caller bug
      return ControlError::kInternal;
    default:
      return ControlError::kRefused;
  }
}

std::vector<ControlMethod> defaultControlMethods() {
  return {
      {"version", false}, {"status", false},    {"workers", false},    {"groups", false},
      {"drain", true},    {"undrain", true},    {"regroup", true},     {"set", true},
      {"checkpoint", true}, {"shutdown", true},
  };
}

nlohmann::ordered_json makeOkReply(const nlohmann::json& id, nlohmann::ordered_json result) {
  nlohmann::ordered_json reply = nlohmann::ordered_json::object();
  reply["id"] = nlohmann::ordered_json(id);
  reply["ok"] = true;
  reply["result"] = std::move(result);
  return reply;
}

nlohmann::ordered_json makeErrorReply(const nlohmann::json& id, ControlError code,
                                      std::string_view message) {
  nlohmann::ordered_json reply = nlohmann::ordered_json::object();
  reply["id"] = nlohmann::ordered_json(id);
  reply["ok"] = false;
  reply["error"]["code"] = controlErrorName(code);
  reply["error"]["message"] = std::string(message);
  return reply;
}

}  // namespace groupsgd::daemon
