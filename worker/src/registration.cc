#include "groupsgd/worker/registration.h"

#include <algorithm>
#include <thread>

#include "groupsgd/common/interrupt.h"
#include "groupsgd/common/log.h"

namespace groupsgd::worker {

BackoffPolicy backoffPolicy(const WorkerOptions& o) {
  return {std::chrono::milliseconds(o.backoff_initial_ms),
          std::chrono::milliseconds(o.backoff_max_ms), 0.2};
}

Result<client::Assignment> registerWithRetry(client::CoordinatorClient& coord, client::Role role,
                                             const WorkerOptions& o,
                                             const std::atomic<bool>& interrupted,
                                             std::chrono::milliseconds patience) {
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + patience;
  Backoff backoff(backoffPolicy(o));
  Status last;
  const milliseconds per_call = coord.timeout();
  while (!interrupted.load()) {
    // No one request waits past the deadline: a silent daemon costs `patience`, not
    // patience plus a whole request timeout.
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    coord.setTimeout(std::clamp(left, milliseconds(1), per_call));
    auto a = coord.registerAs(role, o.name);
    coord.setTimeout(per_call);
    if (a) return a;
    last = a.status();
    // Refusals (wrong job, bad request, quarantined) will not change by retrying.
    if (last.code() != Code::kUnavailable) return last;
    const auto delay = backoff.next();
    if (steady_clock::now() + delay > deadline) break;
    GSGD_DEBUG("registration failed (" << last.toString() << "); retrying in " << delay.count()
                                       << " ms");
    // Woken early by the caller's interrupt check, if it installed one (interrupt.h).
    if (Status slept = interruptibleSleep(delay); !slept) return slept;
  }
  return unavailable("could not register with " + o.coordinator + ": " + last.toString());
}

bool followDirective(const client::StepAnswer& ans, std::uint32_t* batch, bool* stop,
                     const std::function<bool()>& reregister) {
  if (ans.batch_size != 0) *batch = ans.batch_size;
  switch (ans.directive) {
    case client::Directive::kContinue:
      return true;
    case client::Directive::kStop:
      GSGD_INFO("drained by the coordinator");
      *stop = true;
      return false;
    case client::Directive::kReassign:
      GSGD_INFO("moved by a regroup; fetching the new assignment");
      if (!reregister()) *stop = true;
      return false;
  }
  return true;
}

}  // namespace groupsgd::worker
