#include "registration.h"

#include <algorithm>
#include <thread>

#include "groupsgd/common/log.h"

namespace groupsgd::worker {

Result<Assignment> registerWithRetry(CoordinatorClient& coord, Role role, const WorkerOptions& o,
                                     const std::atomic<bool>& interrupted) {
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + milliseconds(o.connect_timeout_ms);
  auto backoff = milliseconds(100);
  Status last;
  while (!interrupted.load()) {
    auto a = coord.registerAs(role, o.name);
    if (a) return a;
    last = a.status();
    // Refusals (wrong job, bad request) will not change by retrying.
    if (last.code() != Code::kUnavailable) return last;
    if (steady_clock::now() + backoff > deadline) break;
    GSGD_DEBUG("registration failed (" << last.toString() << "); retrying");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, duration_cast<milliseconds>(seconds(2)));
  }
  return unavailable("could not register with " + o.coordinator + ": " + last.toString());
}

}  // namespace groupsgd::worker
