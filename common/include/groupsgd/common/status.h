// Status and Result<T>: how every expected failure (bad input, peer gone, timeout,
// missing file, bad config) is reported. Exceptions never cross a module boundary;
// adapters around cppzmq, Cap'n Proto and nlohmann/json turn them into a Status.
// Thread rule: plain values, safe to copy between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace groupsgd {

// Error codes are part of the wire protocol (ErrorReply.code) and of the control
// socket; keep the numbers stable.
enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,     // malformed input, bad value, wrong size
  kNotFound = 2,            // missing file, unknown worker/group
  kFailedPrecondition = 3,  // wrong state (e.g. late step, old epoch)
  kUnavailable = 4,         // peer unreachable, timeout
  kResourceExhausted = 5,   // over a size limit
  kPermissionDenied = 6,    // wrong job, not a member
  kDataLoss = 7,            // corrupt file or payload
  kAborted = 8,             // refused by policy (e.g. staleness bound)
  kInternal = 9,            // a bug
  kQuarantined = 10,        // the sender is quarantined (repeated bad updates)
  kFinished = 11,           // the run is over: a registering worker stops cleanly
};

const char* codeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool isOk() const { return code_ == Code::kOk; }
  explicit operator bool() const { return isOk(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string toString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status notFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status failedPrecondition(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status resourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status permissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status dataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }
inline Status aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status internalError(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status quarantined(std::string m) { return {Code::kQuarantined, std::move(m)}; }
inline Status finished(std::string m) { return {Code::kFinished, std::move(m)}; }

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be ok
  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }
  const Status& status() const {
    static const Status kOkStatus;
    return isOk() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace groupsgd

// Return early from a function returning Status or Result<T>.
#define GSGD_RETURN_IF_ERROR(expr)       \
  do {                                   \
    ::groupsgd::Status gsgd_s_ = (expr); \
    if (!gsgd_s_.isOk()) return gsgd_s_; \
  } while (0)
