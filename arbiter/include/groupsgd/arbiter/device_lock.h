// Exclusive use of a named shared device across processes: an flock(2) on
// DIR/device-NAME.lock. Emulated devices (--device-ms) hold it for a step's
// compute, so two steps never overlap on one device whether or not an arbiter
// orders them; the kernel drops the lock of a process that dies. Thread rule:
// one owner thread.
#pragma once

#include <string>

#include "groupsgd/common/status.h"

namespace groupsgd::arbiter {

// Device names: 1 to 64 of [A-Za-z0-9._:-] (e.g. gpu0, node3:cuda:1).
Status checkDeviceName(const std::string& name);
// $XDG_RUNTIME_DIR/groupsgd-devices, else /tmp/groupsgd-devices-UID.
std::string defaultDeviceLockDir();

class DeviceLock {
 public:
  // Creates dir (mode 0700 if new) and opens the device's lock file.
  static Result<DeviceLock> open(const std::string& dir, const std::string& name);
  DeviceLock(DeviceLock&& other) noexcept;
  DeviceLock& operator=(DeviceLock&&) = delete;
  DeviceLock(const DeviceLock&) = delete;
  ~DeviceLock();
  // Blocks until this process holds the device (interrupted waits are resumed).
  Status lock();
  void unlock();
  const std::string& path() const { return path_; }

 private:
  DeviceLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  bool held_ = false;
};

}  // namespace groupsgd::arbiter
