// sd_notify: datagrams to a socket the test binds (a path and an abstract name), the
// no-op without NOTIFY_SOCKET, and the watchdog interval from the environment.
#include "groupsgd/ops/sd_notify.h"

#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::ops;

namespace {

// A datagram socket standing in for systemd's notification socket.
class NotifyListener {
 public:
  // name: a path, or "@name" for the abstract namespace.
  explicit NotifyListener(const std::string& name) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    if (name[0] == '@') {
      addr.sun_path[0] = '\0';
    } else {
      len += 1;
    }
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    ::setenv("NOTIFY_SOCKET", name.c_str(), 1);
  }
  ~NotifyListener() {
    ::unsetenv("NOTIFY_SOCKET");
    ::close(fd_);
  }
  // The next datagram, or "<none>" after 2 s.
  std::string next() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 2000) != 1) return "<none>";
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n < 0 ? "<error>" : std::string(buf, static_cast<std::size_t>(n));
  }

 private:
  int fd_ = -1;
};

void checkMessages(NotifyListener& l) {
  REQUIRE(sdNotifyReady().isOk());
  CHECK(l.next() == "READY=1");
  REQUIRE(sdNotifyReady("serving 2 groups").isOk());
  CHECK(l.next() == "READY=1\nSTATUS=serving 2 groups");
  REQUIRE(sdNotifyStatus("step 10\nloss 0.3").isOk());
  CHECK(l.next() == "STATUS=step 10 loss 0.3");  // one line
  REQUIRE(sdNotifyWatchdog().isOk());
  CHECK(l.next() == "WATCHDOG=1");
  REQUIRE(sdNotifyStopping().isOk());
  CHECK(l.next() == "STOPPING=1");
  REQUIRE(sdNotifyReloading().isOk());
  const std::string reloading = l.next();
  CHECK(reloading.rfind("RELOADING=1\nMONOTONIC_USEC=", 0) == 0);
  const std::string usec = reloading.substr(std::strlen("RELOADING=1\nMONOTONIC_USEC="));
  CHECK(!usec.empty());
  CHECK(usec.find_first_not_of("0123456789") == std::string::npos);
  REQUIRE(sdNotify("EXTEND_TIMEOUT_USEC=5000000").isOk());
  CHECK(l.next() == "EXTEND_TIMEOUT_USEC=5000000");
}

}  // namespace

TEST_CASE("sd_notify: a no-op without NOTIFY_SOCKET") {
  ::unsetenv("NOTIFY_SOCKET");
  CHECK(sdNotifyReady("x").isOk());
  CHECK(sdNotifyWatchdog().isOk());
  ::setenv("NOTIFY_SOCKET", "", 1);
  CHECK(sdNotifyStopping().isOk());
  ::unsetenv("NOTIFY_SOCKET");
}

TEST_CASE("sd_notify: messages reach a socket given by path") {
  testing::TempDir dir;
  NotifyListener l(dir.file("notify"));
  checkMessages(l);
}

TEST_CASE("sd_notify: messages reach an abstract socket ('@name')") {
  NotifyListener l("@groupsgd-test-notify-" + std::to_string(::getpid()));
  checkMessages(l);
}

TEST_CASE("sd_notify: an unusable NOTIFY_SOCKET is an error, not a crash") {
  ::setenv("NOTIFY_SOCKET", "relative/path", 1);
  CHECK(sdNotifyReady().code() == Code::kInvalidArgument);
  ::setenv("NOTIFY_SOCKET", ("/" + std::string(200, 'x')).c_str(), 1);
  CHECK(sdNotifyReady().code() == Code::kInvalidArgument);
  ::setenv("NOTIFY_SOCKET", "/nonexistent/groupsgd/notify", 1);
  const Status s = sdNotifyReady();
  CHECK(s.code() == Code::kUnavailable);
  CHECK(s.message().find("/nonexistent/groupsgd/notify") != std::string::npos);
  ::unsetenv("NOTIFY_SOCKET");
}

TEST_CASE("sd_notify: watchdog interval from WATCHDOG_USEC and WATCHDOG_PID") {
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  CHECK(!sdWatchdogInterval().has_value());
  ::setenv("WATCHDOG_USEC", "30000000", 1);
  REQUIRE(sdWatchdogInterval().has_value());
  CHECK(*sdWatchdogInterval() == std::chrono::seconds(30));
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  CHECK(sdWatchdogInterval().has_value());
  ::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1);  // meant for another
  CHECK(!sdWatchdogInterval().has_value());
  ::unsetenv("WATCHDOG_PID");
  for (const char* bad : {"", "0", "-5", "12abc", "abc", "99999999999999999999999"}) {
    CAPTURE(bad);
    ::setenv("WATCHDOG_USEC", bad, 1);
    CHECK(!sdWatchdogInterval().has_value());
  }
  ::unsetenv("WATCHDOG_USEC");
}
