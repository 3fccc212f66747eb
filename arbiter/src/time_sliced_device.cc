#include "groupsgd/arbiter/time_sliced_device.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "groupsgd/arbiter/device_lock.h"
#include "groupsgd/common/atomic_file.h"

namespace groupsgd::arbiter {
namespace {

using Clock = std::chrono::steady_clock;
// How often a step looks at how many others share the device.
constexpr double kTickMs = 2.0;

}  // namespace

Result<TimeSlicedDevice> TimeSlicedDevice::open(const std::string& dir, const std::string& name) {
  GSGD_RETURN_IF_ERROR(checkDeviceName(name));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fileError("mkdir", dir, errno);
  std::vector<int> fds, probes;
  for (int k = 0; k < 2 * kSlots; ++k) {
    const std::string path = dir + "/device-" + name + ".slot-" + std::to_string(k % kSlots);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int err = errno;
      for (int f : fds) ::close(f);
      for (int f : probes) ::close(f);
      return fileError("open", path, err);
    }
    (k < kSlots ? fds : probes).push_back(fd);
  }
  return TimeSlicedDevice(std::move(fds), std::move(probes));
}

TimeSlicedDevice::TimeSlicedDevice(TimeSlicedDevice&& other) noexcept
    : fds_(std::move(other.fds_)), probes_(std::move(other.probes_)) {
  other.fds_.clear();
  other.probes_.clear();
}

TimeSlicedDevice::~TimeSlicedDevice() {
  for (int fd : fds_) ::close(fd);
  for (int fd : probes_) ::close(fd);
}

int TimeSlicedDevice::takeSlot() {
  for (int k = 0; k < static_cast<int>(fds_.size()); ++k) {
    if (::flock(fds_[k], LOCK_EX | LOCK_NB) == 0) return k;
  }
  return -1;
}

int TimeSlicedDevice::activeSteps() const {
  int held = 0;
  for (int probe : probes_) {
    if (::flock(probe, LOCK_EX | LOCK_NB) == 0) {
      (void)::flock(probe, LOCK_UN);
    } else {
      ++held;
    }
  }
  return held;
}

void TimeSlicedDevice::spend(double device_ms) {
  if (device_ms <= 0) return;
  const int slot = takeSlot();  // -1: more sharers than slots; counted as one more below
  double left = device_ms;
  auto last = Clock::now();
  while (left > 0) {
    const int sharers = std::max(1, activeSteps() + (slot < 0 ? 1 : 0));
    const double wall_ms = std::min(kTickMs, left * sharers);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wall_ms));
    const auto now = Clock::now();
    left -= std::chrono::duration<double, std::milli>(now - last).count() / sharers;
    last = now;
  }
  if (slot >= 0) (void)::flock(fds_[slot], LOCK_UN);
}

}  // namespace groupsgd::arbiter
