// The end of a run, in order: drain the trainers, flush every group into the central PS
// (all at once, off the loop), ask the central PS for its final counters, let the
// evaluator measure the final model, and build the summary; then, for a restarted head,
// linger for trainers still in their back-off. The loop keeps serving throughout.
#include <algorithm>
#include <set>

#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/coordinator/run_summary.h"

namespace groupsgd::coordinator {

nlohmann::json Coordinator::finish(const std::string& reason) {
  GSGD_INFO("stopping: " << reason);
  phase_ = Phase::kStopping;
  const double elapsed = run_log_.trainingS();
  const bool now = deps_.stop_now != nullptr && deps_.stop_now->load();
  drainTrainers(now, Clock::now());
  FinalStats stats;
  stats.coordinator_bad_messages = bad_messages_;
  flushGroups(&stats);  // may fail a group whose node is gone (failGroupAtStop)
  stats.groups_failed = failures_.any();
  stats.failed_group_members = failures_.failedGroupMembers();
  queryCentral(&stats);
  const Accuracy final_acc = stopEvaluators(stats.central ? stats.central->version : 0, now);
  calls_->finish("keep best");  // the best model's file, before the summary names it
  // The accounting (run_summary.h); trainers keep the samples it credits them with.
  const RunSummary run = summarizeRun(registry_, stats);
  for (const auto& [id, samples] : run.credited) registry_.find(id)->samples_trained = samples;
  // The final values: a scrape after the end (a --serve job's series stay) shows no
  // trainer still active and the central PS's last counts, so no alert reads it as stuck.
  updateMetrics();
  if (exporter_ != nullptr && stats.central) exporter_->exportCentral(*stats.central);
  for (const auto& line : run.inconsistent_reports) GSGD_ERROR(line);
  return summaryJson(run, reason, elapsed, final_acc);
}

// Step 1: tell trainers to stop (heartbeat replies) and wait until each has left or died.
// A job stopped without --drain does not wait: its trainers learn at their next contact.
void Coordinator::drainTrainers(bool now, Clock::time_point stop_began) {
  const auto drain_deadline =
      now ? Clock::now()
          : Clock::now() +
                std::chrono::milliseconds(cfg_.step_deadline_ms +
                                          4ull * cfg_.heartbeat_ms * cfg_.heartbeat_misses);
  if (deps_.control != nullptr) deps_.control->setRefusing("the daemon is stopping");
  while (registry_.activeTrainers() > 0 && Clock::now() < drain_deadline) {
    serveOnce(std::chrono::milliseconds(50));
    serveControl();
  }
  calls_->finish("checkpoint");  // a checkpoint requested just before the stop
  // A node lost during the drain takes its groups with it: failed now, so nothing below
  // (configurations, the flush) waits on their silent PSes.
  awaitGroupNodes(stop_began);
  for (std::uint32_t g = 0; g < fleet_->ready(); ++g) {
    if (groupFailed(g)) continue;
    if (auto gone = nodeGone(g)) failGroupAtStop(g, *gone);
  }
  // Those that did not hear "stop" in time are gone: their groups credit them (below).
  std::set<std::uint32_t> their_groups;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role != WorkerRole::kTrainer || w.state != WorkerState::kActive) continue;
    registry_.find(id)->state = WorkerState::kDead;
    releaseData(w, "did not leave before the drain deadline");
    their_groups.insert(w.group);
    GSGD_WARN("worker " << id << " did not leave before the drain deadline: declared dead");
    event("death", "worker " + std::to_string(id) + " did not leave before the drain deadline");
  }
  // They may still be running: out of their groups before the flush, or a step of theirs
  // completing between the groups' counts and the central PS's would be applied uncounted.
  for (std::uint32_t g : their_groups) {
    if (groupFailed(g)) continue;
    configureGroup(g, false, [g](const Status& s) {
      if (!s)
        GSGD_WARN("could not take the remaining trainers out of group " << g << ": "
                                                                        << s.toString());
    });
  }
  // Every configuration on its way returns before the flush (and cannot reach a group
  // after it); the loop serves meanwhile (serveOnce pumps the queue).
  const auto configured_by = Clock::now() + kRpcTimeout + std::chrono::seconds(1);
  while (!configs_->idle() && Clock::now() < configured_by) {
    serveOnce(std::chrono::milliseconds(20));
    serveControl();
  }
}

// Step 2: flush every group into the central PS and collect its counters. The flushes go
// out to every group at once, each on a thread of its own, and the loop keeps serving
// while they are on their way (a slow group costs its own timeout, not the sum of all).
// A group that cannot flush (its node left or went silent while the run stopped, or it
// does not answer) fails here as it would have mid-run: what it held is counted as lost,
// within the bound of what its members trained, instead of breaking the accounting.
void Coordinator::flushGroups(FinalStats* stats) {
  for (std::uint32_t g = 0; g < fleet_->ready(); ++g) {
    if (groupFailed(g)) continue;  // gone: what it held is counted as lost
    // Only a node that left or was declared dead: silence was judged after the drain.
    if (auto gone = nodeGone(g, /*judge_silence=*/false)) {
      failGroupAtStop(g, *gone);
      continue;
    }
    OutMessage out(cfg_.job_id, 0);
    out.header().getBody().initFlush();
    calls_->start(
        "flush", fleet_->link(g), std::move(out), std::chrono::milliseconds(15000),
        [this, g, stats](Result<InMessage> reply) { readFlush(g, std::move(reply), stats); });
  }
  while (calls_->inFlight("flush")) {  // heartbeats, control requests, the watchdog
    serveOnce(std::chrono::milliseconds(20));
    serveControl();
  }
  // In group order, whatever order the answers came in.
  std::sort(stats->groups.begin(), stats->groups.end(),
            [](const GroupFlush& a, const GroupFlush& b) { return a.group < b.group; });
}

void Coordinator::readFlush(std::uint32_t g, Result<InMessage> reply, FinalStats* stats) {
  if (!reply || reply->kind() != BodyKind::GROUP_STATS) {
    const std::string why = reply ? "unexpected answer" : reply.status().toString();
    GSGD_ERROR("group " << g << " did not flush: " << why);
    failGroupAtStop(g, "it did not answer the final flush (" + why + ")");
    return;
  }
  auto s = reply->header().getBody().getGroupStats();
  stats->groups.push_back({g, groupps::fromProto(s)});
  failures_.replays(g, s.getReplayedPushes());
  for (auto q : s.getQuarantined()) markQuarantined(q, g);
}

// Step 3: the central PS's counters, once every group has flushed into it (asked off the
// loop like the flushes, so heartbeats are still answered meanwhile).
void Coordinator::queryCentral(FinalStats* stats) {
  OutMessage out(cfg_.job_id, 0);
  out.header().getBody().initCentralStatsQuery();
  calls_->start(
      "final central stats", central_, std::move(out), kRpcTimeout,
      [this, stats](Result<InMessage> reply) { readCentralFinal(std::move(reply), stats); });
  while (calls_->inFlight("final central stats")) {  // heartbeats, control requests, the watchdog
    serveOnce(std::chrono::milliseconds(20));
    serveControl();
  }
}

void Coordinator::readCentralFinal(Result<InMessage> reply, FinalStats* stats) {
  if (!reply || reply->kind() != BodyKind::CENTRAL_STATS) {
    GSGD_ERROR("central PS did not report its counters");
    return;
  }
  stats->central = centralps::fromProto(reply->header().getBody().getCentralStats());
}

// Step 4: let the evaluator measure the final model, then stop it (and the nodes).
Coordinator::Accuracy Coordinator::stopEvaluators(std::uint64_t final_version, bool now) {
  const auto eval_deadline = Clock::now() + std::chrono::milliseconds(now ? 0 : 5000);
  final_version_ = final_version;
  phase_ = Phase::kFinalReading;  // their heartbeat answers say "measure now"
  while (registry_.activeOfRole(WorkerRole::kEvaluator) > 0 &&
         latestAccuracy().version < final_version && Clock::now() < eval_deadline) {
    serveOnce(std::chrono::milliseconds(50));
  }
  const Accuracy final_acc = latestAccuracy();
  phase_ = Phase::kStoppingEvaluators;
  // Evaluators first, then the nodes (a node's central shard serves the evaluators'
  // reads); a silent evaluator holds them back a heartbeat period and a second at most.
  nodes_stop_at_ = Clock::now() + std::chrono::milliseconds(cfg_.heartbeat_ms + 1000ull);
  const auto stop_deadline =
      Clock::now() + std::chrono::milliseconds(3ull * cfg_.heartbeat_ms + 1500);
  while ((registry_.activeOfRole(WorkerRole::kEvaluator) > 0 ||
          registry_.activeOfRole(WorkerRole::kNode) > 0) &&
         Clock::now() < stop_deadline) {
    serveOnce(std::chrono::milliseconds(50));
  }
  return final_acc;
}

// Step 5: the closing summary: the accounting and what this coordinator saw.
nlohmann::json Coordinator::summaryJson(const RunSummary& run, const std::string& reason,
                                        double elapsed, const Accuracy& final_acc) const {
  nlohmann::json summary = run.toJson();
  summary.update({
      {"mode", modeName(cfg_.mode)},
      {"workers", cfg_.workers},
      {"groups", cfg_.groupCount()},
      {"exchange_period", cfg_.exchangePeriod()},
      {"stop_reason", reason},
      {"gradient_compression", compressionSummaryJson()},
      {"target_acc", cfg_.target_acc},
      {"target_loss", cfg_.target_loss},
      {"reached", run_log_.timeToTargetS().has_value()},
      {"time_to_target_s",
       run_log_.timeToTargetS() ? nlohmann::json(*run_log_.timeToTargetS()) : nlohmann::json()},
      {"acc_at_target", run_log_.timeToTargetS() && run_log_.accAtTarget() >= 0
                            ? nlohmann::json(run_log_.accAtTarget())
                            : nlohmann::json()},
      {"loss_at_target", run_log_.timeToTargetS() && run_log_.lossAtTarget() >= 0
                             ? nlohmann::json(run_log_.lossAtTarget())
                             : nlohmann::json()},
      {"elapsed_s", elapsed},
      {"final_test_acc", final_acc.value < 0 ? nlohmann::json() : nlohmann::json(final_acc.value)},
      {"final_acc_version", final_acc.version},
      {"final_test_loss", final_acc.loss < 0 ? nlohmann::json() : nlohmann::json(final_acc.loss)},
      {"stale_heartbeats", admission_.counters().stale_heartbeats},
      {"curve", curveJson()},
      {"replayed_pushes", failures_.replaysTotal()},
      {"quarantined", admission_.counters().quarantined},
      {"quarantine_refusals", admission_.counters().quarantine_refusals},
      {"node_failures", failures_.json(run.samples_lost_in_failed_groups, run.lost_bound)},
      {"head_restart",
       head_.restartJson(cfg_.checkpoint_every_versions, cfg_.checkpoint_interval_s)},
      {"evaluation", evaluators_.summaryJson(run_log_.uptimeS())},
      // As it is at the end: a live `set` or reload (optimizer.lr, ...) shows here.
      {"config", toJson(cfg_)},
      {"regroups", run_log_.regroups()},
      {"stage", adaptive_ ? policy::stageName(adaptive_->stage()) : "none"},
      {"events", run_log_.events()},
      {"data_allocation", cfg_.data_ranges ? "ranges" : "shards"},
  });
  if (cfg_.data_ranges) {
    summary["epochs"] = data_ledger_.summary();
    summary["epoch_ledger_resumed"] = ledger_resumed_;
  }
  summary.update(best_.summaryJson());
  return summary;
}

void Coordinator::lingerForLateTrainers(const std::atomic<bool>& stop_requested) {
  // A fresh head's late trainers are still within their --connect-timeout-ms and find
  // the run over only if they come in time; a restarted head's ones were already
  // running, and would retry for their --give-up-s against a head that is gone.
  // (Without a checkpoint directory there is no restart: the incarnation is a time.)
  if (head_.start().state_file.empty() || head_.start().incarnation <= 1 ||
      cfg_.finish_linger_s <= 0)
    return;
  if (deps_.stop_now != nullptr && deps_.stop_now->load()) return;
  if (admission_.trainersSeen(registry_) >= cfg_.workers) return;
  const auto until = Clock::now() + std::chrono::milliseconds(
                                        static_cast<std::int64_t>(cfg_.finish_linger_s * 1000));
  GSGD_INFO("the run is over with " << admission_.trainersSeen(registry_) << " of " << cfg_.workers
                                    << " trainers back since the restart: telling late ones "
                                    << "`finished` for up to " << cfg_.finish_linger_s << " s");
  while (admission_.trainersSeen(registry_) < cfg_.workers && Clock::now() < until &&
         !stop_requested.load() && !shutdown_requested_) {
    serveOnce(std::chrono::milliseconds(50));
    serveControl();
  }
  GSGD_INFO("stopped lingering: " << admission_.trainersSeen(registry_) << " of " << cfg_.workers
                                  << " trainers seen since the restart");
}

}  // namespace groupsgd::coordinator
