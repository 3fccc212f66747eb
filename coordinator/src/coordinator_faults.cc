// The coordinator's failure handling (docs/reliability.md): quarantine learned from the
// group PSes, failed node daemons and their groups, and what a restarted head reports.
// All of it runs on the coordinator thread.
#include <algorithm>
#include <cstdio>

#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

void Coordinator::pollGroups() {
  // One group per heartbeat period, round robin, with a short deadline, on a thread of
  // its own (readGroupPoll() reads the answer): the group PSes report whom they
  // quarantined and how many replays they refused.
  schedule_.poll = Clock::now() + std::chrono::milliseconds(cfg_.heartbeat_ms);
  if (fleet_->ready() == 0 || stopping() || calls_->inFlight("group poll")) return;
  const auto stale = std::chrono::milliseconds(2ull * cfg_.heartbeat_ms);
  for (std::uint32_t tries = 0; tries < fleet_->ready(); ++tries) {
    const auto g = static_cast<std::uint32_t>(schedule_.poll_group++ % fleet_->ready());
    if (groupFailed(g)) continue;
    if (fleet_->node(g) != 0) {
      // A node that has gone quiet is judged by its heartbeats, not asked here.
      const WorkerRecord* node = registry_.find(fleet_->node(g));
      if (node == nullptr || Clock::now() - node->last_seen > stale) continue;
    }
    OutMessage out(cfg_.job_id, 0);
    out.header().getBody().initGroupStatsQuery();
    const auto timeout =
        std::chrono::milliseconds(std::clamp<std::uint32_t>(cfg_.heartbeat_ms, 200, 1000));
    CallTarget link = fleet_->link(g);
    calls_->start("group poll", link, std::move(out), timeout,
                  [this, g, endpoint = link.endpoint](Result<InMessage> reply) {
                    readGroupPoll(g, endpoint, std::move(reply));
                  });
    return;
  }
}

void Coordinator::readGroupPoll(std::uint32_t g, const std::string& endpoint,
                                Result<InMessage> reply) {
  // Not after the stop (the accounting is being settled), nor from a PS since replaced.
  if (stopping() || groupFailed(g) || fleet_->endpoint(g) != endpoint) return;
  if (!reply || reply->kind() != BodyKind::GROUP_STATS) return;
  auto s = reply->header().getBody().getGroupStats();
  failures_.replays(g, s.getReplayedPushes());
  for (auto q : s.getQuarantined()) markQuarantined(q, g);
  // The lr schedule at work (groupsgdctl groups, metrics, the progress line).
  fleet_->noteSchedule(g, s.getLearningRate(), s.getRunSamples());
  if (metrics_ != nullptr && s.getLearningRate() > 0) {
    metrics_
        ->gauge("group_learning_rate", "the group optimizer's lr at its last step",
                {{"group", std::to_string(g)}})
        .set(s.getLearningRate());
  }
}

void Coordinator::markQuarantined(std::uint64_t worker, std::uint32_t group) {
  WorkerRecord* w = registry_.find(worker);
  if (w == nullptr || w->state == WorkerState::kQuarantined || w->state == WorkerState::kLeft) {
    return;
  }
  const bool was_active = w->state == WorkerState::kActive;
  w->state = WorkerState::kQuarantined;
  admission_.quarantine(*w);
  GSGD_WARN("worker " << worker << " (" << w->host << " pid " << w->pid << ") quarantined: group "
                      << group << " refused its updates repeatedly");
  event("quarantine", "worker " + std::to_string(worker) + " (" + w->name +
                          ") quarantined by group " + std::to_string(group) +
                          " for repeated bad updates");
  if (exporter_ != nullptr) exporter_->countQuarantine();
  if (!was_active || w->role != WorkerRole::kTrainer) return;
  releaseData(*w, "quarantined");
  if (adaptive_) {
    adaptive_->forget(worker);
    adaptive_->membershipChanged("worker " + std::to_string(worker) + " quarantined");
  }
  if (!stopping()) configureGroup(w->group);
}

void Coordinator::failNode(const WorkerRecord& node, const std::string& why) {
  failures_.spares().dropNode(node.id);  // its unused group PSes died with it
  for (std::uint32_t g = 0; g < fleet_->slots(); ++g) {
    if (fleet_->node(g) == node.id && !groupFailed(g)) {
      failGroup(g, "node " + std::to_string(node.id) + " (" + node.host + ") " + why);
    }
  }
}

const WorkerRecord* Coordinator::groupNode(std::uint32_t group) const {
  const auto it = registry_.all().find(fleet_->node(group));
  if (it == registry_.all().end() || it->second.role != WorkerRole::kNode) return nullptr;
  return &it->second;
}

std::optional<std::string> Coordinator::nodeGone(std::uint32_t group, bool judge_silence) const {
  const WorkerRecord* node = groupNode(group);
  if (node == nullptr) return std::nullopt;  // a PS of this daemon's own
  const std::string who = "node " + std::to_string(node->id) + " (" + node->host + ") ";
  if (node->state != WorkerState::kActive) {
    return who + (node->state == WorkerState::kLeft ? "left" : "died") + " while the run stopped";
  }
  if (const auto silent = Clock::now() - node->last_seen;
      judge_silence && silent >= livenessLimit()) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silent).count();
    return who + "silent for " + std::to_string(ms) + " ms while the run stopped";
  }
  return std::nullopt;
}

void Coordinator::awaitGroupNodes(Clock::time_point heard_since) {
  // Every node that holds a live group must have been heard from since the stop began.
  // One that died before or during the drain stays silent, and after the liveness limit
  // nodeGone() names it, so its groups fail at once instead of by a flush call that times
  // out 15 s later. (Trainers that heartbeat while they wait on a dead PS hear "stop" and
  // leave at once: the drain no longer lasts long enough to reveal a dead node by itself.)
  // A live node heartbeats every heartbeat_ms: the wait costs it at most a period.
  const auto deadline = Clock::now() + livenessLimit();
  while (Clock::now() < deadline) {
    bool waiting = false;
    for (std::uint32_t g = 0; g < fleet_->ready() && !waiting; ++g) {
      const WorkerRecord* node = groupNode(g);
      if (groupFailed(g) || node == nullptr) continue;
      const auto silent = Clock::now() - node->last_seen;
      // Not heard since the stop, and not yet past the limit: wait for a heartbeat, or
      // for the limit.
      waiting = node->state == WorkerState::kActive && node->last_seen < heard_since &&
                silent < livenessLimit();
    }
    if (!waiting) return;
    serveOnce(std::chrono::milliseconds(50));
  }
}

void Coordinator::failGroupAtStop(std::uint32_t group, const std::string& why) {
  fleet_->markFailed(group);
  configs_->cancel(group, unavailable("group " + std::to_string(group) + " failed (" + why + ")"));
  // Its trainers have left or are gone: nobody is reassigned. Each is credited with its
  // own final report, and what the group held unflushed is counted as lost.
  std::size_t members = 0;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role == WorkerRole::kTrainer && w.group == group) {
      failures_.lostWith(id);
      ++members;
    }
  }
  GSGD_WARN("group " << group << " failed while the run stopped (" << why << ")");
  event("group_failure", "group " + std::to_string(group) + " failed while the run stopped (" +
                             why + "); its unflushed progress of " + std::to_string(members) +
                             " worker(s) is counted as lost");
  const double t = run_log_.trainingS();
  failures_.record({{"group", group},
                    {"why", why},
                    {"t_s", t},
                    {"at_stop", true},
                    {"reassigned", nlohmann::json::array()}});
}

std::optional<std::uint32_t> Coordinator::liveGroupFor() const {
  std::optional<std::uint32_t> best;
  std::size_t best_size = 0;
  const auto slots = fleet_->ready();
  for (std::uint32_t g = 0; g < slots; ++g) {
    if (groupFailed(g)) continue;
    const std::size_t n = registry_.groupMembers(g).size();
    if (!best || n < best_size) {
      best = g;
      best_size = n;
    }
  }
  return best;
}

void Coordinator::failGroup(std::uint32_t group, const std::string& why) {
  fleet_->markFailed(group);
  // A configuration on its way to the dead PS is abandoned; who waited for it hears why.
  configs_->cancel(group, unavailable("group " + std::to_string(group) + " failed (" + why + ")"));
  std::vector<std::uint64_t> members;
  for (const auto* m : registry_.groupMembers(group)) members.push_back(m->id);
  event("group_failure", "group " + std::to_string(group) + " failed (" + why + "); " +
                             std::to_string(members.size()) +
                             " worker(s) to reassign; its unflushed progress is dropped");
  for (auto id : members) failures_.lostWith(id);
  // Trainers declared dead while in it (often just before: stuck on its silent PS) lose
  // their count with it too; they are credited with their own last report.
  for (const auto& [id, w] : registry_.all()) {
    if (w.role == WorkerRole::kTrainer && w.group == group && w.state != WorkerState::kActive &&
        w.state != WorkerState::kLeft) {
      failures_.lostWith(id);
    }
  }
  // Each member gets a new group and epoch; it learns them from its next heartbeat (sent
  // while it waits on the dead PS; its old epoch is told to register again) and asks the
  // coordinator for its assignment again. Best: the same group again, its slot
  // re-created on a surviving node.
  if (recreateGroup(group, members)) {
    const double t = run_log_.trainingS();
    nlohmann::json moved = nlohmann::json::array();
    for (auto id : members) moved.push_back({{"worker", id}, {"to_group", group}});
    failures_.record({{"group", group},
                      {"why", why},
                      {"t_s", t},
                      {"reassigned", moved},
                      {"recreated_on_node", fleet_->node(group)}});
    return;
  }
  std::set<std::uint32_t> gaining;
  nlohmann::json moved = nlohmann::json::array();
  for (auto id : members) {
    auto live = liveGroupFor();
    if (!live) break;
    WorkerRecord* w = registry_.find(id);
    w->group = *live;
    w->epoch = ++epoch_;
    w->moving_from.reset();
    gaining.insert(*live);
    moved.push_back({{"worker", id}, {"to_group", *live}});
  }
  for (const auto& [id, w] : registry_.all()) {
    if (w.moving_from == group) registry_.find(id)->moving_from.reset();
  }
  if (adaptive_) adaptive_->membershipChanged("group " + std::to_string(group) + " failed");
  for (auto g : gaining) configureGroup(g);
  const double t = run_log_.trainingS();
  failures_.record({{"group", group}, {"why", why}, {"t_s", t}, {"reassigned", moved}});
  if (moved.size() < members.size()) {
    GSGD_ERROR("no live group is left for " << members.size() - moved.size() << " worker(s)");
  }
}

CurveKeys Coordinator::keysForNode(const WorkerRecord& node) const {
  CurveKeys k = curve_;
  if (k.enabled() && !node.public_key.empty()) k.server_public_key = node.public_key;
  return k;
}

bool Coordinator::recreateGroup(std::uint32_t group, const std::vector<std::uint64_t>& members) {
  auto spare = failures_.spares().take();
  if (!spare) return false;
  const WorkerRecord* host = registry_.find(spare->node);
  fleet_->replace(group, spare->endpoint,
                  clientSocketOptions(host != nullptr ? keysForNode(*host) : curve_), spare->node);
  for (auto id : members) {
    WorkerRecord* w = registry_.find(id);
    w->group = group;
    w->epoch = ++epoch_;
    w->moving_from.reset();
  }
  for (const auto& [id, w] : registry_.all()) {
    if (w.moving_from == group) registry_.find(id)->moving_from.reset();
  }
  // The spare PS learns its group id (and members) from this first configuration. One
  // that does not take it fails the group again: the next spare, or the live groups.
  configureGroup(group, false, [this, group, slot = *spare, n = members.size()](const Status& s) {
    const bool still_there = !groupFailed(group) && fleet_->endpoint(group) == slot.endpoint;
    if (!s) {
      GSGD_WARN("spare group PS " << slot.endpoint << " of node " << slot.node
                                  << " did not take group " << group << ": " << s.toString());
      if (still_there)
        failGroup(group, "its spare group PS at " + slot.endpoint + " did not take it");
      return;
    }
    if (!still_there) return;
    const WorkerRecord* node = registry_.find(slot.node);
    event("group_recreated", "group " + std::to_string(group) + " re-created on node " +
                                 std::to_string(slot.node) + " (" +
                                 (node != nullptr ? node->host : std::string("?")) + ") at " +
                                 slot.endpoint + " with " + std::to_string(n) + " worker(s)");
    if (adaptive_) adaptive_->membershipChanged("group " + std::to_string(group) + " re-created");
  });
  return true;
}

void Coordinator::noteReregistration() {
  head_.noteTrainersBack(registry_.activeTrainers(), cfg_.workers, run_log_.uptimeS());
}

void Coordinator::reportSkippedCheckpoints() {
  for (const auto& why : head_.start().skipped_checkpoints) {
    event("checkpoint_skipped", "unusable checkpoint " + why +
                                    "; resumed from the previous good one, " +
                                    head_.start().resumed_from + " (version " +
                                    std::to_string(head_.start().resumed_version) + ")");
  }
}

void Coordinator::noteCheckpointFailures(proto::CentralStats::Reader s) {
  const std::uint64_t failures = s.getCheckpointFailures();
  // The central PS logged the error itself (with errno's text); this makes it an event
  // and says what still holds.
  const std::uint64_t newly = head_.newCheckpointFailures(failures);
  if (newly == 0) return;
  GSGD_ERROR(newly << " checkpoint write(s) failed (" << failures << " in all); the newest "
                   << "good checkpoint is still version " << s.getCheckpointVersion()
                   << "; training goes on");
  event("checkpoint_failure",
        std::to_string(newly) + " checkpoint write(s) failed (" + std::to_string(failures) +
            " in all, see the log for the error); the newest good checkpoint is still version " +
            std::to_string(s.getCheckpointVersion()) + "; training goes on");
}

}  // namespace groupsgd::coordinator
