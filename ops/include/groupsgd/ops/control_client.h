// A blocking client for the control socket, used by groupsgdctl and the tests: connect
// with a timeout, send one request line, read one reply line before a deadline.
// Transport problems (no socket, timeout, connection closed, a reply that is not a JSON
// object or carries another id) are a Status; a daemon's refusal ({"ok": false, ...}) is
// a successful call whose reply says so.
// Thread rule: one thread at a time per client; move-only; closes its socket when destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd::ops {

class ControlClient {
 public:
  // Connects to the socket at path; fails with Unavailable when nothing answers in time.
  static Result<ControlClient> connect(const std::string& path, std::chrono::milliseconds timeout);
  ControlClient(ControlClient&& other) noexcept;
  ControlClient& operator=(ControlClient&& other) noexcept;
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;
  ~ControlClient();

  // Sends {"id": <next number>, "method": method, "params": params} and returns the
  // whole reply object (check reply["ok"]). The deadline covers sending and receiving.
  Result<nlohmann::json> call(const std::string& method, const nlohmann::json& params,
                              std::chrono::milliseconds timeout);
  // The same, returning the reply line as received (checked: a JSON object with a boolean
  // "ok" and this request's id), for callers that want the daemon's key order.
  Result<std::string> callLine(const std::string& method, const nlohmann::json& params,
                               std::chrono::milliseconds timeout);
  // Sends one raw line ('\n' appended when missing). For tests of malformed input.
  Status sendLine(std::string line, std::chrono::milliseconds timeout);
  // Reads the next reply line and parses it as a JSON object.
  Result<nlohmann::json> readReply(std::chrono::milliseconds timeout);
  // Reads the next line as it is (without '\n').
  Result<std::string> readLine(std::chrono::milliseconds timeout);

  // Longest reply line accepted (default 16 MiB); a longer one is an error.
  void setMaxReplyBytes(std::size_t bytes) { max_reply_bytes_ = bytes; }
  int fd() const { return fd_; }

 private:
  explicit ControlClient(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void close();
  Result<nlohmann::json> parseReply(const std::string& line) const;

  int fd_ = -1;
  std::string path_;
  std::string in_;  // bytes read past the last returned line
  std::uint64_t next_id_ = 1;
  std::size_t max_reply_bytes_ = std::size_t{16} * 1024 * 1024;
};

}  // namespace groupsgd::ops
