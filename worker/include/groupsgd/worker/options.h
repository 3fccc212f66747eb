// Command-line options of the reference trainer groupsgd-worker. Parsing is separate
// from main() so it can be tested and so --help stays next to the definitions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/status.h"
#include "groupsgd/kernels/model_device.h"
#include "groupsgd/worker/speed_schedule.h"

namespace groupsgd::worker {

struct WorkerOptions {
  std::string coordinator = "tcp://127.0.0.1:5555";
  std::uint64_t job_id = 1;
  std::string job;            // --job: the job to join by name ("" = the only one)
  std::string data_dir;       // empty: the Fashion-MNIST package directory
  SpeedProfile speed;         // --slowdown, --device-ms, --link-ms
  double stall_prob = 0;      // --stall-prob: chance per step of a random pause
  double stall_ms = 0;        // --stall-ms: mean length of such a pause (exponential)
  std::uint64_t seed = 0;     // --seed: for the pauses (0 = from the pid)
  std::string compress;       // --compress: gradient encoding ("" = as assigned)
  std::string schedule_text;  // --schedule
  bool evaluate = false;      // --evaluate: evaluator instead of trainer
  std::uint32_t eval_interval_ms = 500;
  std::string name;
  std::uint64_t max_steps = 0;               // 0 = until told to stop
  std::uint32_t timeout_ms = 15000;          // per request (must exceed the step deadline)
  std::uint32_t connect_timeout_ms = 30000;  // how long to keep trying to register
  double give_up_s = 600;                    // a lost head: keep re-registering this long
  std::uint32_t backoff_initial_ms = 100;    // re-registration back-off: first delay,
  std::uint32_t backoff_max_ms = 8000;       // doubling to this, 20% jitter
  std::string log_level = "info";
  kernels::ModelDevice device;              // --device cpu|cuda|cuda:N (training only)
  std::string shared_device;                // --shared-device: the device shared with other jobs
  std::string arbiter;                      // --arbiter: the device arbiter's endpoint ("" = none)
  std::uint32_t arbiter_timeout_ms = 1000;  // arbiter silent this long: compute unarbitrated
  bool arbiter_handoff = true;  // --arbiter-handoff: leases may be granted ahead (lock handoff)
  std::string device_lock_dir;  // --device-lock-dir ("" = arbiter::defaultDeviceLockDir())
  std::string device_sharing = "exclusive";  // --device-sharing: exclusive | timeslice
  std::string curve_secret_key_file;         // --curve-secret-key-file: this worker's key (0600)
  std::string curve_server_key_file;         // --curve-server-key-file: the daemons' public key
  CurveKeys curve;                           // loaded from the two files (empty = plain links)
  bool help = false;
};

// Parses the flags and, when CURVE files are named, loads the keys (a secret key file
// readable by group or others is refused).
Result<WorkerOptions> parseWorkerOptions(const std::vector<std::string>& args);
const char* workerUsage();

}  // namespace groupsgd::worker
