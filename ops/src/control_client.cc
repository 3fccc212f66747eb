#include "groupsgd/ops/control_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "groupsgd/common/deadline.h"

namespace groupsgd::ops {
namespace {

using Clock = std::chrono::steady_clock;

// timeLeft as poll()'s int.
int msLeft(Clock::time_point deadline) {
  return static_cast<int>(std::min<long long>(timeLeft(deadline).count(), 1 << 30));
}

// Waits for events on fd until deadline: 1 ready, 0 timed out, -1 error (errno set).
int waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, msLeft(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return rc;
    return 1;
  }
}

}  // namespace

Result<ControlClient> ControlClient::connect(const std::string& path,
                                             std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return invalidArgument("control socket path '" + path + "' is empty or too long");
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const auto deadline = Clock::now() + timeout;
  // A Unix socket connect either completes at once or fails with EAGAIN when the
  // listener's backlog is full; retry that until the deadline.
  for (;;) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return unavailable(std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      return ControlClient(fd, path);
    }
    const int err = errno;
    ::close(fd);
    if ((err != EAGAIN && err != EINTR) || Clock::now() >= deadline) {
      std::string hint;
      if (err == ENOENT || err == ECONNREFUSED) hint = " (is groupsgdd running?)";
      if (err == EACCES) hint = " (not in the socket's group?)";
      return unavailable("cannot connect to " + path + ": " + std::strerror(err) + hint);
    }
    ::usleep(10 * 1000);
  }
}

ControlClient::ControlClient(ControlClient&& other) noexcept
    : fd_(other.fd_),
      path_(std::move(other.path_)),
      in_(std::move(other.in_)),
      next_id_(other.next_id_),
      max_reply_bytes_(other.max_reply_bytes_) {
  other.fd_ = -1;
}

ControlClient& ControlClient::operator=(ControlClient&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    in_ = std::move(other.in_);
    next_id_ = other.next_id_;
    max_reply_bytes_ = other.max_reply_bytes_;
    other.fd_ = -1;
  }
  return *this;
}

ControlClient::~ControlClient() { close(); }

void ControlClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status ControlClient::sendLine(std::string line, std::chrono::milliseconds timeout) {
  if (fd_ < 0) return failedPrecondition("control client is not connected");
  if (line.empty() || line.back() != '\n') line += '\n';
  const auto deadline = Clock::now() + timeout;
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::send(fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int w = waitFor(fd_, POLLOUT, deadline);
      if (w == 0) return unavailable("timed out sending to " + path_);
      if (w < 0) return unavailable(std::string("poll: ") + std::strerror(errno));
      continue;
    }
    return unavailable("send to " + path_ + ": " + std::strerror(errno));
  }
  return Status::ok();
}

Result<std::string> ControlClient::readLine(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return failedPrecondition("control client is not connected");
  const auto deadline = Clock::now() + timeout;
  std::size_t scanned = 0;
  for (;;) {
    const std::size_t nl = in_.find('\n', scanned);
    if (nl != std::string::npos) {
      std::string line = in_.substr(0, nl);
      in_.erase(0, nl + 1);
      return line;
    }
    scanned = in_.size();
    if (in_.size() > max_reply_bytes_) {
      return resourceExhausted("reply from " + path_ + " longer than " +
                               std::to_string(max_reply_bytes_) + " bytes");
    }
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      in_.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return unavailable("the daemon closed the connection on " + path_);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return unavailable("recv from " + path_ + ": " + std::strerror(errno));
    }
    const int w = waitFor(fd_, POLLIN, deadline);
    if (w == 0) return unavailable("no reply from " + path_ + " within the timeout");
    if (w < 0) return unavailable(std::string("poll: ") + std::strerror(errno));
  }
}

Result<nlohmann::json> ControlClient::readReply(std::chrono::milliseconds timeout) {
  auto line = readLine(timeout);
  if (!line) return line.status();
  return parseReply(*line);
}

Result<std::string> ControlClient::callLine(const std::string& method, const nlohmann::json& params,
                                            std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::uint64_t id = next_id_++;
  const nlohmann::json request = {{"id", id}, {"method", method}, {"params", params}};
  GSGD_RETURN_IF_ERROR(
      sendLine(request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), timeout));
  auto line = readLine(timeLeft(deadline));
  if (!line) return line;
  const auto reply = parseReply(*line);
  if (!reply) return reply.status();
  const auto it = reply->find("id");
  if (it == reply->end() || !it->is_number_unsigned() || it->get<std::uint64_t>() != id) {
    return invalidArgument("reply from " + path_ + " carries id " +
                           (it == reply->end() ? std::string("(none)") : it->dump()) +
                           ", expected " + std::to_string(id));
  }
  return line;
}

Result<nlohmann::json> ControlClient::call(const std::string& method, const nlohmann::json& params,
                                           std::chrono::milliseconds timeout) {
  auto line = callLine(method, params, timeout);
  if (!line) return line.status();
  return parseReply(*line);
}

Result<nlohmann::json> ControlClient::parseReply(const std::string& line) const {
  nlohmann::json reply = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object() || !reply.contains("ok") ||
      !reply["ok"].is_boolean()) {
    return invalidArgument("malformed reply from " + path_ + ": " + line.substr(0, 200));
  }
  return reply;
}

}  // namespace groupsgd::ops
