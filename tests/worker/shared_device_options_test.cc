#include <doctest/doctest.h>

#include "groupsgd/worker/options.h"

using namespace groupsgd;
using namespace groupsgd::worker;

TEST_CASE("worker options: a shared device and its arbiter") {
  auto none = parseWorkerOptions({});
  REQUIRE(none.isOk());
  CHECK(none->shared_device.empty());
  CHECK(none->arbiter.empty());
  CHECK(none->arbiter_timeout_ms == 1000);
  auto o = parseWorkerOptions({"--shared-device", "gpu0", "--arbiter", "tcp://127.0.0.1:5570",
                               "--arbiter-timeout-ms", "250", "--device-lock-dir", "/tmp/x"});
  REQUIRE(o.isOk());
  CHECK(o->shared_device == "gpu0");
  CHECK(o->arbiter == "tcp://127.0.0.1:5570");
  CHECK(o->arbiter_timeout_ms == 250);
  CHECK(o->device_lock_dir == "/tmp/x");
  // A shared device without an arbiter is fine: the file lock alone keeps it
  // exclusive.
  CHECK(parseWorkerOptions({"--shared-device", "gpu1"}).isOk());
}

TEST_CASE("worker options: bad shared-device flags are refused with the reason") {
  auto no_device = parseWorkerOptions({"--arbiter", "tcp://127.0.0.1:5570"});
  REQUIRE_FALSE(no_device.isOk());
  CHECK(no_device.status().message().find("--arbiter needs --shared-device") != std::string::npos);
  auto bad_name = parseWorkerOptions({"--shared-device", "../etc"});
  REQUIRE_FALSE(bad_name.isOk());
  CHECK(bad_name.status().message().find("--shared-device") != std::string::npos);
  CHECK_FALSE(parseWorkerOptions({"--arbiter-timeout-ms", "0"}).isOk());
  CHECK_FALSE(parseWorkerOptions({"--arbiter-timeout-ms", "-1"}).isOk());
}

TEST_CASE("worker options: --device-sharing is exclusive or timeslice") {
  CHECK(parseWorkerOptions({})->device_sharing == "exclusive");
  CHECK(parseWorkerOptions({"--device-sharing", "timeslice"})->device_sharing == "timeslice");
  auto bad = parseWorkerOptions({"--device-sharing", "mps"});
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("exclusive or timeslice") != std::string::npos);
}
