#include "groupsgd/arbiter/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/interrupt.h"

namespace groupsgd::arbiter {

Status checkDeviceName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 &&
                  name.find_first_not_of(
                      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                      "0123456789._:-") == std::string::npos &&
                  name != "." && name != "..";
  if (ok) return Status::ok();
  return invalidArgument("a shared device name is 1 to 64 of A-Z a-z 0-9 . _ : -, got '" + name +
                         "'");
}

std::string defaultDeviceLockDir() {
  if (const char* run = std::getenv("XDG_RUNTIME_DIR"); run != nullptr && *run != '\0') {
    return std::string(run) + "/groupsgd-devices";
  }
  return "/tmp/groupsgd-devices-" + std::to_string(::getuid());
}

Result<DeviceLock> DeviceLock::open(const std::string& dir, const std::string& name) {
  GSGD_RETURN_IF_ERROR(checkDeviceName(name));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fileError("mkdir", dir, errno);
  const std::string path = dir + "/device-" + name + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return fileError("open", path, errno);
  return DeviceLock(fd, path);
}

DeviceLock::DeviceLock(DeviceLock&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), held_(other.held_) {
  other.fd_ = -1;
  other.held_ = false;
}

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the lock
}

Status DeviceLock::lock() {
  // With an interrupt check installed (interrupt.h), tried without blocking in slices so
  // the waiting caller can be interrupted; otherwise one blocking wait.
  const int how = interruptCheckInstalled() ? LOCK_EX | LOCK_NB : LOCK_EX;
  while (::flock(fd_, how) != 0) {
    if (errno != EINTR && errno != EWOULDBLOCK) return fileError("flock", path_, errno);
    if (interruptRequested()) return interruptedStatus();
    if (errno == EWOULDBLOCK) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  held_ = true;
  return Status::ok();
}

void DeviceLock::unlock() {
  if (!held_) return;
  (void)::flock(fd_, LOCK_UN);
  held_ = false;
}

}  // namespace groupsgd::arbiter
