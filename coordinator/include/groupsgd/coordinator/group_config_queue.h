// Group PS configurations, sent off the coordinator's loop. A configuration carries a
// group's whole member list as the registry holds it when the configuration is sent, so
// requests for one group coalesce: at most one call per group is on its way, and what
// is requested meanwhile goes out, built afresh, when it returns. Whoever must know the
// outcome (a registration answered once its group expects the worker, a drain request)
// passes a callback; the loop meanwhile keeps reading heartbeats and pinging the watchdog,
// however long a group PS takes.
// Thread rule: every method on the owning (coordinator) thread; callbacks run there, only
// from pump() (or waitIdle()), never inside the call that registered them; a callback may
// call back in.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/message.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/coordinator/background_call.h"

namespace groupsgd::coordinator {

class GroupConfigQueue {
 public:
  using Done = std::function<void(const Status&)>;
  // Builds group's configuration as of now (flush: the group hands its progress to the
  // central PS after applying it), or says why none can be sent (failed, no PS yet).
  using Build = std::function<Result<OutMessage>(std::uint32_t group, bool flush)>;
  // Where group's PS is, read when a call starts (a re-created group moves).
  using Locate = std::function<CallTarget(std::uint32_t group)>;

  GroupConfigQueue(zmq::context_t& ctx, MessageLimits limits, Build build, Locate locate,
                   std::chrono::milliseconds timeout);
  GroupConfigQueue(const GroupConfigQueue&) = delete;
  GroupConfigQueue& operator=(const GroupConfigQueue&) = delete;

  // group's configuration is to be sent again. done (optional) runs once a configuration
  // built after this call was acknowledged, or could not be sent. after: groups whose
  // queued configuration must return first (a regroup tells the groups that gain workers
  // before those that lose them, so a moved worker is expected where it arrives).
  void request(std::uint32_t group, bool flush = false, Done done = {},
               const std::vector<std::uint32_t>& after = {});
  // done runs once every configuration requested so far for group has returned (with ok
  // at the next pump() when none is queued or on its way).
  void whenSettled(std::uint32_t group, Done done);
  // group's PS is gone or replaced: the call on its way is abandoned (its thread ends at
  // its deadline), queued work dropped, and every waiter told `why`.
  void cancel(std::uint32_t group, const Status& why);
  // Collects the calls that returned, runs their callbacks, starts what is due. Never blocks.
  void pump();
  // pump()s until nothing is queued or on its way, for at most `limit` (the end of a run,
  // before the groups are flushed).
  void waitIdle(std::chrono::milliseconds limit);
  bool idle() const;
  // Calls started (a measure of coalescing) and calls that failed, since construction.
  std::uint64_t sent() const { return sent_; }
  std::uint64_t failed() const { return failed_; }

 private:
  struct Waiter {
    std::uint64_t seq;  // answered by the first call that covers this request
    Done done;
  };
  struct GroupState {
    std::uint64_t wanted = 0;     // requests made
    std::uint64_t sent_upto = 0;  // requests covered by calls started
    bool flush = false;           // a queued request asked for a flush
    std::set<std::uint32_t> after;
    std::optional<BackgroundCall> call;
    std::uint64_t call_seq = 0;
    std::vector<Waiter> waiters;
    bool queued() const { return wanted > sent_upto; }
  };
  bool held(const GroupState& s) const;
  void start(std::uint32_t group, GroupState& s);
  // Moves the waiters covered by requests up to `upto` to ready_ with this outcome.
  void answer(GroupState& s, std::uint64_t upto, const Status& status);

  zmq::context_t& ctx_;
  MessageLimits limits_;
  Build build_;
  Locate locate_;
  std::chrono::milliseconds timeout_;
  std::map<std::uint32_t, GroupState> groups_;
  std::vector<BackgroundCall> abandoned_;       // kept until their threads end
  std::vector<std::pair<Done, Status>> ready_;  // callbacks for the next pump()
  std::uint64_t sent_ = 0;
  std::uint64_t failed_ = 0;
};

}  // namespace groupsgd::coordinator
