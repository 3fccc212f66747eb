#include "groupsgd/coordinator/pending_calls.h"

#include <utility>

namespace groupsgd::coordinator {

void PendingCalls::start(std::string kind, CallTarget target, OutMessage&& msg,
                         std::chrono::milliseconds timeout, Continuation then) {
  calls_.push_back(
      {std::move(kind),
       BackgroundCall::start(ctx_, std::move(target), limits_, std::move(msg), timeout),
       std::move(then)});
}

bool PendingCalls::inFlight(const std::string& kind) const {
  for (const auto& c : calls_) {
    if (c.kind == kind) return true;
  }
  return false;
}

void PendingCalls::pump() { runReady(/*wait=*/false, nullptr); }

void PendingCalls::finish(const std::string& kind) { runReady(/*wait=*/true, &kind); }

void PendingCalls::runReady(bool wait, const std::string* kind) {
  // Taken out first: a continuation may start calls, which must not move what we walk.
  std::vector<Call> done;
  for (auto it = calls_.begin(); it != calls_.end();) {
    const bool mine = kind == nullptr || it->kind == *kind;
    if (mine && (wait || it->call.ready())) {
      done.push_back(std::move(*it));
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& c : done) c.then(c.call.take());
}

}  // namespace groupsgd::coordinator
