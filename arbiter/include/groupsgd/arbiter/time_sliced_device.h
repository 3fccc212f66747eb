// An emulated device that several processes use at once the way a GPU without MPS runs
// the kernels of several processes: time-sliced. While n steps are on the device each
// advances at 1/n of its speed, so device time is never created out of nothing, but an
// unarbitrated job's step stretches whenever another job computes beside it. The steps
// on a device are counted by flock(2)s on DIR/device-NAME.slot-K (K < kSlots): a step
// holds one slot for its duration, and the kernel drops the slot of a process that dies.
// Thread rule: one owner thread.
#pragma once

#include <string>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd::arbiter {

class TimeSlicedDevice {
 public:
  static constexpr int kSlots = 8;  // more sharers than this count as kSlots + 1
  // Creates dir (mode 0700 if new) and opens the device's slot files.
  static Result<TimeSlicedDevice> open(const std::string& dir, const std::string& name);
  TimeSlicedDevice(TimeSlicedDevice&& other) noexcept;
  TimeSlicedDevice& operator=(TimeSlicedDevice&&) = delete;
  ~TimeSlicedDevice();
  // Spends `device_ms` of device time; returns when it is done (later when shared).
  void spend(double device_ms);
  // Steps on the device now (this one included when it is inside spend()); for tests.
  int activeSteps() const;

 private:
  TimeSlicedDevice(std::vector<int> fds, std::vector<int> probes)
      : fds_(std::move(fds)), probes_(std::move(probes)) {}
  int takeSlot();            // index held, or -1 when every slot is taken
  std::vector<int> fds_;     // held for a step
  std::vector<int> probes_;  // the same files opened again: counting never blocks on our own
};

}  // namespace groupsgd::arbiter
