// The control protocol's vocabulary, shared by the control server, its client and
// groupsgdctl: error codes, the request as the coordinator sees it, the caller's
// credentials, the method table, and the reply builders. docs/operations.md is the
// protocol's reference.
//
// Wire format (JSON Lines, one object per line, UTF-8, '\n' terminated):
//   request  {"id": ID, "method": "NAME", "params": {...}}    ID: string, number or null
//   reply    {"id": ID, "ok": true,  "result": ...}
//            {"id": ID, "ok": false, "error": {"code": "CODE", "message": "..."}}
// Unknown request fields are ignored; "params" may be absent or null (= {}).
// Thread rule: plain values and pure functions; safe on any thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd::ops {

// The control protocol's version, reported by the "version" method. Bump it when a
// method's params or result change incompatibly.
inline constexpr int kControlProtocolVersion = 1;

// Error codes of the control protocol. The strings are the wire format; keep them stable.
enum class ControlError {
  kParseError,        // "parse_error": the line is not JSON
  kInvalidRequest,    // "invalid_request": not an object, bad id, missing/non-string method
  kMethodNotFound,    // "method_not_found": no such method
  kInvalidParams,     // "invalid_params": params not an object, or bad/unknown values
  kTooLarge,          // "too_large": the request line is over the server's cap
  kRefused,           // "refused": valid, but not now (busy, shutting down, wrong state)
  kPermissionDenied,  // "permission_denied": an admin method from a non-admin caller
  kInternal,          // "internal": a bug, or the request was dropped without a reply
};

const char* controlErrorName(ControlError code);
// Parses a wire code; nullopt for a string that is not one of the above.
std::optional<ControlError> parseControlError(std::string_view name);
// Maps a Status code to the protocol: InvalidArgument/NotFound -> invalid_params,
// PermissionDenied -> permission_denied, Internal -> internal, every other failure
// (FailedPrecondition, Unavailable, Aborted, ResourceExhausted, DataLoss) -> refused.
ControlError controlErrorFor(Code code);

// The connecting process as the kernel reports it (SO_PEERCRED at accept time, plus the
// supplementary groups from SO_PEERGROUPS where the kernel has it).
struct Caller {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups; may be empty
};

// One decoded, validated request, as handed to the coordinator.
struct ControlRequest {
  nlohmann::json id;  // echoed in the reply: string, number or null
  std::string method;
  nlohmann::json params;  // always an object ({} when absent)
  Caller caller;
  bool admin = false;  // the method is flagged admin (the caller passed the check)
};

// A method the server accepts. Admin methods change state and need an admin caller.
struct ControlMethod {
  std::string name;
  bool admin = false;
};

// The method set docs/operations.md specifies: version, status, workers, groups
// (read-only); drain, undrain, regroup, set, checkpoint, shutdown (admin).
std::vector<ControlMethod> defaultControlMethods();
// A daemon hosting several jobs (groupsgdd --serve, docs/jobs.md) also accepts these:
// job.list, job.status, job.summary (read-only); job.submit, job.stop (admin).
// A standby head's (role standby): the default ones and `failover` (admin), which
// promotes it now; once promoted its coordinator answers `failover` method_not_found.
std::vector<ControlMethod> standbyControlMethods();
std::vector<ControlMethod> jobControlMethods();

// What decodeControlRequest() found wrong with a line: the reply's id (null when none
// could be read), code and message, and the method (for the metrics label; "" when the
// line named no known method).
struct ControlDecodeError {
  nlohmann::json id;
  ControlError code = ControlError::kInvalidRequest;
  std::string message;
  std::string method;
};

// One request line as the control server decodes it, before the admin rule and the queue.
// Exactly one of request / error is set. request has id, method, params ({} when absent or
// null) and admin (the method's flag) filled in; its caller is left for the server.
struct ControlDecoded {
  std::optional<ControlRequest> request;
  std::optional<ControlDecodeError> error;
};

// Parses and checks one request line (without its '\n'; the server strips a trailing '\r',
// skips blank lines and enforces the size cap before calling this): parse_error,
// invalid_request (not an object; id not a string, number or null; method missing or not
// a string), method_not_found (not in methods), invalid_params (params not an object or
// null). Pure: no I/O, no logging, no exceptions.
ControlDecoded decodeControlRequest(std::string_view line,
                                    const std::vector<ControlMethod>& methods);

// Replies keep their keys in insertion order (ordered_json), so a result built as an
// ordered_json reaches groupsgdctl's tables with its columns in the order chosen; a plain
// nlohmann::json converts implicitly (its keys then come sorted).
nlohmann::ordered_json makeOkReply(const nlohmann::json& id, nlohmann::ordered_json result);
nlohmann::ordered_json makeErrorReply(const nlohmann::json& id, ControlError code,
                                      std::string_view message);

}  // namespace groupsgd::ops
