#include "groupsgd/coordinator/run_summary.h"

#include <sstream>

#include "groupsgd/coordinator/trainer_accounting.h"

namespace groupsgd::coordinator {

using adaptive::WorkerRecord;
using adaptive::WorkerRole;
using adaptive::WorkerState;

namespace {

bool deadOutsideFailedGroup(const WorkerRecord& w, const FinalStats& stats) {
  return (w.state == WorkerState::kDead || w.state == WorkerState::kQuarantined) &&
         stats.failed_group_members.count(w.id) == 0;
}

nlohmann::json groupJson(const GroupFlush& f) {
  const groupps::GroupStats& g = f.stats;
  return {{"group", f.group},
          {"steps", g.step},
          {"samples_received", g.samples_received},
          {"samples_dropped", g.samples_dropped},
          {"late_gradients", g.late_gradients},
          {"steps_cut", g.steps_cut},
          {"bad_messages", g.bad_messages},
          {"exchanges", g.exchanges},
          {"refused_exchanges", g.refused_exchanges},
          {"identity_refused", g.identity_refused},
          {"learning_rate", g.learning_rate},
          {"run_samples", g.run_samples}};
}

nlohmann::json centralJson(const centralps::CentralStats& c) {
  nlohmann::json standby;  // null: no replication_listen
  if (c.standby_configured) {
    standby = {{"attached", c.standby_attached},
               {"acked_version", c.standby_acked_version},
               {"losses", c.standby_losses},
               {"max_lag_versions", c.standby_max_lag},
               {"mean_ack_wait_ms", c.standby_ack_wait_ms},
               {"alone", c.standby_alone},
               {"uncommitted_deltas", c.uncommitted_deltas}};
  }
  return {{"version", c.version},
          {"standby", standby},
          {"updates_applied", c.updates_applied},
          {"updates_refused", c.updates_refused},
          {"samples_refused", c.samples_refused},
          {"bad_messages", c.bad_messages},
          {"mean_staleness", c.mean_staleness},
          {"max_staleness", c.max_staleness},
          {"checkpoint_version", c.checkpoint_version},
          {"checkpoint_failures", c.checkpoint_failures}};
}

}  // namespace

RunSummary summarizeRun(const Registry& registry, const FinalStats& stats) {
  RunSummary r;
  r.bad_messages = stats.coordinator_bad_messages;
  std::map<std::uint64_t, std::uint64_t> acknowledged;  // per worker, over all groups
  for (const GroupFlush& f : stats.groups) {
    const groupps::GroupStats& g = f.stats;
    for (const auto& [id, n] : g.acknowledged) acknowledged[id] += n;
    r.samples_received += g.samples_received;
    r.samples_dropped += g.samples_dropped;
    r.samples_unaccounted += g.samples_pending + g.samples_in_flight;  // 0 after a clean flush
    r.late_gradients += g.late_gradients;
    r.steps_cut += g.steps_cut;
    r.bad_messages += g.bad_messages;
    r.group_stats.push_back(groupJson(f));
  }
  if (stats.central) {
    r.samples_applied = stats.central->samples_applied;
    r.central_version = stats.central->version;
    r.bad_messages += stats.central->bad_messages;
    r.central = centralJson(*stats.central);
  }
  // What each trainer trained is what the live groups counted from it (a worker that
  // died cannot report its last steps; one whose push answer came too late reports it as
  // lost although its group counted it); a report that disagrees beyond its unanswered
  // pushes breaks the accounting.
  for (const auto& [id, w] : registry.all()) {
    if (w.role != WorkerRole::kTrainer) continue;
    const ReconciledTrainer t =
        reconcileTrainer({w.samples_trained, w.samples_unconfirmed, acknowledged[id],
                          w.state == WorkerState::kLeft ||
                              (w.reported_after_death && stats.failed_group_members.count(id) != 0),
                          stats.failed_group_members.count(id) != 0});
    if (!t.consistent) {
      r.worker_reports_ok = false;
      std::ostringstream line;
      line << "worker " << id << " reported " << w.samples_trained << " samples ("
           << w.samples_unconfirmed << " unconfirmed), its groups counted " << acknowledged[id];
      r.inconsistent_reports.push_back(line.str());
    }
    if (deadOutsideFailedGroup(w, stats)) r.samples_trained_by_dead_workers += t.credited;
    r.samples_counted_unanswered += t.counted_unanswered;
    r.credited[id] = t.credited;
    r.samples_trained += t.credited;
  }
  // A failed group's unflushed progress never reaches the central PS and cannot be
  // asked for: it is what the trainers reported beyond what was applied or dropped
  // elsewhere. It must lie between 0 and what the failed groups' members trained.
  bool lost_ok = true;
  if (stats.groups_failed) {
    for (auto id : stats.failed_group_members) {
      auto it = r.credited.find(id);
      if (it != r.credited.end()) r.lost_bound += it->second;
    }
    const std::uint64_t known = r.samples_applied + r.samples_dropped + r.samples_unaccounted;
    lost_ok = r.samples_trained >= known && r.samples_trained - known <= r.lost_bound;
    r.samples_lost_in_failed_groups = r.samples_trained >= known ? r.samples_trained - known : 0;
    r.samples_dropped += r.samples_lost_in_failed_groups;
  }
  r.accounting_ok =
      r.samples_trained == r.samples_applied + r.samples_dropped && lost_ok && r.worker_reports_ok;
  for (const auto& [id, w] : registry.all()) {
    if (w.role != WorkerRole::kTrainer) continue;
    r.worker_stats.push_back({{"id", id},
                              {"name", w.name},
                              {"group", w.group},
                              {"batch", w.batch_size},
                              {"steps", w.steps},
                              {"samples", r.credited[id]},
                              {"state", workerStateName(w.state)},
                              {"compute_ms", w.compute_ms},
                              {"comm_ms", w.comm_ms},
                              {"wait_ms", w.wait_ms},
                              {"total_compute_s", w.total_compute_ms / 1000},
                              {"total_comm_s", w.total_comm_ms / 1000},
                              {"total_wait_s", w.total_wait_ms / 1000}});
  }
  return r;
}

nlohmann::json RunSummary::toJson() const {
  return {{"samples_trained", samples_trained},
          {"samples_received", samples_received},
          {"samples_applied", samples_applied},
          {"samples_dropped", samples_dropped},
          {"samples_unaccounted", samples_unaccounted},
          {"samples_lost_in_failed_groups", samples_lost_in_failed_groups},
          {"samples_trained_by_dead_workers", samples_trained_by_dead_workers},
          {"late_gradients", late_gradients},
          {"steps_cut", steps_cut},
          {"bad_messages", bad_messages},
          {"central_version", central_version},
          {"accounting_ok", accounting_ok},
          {"worker_reports_ok", worker_reports_ok},
          {"samples_counted_unanswered", samples_counted_unanswered},
          {"worker_stats", worker_stats},
          {"group_stats", group_stats},
          {"central", central}};
}

}  // namespace groupsgd::coordinator
