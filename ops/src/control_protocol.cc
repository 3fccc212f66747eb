#include "groupsgd/ops/control_protocol.h"

#include <algorithm>
#include <array>
#include <utility>

namespace groupsgd::ops {
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
      {"version", false},   {"status", false},  {"workers", false},     {"groups", false},
      {"drain", true},      {"undrain", true},  {"regroup", true},      {"set", true},
      {"checkpoint", true}, {"shutdown", true}, {"unquarantine", true}, {"reload_keys", true},
  };
}

std::vector<ControlMethod> standbyControlMethods() {
  std::vector<ControlMethod> methods = defaultControlMethods();
  methods.push_back({"failover", true});
  return methods;
}

std::vector<ControlMethod> jobControlMethods() {
  return {{"job.list", false},
          {"job.status", false},
          {"job.summary", false},
          {"job.submit", true},
          {"job.stop", true}};
}

ControlDecoded decodeControlRequest(std::string_view line,
                                    const std::vector<ControlMethod>& methods) {
  using nlohmann::json;
  const auto fail = [](json id, ControlError code, std::string message, std::string method = {}) {
    return ControlDecoded{std::nullopt, ControlDecodeError{std::move(id), code, std::move(message),
                                                           std::move(method)}};
  };
  json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return fail(nullptr, ControlError::kParseError, "the line is not valid JSON");
  if (!doc.is_object())
    return fail(nullptr, ControlError::kInvalidRequest, "a request is a JSON object");
  json id = nullptr;
  if (auto it = doc.find("id"); it != doc.end()) {
    if (!it->is_string() && !it->is_number() && !it->is_null()) {
      return fail(nullptr, ControlError::kInvalidRequest, "id must be a string, a number or null");
    }
    id = *it;
  }
  auto m = doc.find("method");
  if (m == doc.end() || !m->is_string()) {
    return fail(std::move(id), ControlError::kInvalidRequest, "method (a string) is missing");
  }
  std::string method = m->get<std::string>();
  const auto spec = std::find_if(methods.begin(), methods.end(),
                                 [&](const ControlMethod& c) { return c.name == method; });
  if (spec == methods.end()) {
    return fail(std::move(id), ControlError::kMethodNotFound, "no method '" + method + "'");
  }
  json params = json::object();
  if (auto p = doc.find("params"); p != doc.end() && !p->is_null()) {
    if (!p->is_object()) {
      return fail(std::move(id), ControlError::kInvalidParams, "params must be an object",
                  std::move(method));
    }
    params = std::move(*p);
  }
  ControlRequest request{std::move(id), std::move(method), std::move(params), Caller{},
                         spec->admin};
  return ControlDecoded{std::move(request), std::nullopt};
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

}  // namespace groupsgd::ops
