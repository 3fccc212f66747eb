// The coordinator's side of the control socket (docs/operations.md lists every method),
// its metrics, the systemd watchdog and configuration reloads. All of it runs on the
// coordinator thread, between ZeroMQ polls.
#include <algorithm>
#include <cstdio>
#include <set>

#include "groupsgd/centralps/central_stats.h"
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/daemon/config_options.h"
#include "groupsgd/ops/sd_notify.h"
#include "groupsgd/ops/version.h"

namespace groupsgd::coordinator {
namespace {

using ojson = nlohmann::ordered_json;

}  // namespace

void Coordinator::serveControl() {
  if (deps_.watchdog && Clock::now() >= schedule_.watchdog) {
    // Pinged from the main loop, so a stuck loop stops the pings and systemd restarts us.
    (void)ops::sdNotifyWatchdog();
    schedule_.watchdog =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(*deps_.watchdog / 2);
  }
  if (deps_.control == nullptr) return;
  while (auto r = deps_.control->tryPop()) handleControl(std::move(*r));
  answerDrainWaiters();
}

void Coordinator::answerDrainWaiters() {
  for (auto it = drain_waiters_.begin(); it != drain_waiters_.end();) {
    const WorkerRecord* w = registry_.find(it->second);
    if (w != nullptr && w->state == WorkerState::kActive) {
      ++it;
      continue;
    }
    ojson result = {{"worker", it->second},
                    {"state", w ? workerStateName(w->state) : "unknown"},
                    {"samples_trained", w ? w->samples_trained : 0}};
    it->first.respond(std::move(result));
    it = drain_waiters_.erase(it);
  }
}

Result<std::uint64_t> Coordinator::findWorker(const nlohmann::json& ref) const {
  for (const auto& [id, w] : registry_.all()) {
    if ((ref.is_number_unsigned() && ref.get<std::uint64_t>() == id) ||
        (ref.is_string() &&
         (ref.get<std::string>() == w.name || ref.get<std::string>() == std::to_string(id)))) {
      return id;
    }
  }
  return invalidArgument("no worker " + ref.dump());
}

ojson Coordinator::statusJson() const {
  std::map<std::string, int> counts = {
      {"active", 0}, {"draining", 0}, {"left", 0}, {"dead", 0}, {"quarantined", 0}};
  for (const auto& [id, w] : registry_.all()) {
    if (w.role != WorkerRole::kTrainer) continue;
    counts[w.draining && w.state == WorkerState::kActive ? "draining" : workerStateName(w.state)]++;
  }
  const Accuracy acc = latestAccuracy();
  ojson s;
  s["state"] = stopping() ? "stopping" : "training";
  s["mode"] = modeName(cfg_.mode);
  s["stage"] = adaptive_ ? policy::stageName(adaptive_->stage()) : "none";
  s["uptime_s"] = run_log_.uptimeS();
  s["elapsed_s"] = run_log_.training() ? ojson(run_log_.trainingS()) : ojson();
  s["workers"] = counts;
  s["groups"] = groupsInUse();
  s["exchange_period"] = fleet_->slots() == 0 ? 0 : fleet_->period(0);
  s["central_version"] = std::max<std::uint64_t>(head_.versionSeen(), acc.version);
  s["samples_trained"] = registry_.samplesTrained();
  s["regroups"] = run_log_.regroups();
  s["test_acc"] = acc.value < 0 ? ojson() : ojson(acc.value);
  s["test_loss"] = acc.loss < 0 ? ojson() : ojson(acc.loss);
  s["evaluation"] = evaluators_.statusJson(run_log_.uptimeS());
  s["last_checkpoint"] = last_checkpoint_ ? *last_checkpoint_ : ojson();
  s["incarnation"] = head_.start().incarnation;
  ojson failed = ojson::array();
  for (std::uint32_t g : fleet_->failedGroups()) {
    failed.push_back(g);
  }
  s["failed_groups"] = failed;
  s["curve"] = curveJson();
  return s;
}

ojson Coordinator::curveJson() const {
  return {{"enabled", curve_.enabled()},
          {"clients_admitted", deps_.zap != nullptr ? deps_.zap->admitted() : 0},
          {"clients_refused", deps_.zap != nullptr ? deps_.zap->refused() : 0},
          {"identity_refused", admission_.counters().identity_refused}};
}

ojson Coordinator::workersJson() const {
  ojson rows = ojson::array();
  for (const auto& [id, w] : registry_.all()) {
    // Only a trainer has a group, a batch and step times; the others show null there.
    const bool trainer = w.role == WorkerRole::kTrainer;
    auto trains = [trainer](const auto& value) { return trainer ? ojson(value) : ojson(); };
    rows.push_back(
        {{"id", id},
         {"name", w.name},
         {"role", workerRoleName(w.role)},
         {"host", w.host},
         {"pid", w.pid},
         {"group", trains(w.group)},
         {"state",
          w.draining && w.state == WorkerState::kActive ? "draining" : workerStateName(w.state)},
         {"batch", trains(w.batch_size)},
         {"steps", trains(w.steps)},
         {"compute_ms", trains(w.compute_ms)},
         {"comm_ms", trains(w.comm_ms)},
         {"wait_ms", trains(w.wait_ms)}});
  }
  return rows;
}

ojson Coordinator::groupsJson() const {
  ojson rows = ojson::array();
  for (std::uint32_t g = 0; g < fleet_->slots(); ++g) {
    auto members = registry_.groupMembers(g);
    std::uint32_t batch = 0;
    ojson ids = ojson::array();
    for (const auto* m : members) {
      batch += m->batch_size;
      ids.push_back(m->id);
    }
    rows.push_back({{"group", g},
                    {"endpoint", fleet_->endpoint(g)},
                    {"members", members.size()},
                    {"workers", ids},
                    {"batch", batch},
                    {"exchange_period", fleet_->period(g)},
                    {"lr", fleet_->learningRate(g)},
                    {"run_samples", fleet_->runSamples(g)},
                    {"failed", groupFailed(g)}});
    rows.back().update(placementJson(g));
    rows.back().update(ojson(compressionJson(g)));
  }
  return rows;
}

Status Coordinator::applySettings(const nlohmann::json& values, ojson* applied, ojson* previous) {
  if (!values.is_object() || values.empty()) {
    return invalidArgument("set needs params {\"values\": {KEY: VALUE, ...}}");
  }
  // Validate everything on a copy first: either all values apply or none.
  GSGD_RETURN_IF_ERROR(daemon::checkSettable(values));
  DaemonConfig next = cfg_;
  GSGD_RETURN_IF_ERROR(applyJson(daemon::nestedSettings(values), &next));
  GSGD_RETURN_IF_ERROR(daemon::validate(next));
  log::Level level;
  if (!log::parseLevel(next.log_level, &level)) return invalidArgument("bad log_level");
  const nlohmann::json before = toJson(cfg_);
  for (auto it = values.begin(); it != values.end(); ++it) {
    std::string path = "/" + it.key();  // "a.b" is a's member b (checked keys only)
    std::replace(path.begin(), path.end(), '.', '/');
    const nlohmann::json::json_pointer at(path);
    (*previous)[it.key()] = before.contains(at) ? ojson(before[at]) : ojson();
    (*applied)[it.key()] = it.value();
  }
  const bool group_settings_changed = groupConfigSettingsDiffer(next, cfg_);
  cfg_ = next;
  log::setLevel(level);
  if (adaptive_) adaptive_->setConfig(cfg_.adaptive);
  if (group_settings_changed) {  // sent with every group configuration
    for (std::uint32_t g = 0; g < fleet_->slots(); ++g) configureGroup(g);
  }
  return Status::ok();
}

void Coordinator::startCheckpoint(PendingRequest& r) {
  OutMessage out(cfg_.job_id, 0);
  out.header().getBody().initCheckpointRequest();
  // Up to 60 s for a large model: answered when the reply is in, so the loop keeps
  // serving heartbeats and the watchdog meanwhile.
  auto request = std::make_shared<PendingRequest>(std::move(r));
  calls_->start(
      "checkpoint", central_, std::move(out), std::chrono::milliseconds(60000),
      [this, request](Result<InMessage> reply) { finishCheckpoint(*request, std::move(reply)); });
}

void Coordinator::finishCheckpoint(PendingRequest& r, Result<InMessage> reply) {
  if (!reply) return r.fail(ControlError::kRefused, reply.status().message());
  if (reply->kind() != BodyKind::CHECKPOINT_DONE) {
    return r.fail(ControlError::kRefused, "unexpected answer");
  }
  auto d = reply->header().getBody().getCheckpointDone();
  if (!d.getOk()) {
    return r.fail(ControlError::kRefused, std::string("checkpoint failed: ") + d.getError().cStr());
  }
  ojson done = {{"version", d.getVersion()},
                {"path", d.getPath().cStr()},
                {"bytes", d.getBytes()},
                {"duration_ms", d.getDurationMs()}};
  last_checkpoint_ = done;
  head_.noteVersion(d.getVersion());
  r.respond(std::move(done));
}

Result<AllowListChange> Coordinator::reloadKeys() {
  if (!deps_.reload_keys)
    return failedPrecondition("CURVE is off: there is no allow-list to reload");
  auto change = deps_.reload_keys();
  if (!change) {
    GSGD_ERROR(
        "allow-list reload refused, keeping the running list: " << change.status().toString());
    return change.status();
  }
  event("keys_reloaded", std::to_string(change->added) + " added, " +
                             std::to_string(change->removed) + " removed, " +
                             std::to_string(change->size) + " admitted");
  return change;
}

void Coordinator::controlReloadKeys(PendingRequest& r) {
  auto change = reloadKeys();
  if (!change) return r.fail(change.status());
  r.respond({{"added", change->added}, {"removed", change->removed}, {"admitted", change->size}});
}

void Coordinator::reloadConfig() {
  (void)ops::sdNotifyReloading();
  if (deps_.reload_keys) (void)reloadKeys();  // SIGHUP re-reads the allow-list too
  if (cfg_.config_file.empty()) {
    GSGD_WARN("SIGHUP: no configuration file to reload (started without --config)");
    (void)ops::sdNotifyReady("reload: nothing to do");
    return;
  }
  DaemonConfig fresh;
  Status s = daemon::loadConfigFile(cfg_.config_file, &fresh);
  if (s) s = daemon::validate(fresh);
  if (!s) {
    // Keep running with the old configuration; say so loudly.
    GSGD_ERROR("reload refused, keeping the running configuration: " << s.toString());
    (void)ops::sdNotifyReady("reload refused: " + s.message());
    return;
  }
  // applySettings is all or nothing: either every run-time key of the file applies or none.
  ojson applied, previous;
  s = applySettings(daemon::reloadableSettings(fresh), &applied, &previous);
  if (!s) {
    GSGD_ERROR("reload refused, keeping the running configuration: " << s.toString());
    (void)ops::sdNotifyReady("reload refused: " + s.message());
    return;
  }
  GSGD_INFO("configuration reloaded from " << cfg_.config_file
                                           << "; settings that need a restart are unchanged");
  (void)ops::sdNotifyReady("reloaded");
}

// The control methods (docs/operations.md, "Methods"); control_protocol.cc says which
// need an admin caller.
const std::map<std::string, void (Coordinator::*)(PendingRequest&)>& Coordinator::controlMethods() {
  static const std::map<std::string, void (Coordinator::*)(PendingRequest&)> methods = {
      {"version", &Coordinator::controlVersion},
      {"status", &Coordinator::controlStatus},
      {"workers", &Coordinator::controlWorkers},
      {"groups", &Coordinator::controlGroups},
      {"drain", &Coordinator::controlDrain},
      {"undrain", &Coordinator::controlUndrain},
      {"unquarantine", &Coordinator::controlUnquarantine},
      {"regroup", &Coordinator::controlRegroup},
      {"set", &Coordinator::controlSet},
      {"checkpoint", &Coordinator::startCheckpoint},
      {"shutdown", &Coordinator::controlShutdown},
      {"reload_keys", &Coordinator::controlReloadKeys},
  };
  return methods;
}

std::vector<std::string> Coordinator::controlMethodNames() {
  std::vector<std::string> names;
  for (const auto& [name, handler] : controlMethods()) names.push_back(name);
  return names;
}

void Coordinator::handleControl(PendingRequest&& r) {
  const auto it = controlMethods().find(r.method());
  if (it == controlMethods().end()) {
    return r.fail(ControlError::kMethodNotFound, "no method '" + r.method() + "'");
  }
  try {
    (this->*(it->second))(r);
  } catch (const std::exception& e) {  // e.g. a param of the wrong JSON type
    r.fail(ControlError::kInvalidParams, e.what());
  }
}

void Coordinator::controlVersion(PendingRequest& r) {
  r.respond({{"version", ops::buildVersion()}, {"control_protocol", ops::kControlProtocolVersion}});
}

void Coordinator::controlStatus(PendingRequest& r) { r.respond(statusJson()); }

void Coordinator::controlWorkers(PendingRequest& r) { r.respond({{"workers", workersJson()}}); }

void Coordinator::controlGroups(PendingRequest& r) { r.respond({{"groups", groupsJson()}}); }

void Coordinator::controlDrain(PendingRequest& r) {
  auto id = findWorker(r.params().value("worker", nlohmann::json()));
  if (!id) return r.fail(id.status());
  const WorkerRecord* w = registry_.find(*id);
  if (w->state != WorkerState::kActive) {
    // Idempotent: draining a worker that already left is a success that says so.
    return r.respond({{"worker", *id},
                      {"state", workerStateName(w->state)},
                      {"samples_trained", w->samples_trained}});
  }
  // Answered once the worker's group PS has taken the change (off this loop).
  const bool wait = r.params().value("wait", false);
  auto request = std::make_shared<PendingRequest>(std::move(r));
  Status s = drain(*id, [this, request, worker = *id, wait](const Status& configured) {
    if (!configured) return request->fail(configured);
    if (wait) {
      drain_waiters_.emplace_back(std::move(*request), worker);
    } else {
      request->respond({{"worker", worker}, {"state", "draining"}});
    }
  });
  if (!s) request->fail(s);
}

WorkerRecord* Coordinator::requestedWorkerIn(PendingRequest& r, WorkerState state) {
  auto id = findWorker(r.params().value("worker", nlohmann::json()));
  if (!id) {
    r.fail(id.status());
    return nullptr;
  }
  WorkerRecord* w = registry_.find(*id);
  if (w->state != state) {
    r.fail(ControlError::kRefused,
           "worker " + std::to_string(*id) + " is " + workerStateName(w->state));
    return nullptr;
  }
  return w;
}

void Coordinator::controlUndrain(PendingRequest& r) {
  WorkerRecord* w = requestedWorkerIn(r, WorkerState::kActive);
  if (w == nullptr) return;
  if (w->draining) {
    w->draining = false;
    configureGroup(w->group);
    event("undrain", "worker " + std::to_string(w->id) + " stays");
  }
  r.respond({{"worker", w->id}, {"state", "active"}});
}

void Coordinator::controlUnquarantine(PendingRequest& r) {
  WorkerRecord* w = requestedWorkerIn(r, WorkerState::kQuarantined);
  if (w == nullptr) return;
  // Cleared: the process may register again (as a new worker).
  w->state = WorkerState::kLeft;
  admission_.release(*w);
  event("unquarantine", "worker " + std::to_string(w->id) + " may register again");
  r.respond({{"worker", w->id}, {"state", "left"}});
}

void Coordinator::controlRegroup(PendingRequest& r) {
  if (!adaptive_) return r.fail(ControlError::kRefused, "regroup needs mode adaptive");
  const bool dry = r.params().value("dry_run", false);
  adaptive_->setSlotHosts(slotHosts());
  auto proposal = adaptive_->operatorRegroup(registry_, !dry);
  if (!proposal) {
    return r.respond({{"applied", false}, {"reason", "no better grouping (or no estimates yet)"}});
  }
  ojson groups = ojson::array();
  for (const auto& g : proposal->regroup->plan.groups) groups.push_back(g);
  ojson result = {{"applied", !dry},
                  {"groups", groups},
                  {"plan", proposal->regroup->plan.describe()},
                  {"predicted_gain", proposal->regroup->predicted_gain}};
  if (!dry) applyRegroup(*proposal);
  r.respond(std::move(result));
}

void Coordinator::controlSet(PendingRequest& r) {
  ojson applied = ojson::object(), previous = ojson::object();
  if (Status s = applySettings(r.params().value("values", nlohmann::json()), &applied, &previous);
      !s) {
    return r.fail(s);
  }
  event("set", applied.dump());
  r.respond({{"applied", applied}, {"previous", previous}});
}

void Coordinator::controlShutdown(PendingRequest& r) {
  shutdown_requested_ = true;
  r.respond({{"state", "stopping"}});
}

void Coordinator::updateMetrics() {
  if (metrics_ == nullptr) return;
  std::set<std::uint64_t> stragglers;
  for (const auto& [id, w] : registry_.all()) {
    if (adaptive_ && adaptive_->isStraggler(id)) stragglers.insert(id);
  }
  exporter_->exportWorkers(registry_, stragglers);
  std::vector<std::size_t> members;
  for (std::uint32_t g = 0; g < fleet_->slots(); ++g)
    members.push_back(registry_.groupMembers(g).size());
  exporter_->exportGroups(groupsInUse(), members);
  const Accuracy acc = latestAccuracy();
  if (acc.value >= 0) exporter_->exportAccuracy(acc.value);
  if (acc.loss >= 0) exporter_->exportLoss(acc.loss);
  exporter_->exportTotals(
      {.samples_trained = registry_.samplesTrained(),
       .regroups = run_log_.regroups(),
       .stale_heartbeats = admission_.counters().stale_heartbeats,
       .identity_refused = admission_.counters().identity_refused,
       .curve_clients_refused = deps_.zap != nullptr
                                    ? std::optional<std::uint64_t>(deps_.zap->refused())
                                    : std::nullopt});
  (void)ops::sdNotifyStatus("mode " + std::string(modeName(cfg_.mode)) + ", " +
                            std::to_string(registry_.activeTrainers()) + " trainers, version " +
                            std::to_string(head_.versionSeen()));
}

void Coordinator::askCentralStats() {
  if (calls_->inFlight("central stats") ||
      (metrics_ == nullptr && !dashboard_ && cfg_.checkpoint_dir.empty())) {
    return;
  }
  OutMessage out(cfg_.job_id, 0);
  out.header().getBody().initCentralStatsQuery();
  calls_->start("central stats", central_, std::move(out), std::chrono::milliseconds(1000),
                [this](Result<InMessage> reply) { readCentralStats(std::move(reply)); });
}

void Coordinator::readCentralStats(Result<InMessage> reply) {
  if (!reply || reply->kind() != BodyKind::CENTRAL_STATS) return;
  auto s = reply->header().getBody().getCentralStats();
  head_.noteVersion(s.getVersion());
  if (s.getCheckpointVersion() > 0 &&
      (!last_checkpoint_ || (*last_checkpoint_)["version"] != s.getCheckpointVersion())) {
    last_checkpoint_ = ojson{{"version", s.getCheckpointVersion()}};  // periodic ones too
  }
  recordLedgerAt(s.getCheckpointVersion());
  if (!cfg_.checkpoint_dir.empty()) noteCheckpointFailures(s);
  if (metrics_ != nullptr) {
    exporter_->exportCentral(centralps::fromProto(s));
  }
  if (dashboard_) {
    const centralps::CentralStats c = centralps::fromProto(s);
    dashboard_->noteCentral(c.mean_staleness, c.updates_applied, c.max_staleness);
  }
}

}  // namespace groupsgd::coordinator
