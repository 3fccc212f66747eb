#include "groupsgd/ops/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace groupsgd::ops {
namespace {

std::string oneLine(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

bool parsePositive(const char* text, unsigned long long* out) {
  if (text == nullptr || *text == '\0') return false;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  errno = 0;
  *out = std::strtoull(text, nullptr, 10);
  return errno == 0 && *out > 0;
}

}  // namespace

Status sdNotify(std::string_view state) {
  const char* target = std::getenv("NOTIFY_SOCKET");
  if (target == nullptr || *target == '\0') return Status::ok();
  const std::string path(target);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if ((path[0] != '/' && path[0] != '@') || path.size() > sizeof(addr.sun_path) ||
      (path[0] == '/' && path.size() == sizeof(addr.sun_path))) {
    return invalidArgument("sd_notify: unusable NOTIFY_SOCKET '" + path + "'");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  if (path[0] == '@') {
    addr.sun_path[0] = '\0';  // abstract namespace: no terminating NUL counted
  } else {
    len += 1;
  }
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable(std::string("sd_notify: socket: ") + std::strerror(errno));
  ssize_t sent;
  do {
    sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                    reinterpret_cast<const sockaddr*>(&addr), len);
  } while (sent < 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (sent < 0) {
    return unavailable("sd_notify: send to " + path + ": " + std::strerror(err));
  }
  if (static_cast<std::size_t>(sent) != state.size()) {
    return unavailable("sd_notify: short send to " + path);
  }
  return Status::ok();
}

Status sdNotifyReady(std::string_view status) {
  if (status.empty()) return sdNotify("READY=1");
  return sdNotify("READY=1\nSTATUS=" + oneLine(status));
}

Status sdNotifyStatus(std::string_view status) { return sdNotify("STATUS=" + oneLine(status)); }
Status sdNotifyWatchdog() { return sdNotify("WATCHDOG=1"); }
Status sdNotifyStopping() { return sdNotify("STOPPING=1"); }

Status sdNotifyReloading() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const unsigned long long usec = static_cast<unsigned long long>(ts.tv_sec) * 1000000ULL +
                                  static_cast<unsigned long long>(ts.tv_nsec) / 1000ULL;
  return sdNotify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

std::optional<std::chrono::microseconds> sdWatchdogInterval() {
  unsigned long long usec = 0;
  if (!parsePositive(std::getenv("WATCHDOG_USEC"), &usec)) return std::nullopt;
  if (const char* pid_text = std::getenv("WATCHDOG_PID"); pid_text != nullptr && *pid_text) {
    unsigned long long pid = 0;
    if (!parsePositive(pid_text, &pid) || pid != static_cast<unsigned long long>(::getpid())) {
      return std::nullopt;
    }
  }
  return std::chrono::microseconds(static_cast<long long>(usec));
}

}  // namespace groupsgd::ops
