// Helpers for the control socket tests: a fake coordinator that drains a
// ControlServer's queue on its own thread, the default echo handler, and a raw Unix
// socket client for sending bytes the real client would never send.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "groupsgd/ops/control_server.h"
#include "temp_dir.h"

namespace groupsgd::testing {

// Drains the server's queue on a thread, handing each request to `handle` (which must
// answer it, keep it, or drop it: dropping makes the server reply "internal").
class FakeCoordinator {
 public:
  using Handler = std::function<void(ops::PendingRequest&&)>;
  FakeCoordinator(ops::ControlServer& server, Handler handle)
      : server_(server), handle_(std::move(handle)) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        if (auto req = server_.waitPop(std::chrono::milliseconds(20))) handle_(std::move(*req));
      }
    });
  }
  ~FakeCoordinator() {
    stop_.store(true);
    thread_.join();
  }

 private:
  ops::ControlServer& server_;
  Handler handle_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The default fake: echoes method, params and caller; a few methods behave like a daemon.
inline void echoHandler(ops::PendingRequest&& req) {
  using nlohmann::json;
  const auto& c = req.caller();
  if (req.method() == "drain" && req.params().value("worker", json()) == json(999)) {
    return req.fail(ops::ControlError::kInvalidParams, "no worker 999");
  }
  if (req.method() == "checkpoint") {
    return req.fail(ops::ControlError::kRefused, "a checkpoint is already being written");
  }
  if (req.method() == "workers") {  // built in column order, as the coordinator should
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    rows.push_back({{"id", 1}, {"name", "w1"}, {"group", 0}, {"state", "active"}});
    rows.push_back({{"id", 2}, {"name", "slow-one"}, {"group", 1}, {"state", "draining"}});
    return req.respond({{"workers", rows}});
  }
  req.respond({{"method", req.method()},
               {"params", req.params()},
               {"caller", {{"pid", c.pid}, {"uid", c.uid}, {"gid", c.gid}}}});
}

// A raw blocking Unix stream socket, for malformed input and byte-level checks.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect " + path + ": " + std::strerror(errno));
    }
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      done += static_cast<std::size_t>(n);
    }
  }
  void shutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  // The next line, or "" with closed() set when the peer closed, or "<timeout>".
  std::string readLine(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto nl = in_.find('\n');
      if (nl != std::string::npos) {
        std::string line = in_.substr(0, nl);
        in_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "<timeout>";
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        return "";
      }
      in_.append(buf, static_cast<std::size_t>(n));
    }
  }
  nlohmann::json readJson() {
    const std::string line = readLine();
    return nlohmann::json::parse(line, nullptr, false);
  }
  bool closed() const { return closed_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string in_;
  bool closed_ = false;
};

}  // namespace groupsgd::testing
