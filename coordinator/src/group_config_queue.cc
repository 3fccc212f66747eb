#include "groupsgd/coordinator/group_config_queue.h"

#include <algorithm>
#include <thread>

namespace groupsgd::coordinator {

GroupConfigQueue::GroupConfigQueue(zmq::context_t& ctx, MessageLimits limits, Build build,
                                   Locate locate, std::chrono::milliseconds timeout)
    : ctx_(ctx),
      limits_(limits),
      build_(std::move(build)),
      locate_(std::move(locate)),
      timeout_(timeout) {}

void GroupConfigQueue::request(std::uint32_t group, bool flush, Done done,
                               const std::vector<std::uint32_t>& after) {
  GroupState& s = groups_[group];
  ++s.wanted;
  s.flush = s.flush || flush;
  for (auto a : after) {
    if (a != group) s.after.insert(a);
  }
  if (done) s.waiters.push_back({s.wanted, std::move(done)});
  if (!s.call && !held(s)) start(group, s);
}

void GroupConfigQueue::whenSettled(std::uint32_t group, Done done) {
  GroupState& s = groups_[group];
  if (!s.queued() && !s.call) {
    ready_.emplace_back(std::move(done), Status::ok());
  } else {
    s.waiters.push_back({s.wanted, std::move(done)});
  }
}

void GroupConfigQueue::cancel(std::uint32_t group, const Status& why) {
  auto it = groups_.find(group);
  if (it == groups_.end()) return;
  GroupState& s = it->second;
  if (s.call) abandoned_.push_back(std::move(*s.call));
  s.call.reset();
  s.sent_upto = s.wanted;
  s.flush = false;
  s.after.clear();
  answer(s, s.wanted, why);
}

bool GroupConfigQueue::held(const GroupState& s) const {
  // Only a group that is not itself waiting holds others back: two regroups in a row
  // cannot make two groups wait for each other.
  return std::any_of(s.after.begin(), s.after.end(), [&](std::uint32_t a) {
    auto it = groups_.find(a);
    if (it == groups_.end()) return false;
    const GroupState& o = it->second;
    return o.call.has_value() || (o.queued() && o.after.empty());
  });
}

void GroupConfigQueue::start(std::uint32_t group, GroupState& s) {
  const std::uint64_t upto = s.wanted;
  const bool flush = s.flush;
  s.sent_upto = upto;
  s.flush = false;
  s.after.clear();
  auto msg = build_(group, flush);
  if (!msg) {
    ++failed_;
    answer(s, upto, msg.status());
    return;
  }
  s.call = BackgroundCall::start(ctx_, locate_(group), limits_, std::move(*msg), timeout_);
  s.call_seq = upto;
  ++sent_;
}

void GroupConfigQueue::answer(GroupState& s, std::uint64_t upto, const Status& status) {
  auto covered = std::stable_partition(s.waiters.begin(), s.waiters.end(),
                                       [&](const Waiter& w) { return w.seq > upto; });
  for (auto it = covered; it != s.waiters.end(); ++it)
    ready_.emplace_back(std::move(it->done), status);
  s.waiters.erase(covered, s.waiters.end());
}

void GroupConfigQueue::pump() {
  std::erase_if(abandoned_, [](const BackgroundCall& c) { return c.ready(); });
  for (auto& [group, s] : groups_) {
    if (!s.call || !s.call->ready()) continue;
    auto reply = s.call->take();
    s.call.reset();
    Status status = Status::ok();
    if (!reply) {
      ++failed_;
      status = Status(reply.status().code(),
                      "group " + std::to_string(group) + ": " + reply.status().message());
    }
    answer(s, s.call_seq, status);
  }
  for (auto& [group, s] : groups_) {
    if (s.queued() && !s.call && !held(s)) start(group, s);
  }
  // Callbacks last, on a list of their own: they may request more.
  auto due = std::move(ready_);
  ready_.clear();
  for (auto& [done, status] : due) done(status);
}

bool GroupConfigQueue::idle() const {
  return ready_.empty() && std::none_of(groups_.begin(), groups_.end(), [](const auto& g) {
           return g.second.call.has_value() || g.second.queued();
         });
}

void GroupConfigQueue::waitIdle(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pump();
  while (!idle() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    pump();
  }
}

}  // namespace groupsgd::coordinator
