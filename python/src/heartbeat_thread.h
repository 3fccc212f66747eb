// Heartbeats on a thread of their own, so a worker whose step runs long in Python (or
// holds the GIL) never looks dead to the coordinator. It owns its own CoordinatorClient
// (one socket per thread) and reports the statistics the session publishes.
// Thread rule: the owner thread calls every public method; the heartbeat thread touches
// only the state guarded by mu_ and the atomics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <zmq.hpp>

#include "groupsgd/client/client.h"
#include "groupsgd/worker/options.h"

namespace groupsgd::python {

// Running totals the session publishes; the thread turns them into per-heartbeat means.
struct StepTotals {
  std::uint64_t samples_trained = 0;  // this registration
  std::uint64_t steps = 0;            // this registration
  float last_loss = 0;
  std::uint32_t batch_size = 0;
  double compute_ms = 0, comm_ms = 0, wait_ms = 0;  // sums over every step of the process
  std::uint64_t timed_steps = 0;                    // steps in those sums
  float test_accuracy = -1;                         // evaluators
  std::uint64_t evaluated_version = 0;
  float test_loss = -1;  // evaluators: validation loss of evaluated_version (-1 = none)
};

class HeartbeatThread {
 public:
  HeartbeatThread(zmq::context_t& ctx, const worker::WorkerOptions& opts);
  ~HeartbeatThread();  // stops and joins
  // Starts (or retargets) heartbeats for this assignment.
  // job_endpoint: the job coordinator the owner's client was redirected to ("" = none),
  // with that job's id.
  void follow(const client::Assignment& a, const std::string& job_endpoint = "",
              std::uint64_t job_id = 0);
  // Stops sending (the worker is leaving or registering again) until follow().
  void pause();
  void publish(const StepTotals& totals);
  // Sends the next heartbeat now rather than at the end of the period (an evaluator's
  // report: every measured version reaches the coordinator, which keeps the best).
  void sendSoon();
  // What the coordinator said: finish and leave / register again / quarantined.
  bool stopRequested() const { return stop_.load(); }
  // Evaluators: the run is over and its final model waits for a reading (measure now).
  bool measureNowRequested() const { return measure_now_.load(); }
  bool reregisterRequested() const { return reregister_.load(); }
  bool quarantined() const { return quarantined_.load(); }
  std::uint64_t sent() const { return sent_.load(); }
  // The gradient encoding the coordinator chose for this worker's group in its last
  // heartbeat reply since follow() ("" = none heard: keep the assignment's).
  std::string chosenCompression();

 private:
  void loop();
  client::CoordinatorClient coord_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::optional<client::Assignment> assignment_;  // none: paused
  StepTotals totals_, reported_;
  std::atomic<bool> shutdown_{false};  // set under mu_ (the wait), read by the RPC's check
  bool urgent_ = false;                // sendSoon()
  std::uint64_t generation_ = 0;       // bumped by follow()
  std::string job_endpoint_;           // set by follow(); applied to coord_ on the thread
  std::uint64_t job_id_ = 0;
  std::string chosen_compression_;  // guarded by mu_; cleared by follow()
  std::atomic<bool> stop_{false}, reregister_{false}, quarantined_{false}, measure_now_{false};
  std::atomic<std::uint64_t> sent_{0};
  std::thread thread_;
};

}  // namespace groupsgd::python
