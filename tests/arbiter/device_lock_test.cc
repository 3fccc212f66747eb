#include "groupsgd/arbiter/device_lock.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "groupsgd/arbiter/time_sliced_device.h"

using namespace groupsgd;
using namespace groupsgd::arbiter;
using namespace std::chrono_literals;

TEST_CASE("device lock: two holders of one device never overlap") {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gsgd-lock-" + std::to_string(::getpid())))
          .string();
  auto a = DeviceLock::open(dir, "gpu0");
  auto b = DeviceLock::open(dir, "gpu0");  // another open file: contends like another process
  auto other = DeviceLock::open(dir, "gpu1");
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  REQUIRE(other.isOk());
  REQUIRE(a->lock().isOk());
  REQUIRE(other->lock().isOk());  // another device is free
  std::atomic<bool> b_holds{false};
  std::thread t([&] {
    REQUIRE(b->lock().isOk());
    b_holds.store(true);
    b->unlock();
  });
  std::this_thread::sleep_for(200ms);  // a fixed time on purpose: b must not get it meanwhile
  CHECK_FALSE(b_holds.load());
  a->unlock();
  t.join();
  CHECK(b_holds.load());
  std::filesystem::remove_all(dir);
}

TEST_CASE("device lock: names are checked") {
  CHECK(checkDeviceName("gpu0").isOk());
  CHECK(checkDeviceName("node3:cuda:1").isOk());
  for (const char* bad : {"", "a/b", "..", "gpu 0", "x\n"}) {
    CAPTURE(bad);
    CHECK_FALSE(checkDeviceName(bad).isOk());
  }
  CHECK_FALSE(checkDeviceName(std::string(65, 'a')).isOk());
  CHECK(DeviceLock::open("/proc/no-such-dir/x", "gpu0").status().message().find("mkdir") !=
        std::string::npos);
}

TEST_CASE("time-sliced device: steps that share a device each run at 1/n speed") {
  using Clock = std::chrono::steady_clock;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gsgd-slice-" + std::to_string(::getpid())))
          .string();
  auto a = TimeSlicedDevice::open(dir, "gpu0");
  auto b = TimeSlicedDevice::open(dir, "gpu0");  // another open file: like another process
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  CHECK(a->activeSteps() == 0);
  auto t0 = Clock::now();
  a->spend(100);
  const auto alone = Clock::now() - t0;
  CHECK(alone >= 100ms);
  t0 = Clock::now();
  std::thread other([&] { b->spend(100); });
  a->spend(100);
  other.join();
  const auto shared = Clock::now() - t0;
  // 200 ms of device time on one device: never less, whatever the interleaving.
  CHECK(shared >= 180ms);
  CHECK(a->activeSteps() == 0);
  std::filesystem::remove_all(dir);
}
