#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "groupsgd/common/log.h"
#include "groupsgd/jobs/job_config.h"
#include "groupsgd/ops/control_protocol.h"
#include "groupsgd/ops/version.h"
#include "job_host_impl.h"

namespace groupsgd::jobs {

using nlohmann::json;
using ojson = nlohmann::ordered_json;
using ops::ControlError;
using ops::ControlRequest;
using ops::PendingRequest;

ojson JobHost::jobRow(const JobRecord& rec) const {
  ojson row;
  row["name"] = rec.name;
  row["id"] = rec.id;
  row["state"] = jobStateName(rec.state);
  row["mode"] = rec.config.value("mode", modeName(cfg_.mode));
  auto it = running_.find(rec.name);
  if (it != running_.end()) {
    row["groups"] = it->second->slots;
    row["node_slots"] = it->second->slots - it->second->local_slots;
    row["coordinator"] = it->second->endpoint;
    if (it->second->stop.load()) row["state"] = "stopping";
    if (it->second->awaiting_model.load()) row["awaiting_model"] = true;
  } else {
    row["groups"] = nullptr;
    row["coordinator"] = nullptr;
  }
  if (rec.summary.is_object()) {
    row["stop_reason"] = rec.summary.value("stop_reason", "");
    row["final_test_acc"] = rec.summary.value("final_test_acc", json());
  }
  if (!rec.error.empty()) row["error"] = rec.error;
  return row;
}

Result<std::string> JobHost::targetJob(const PendingRequest& r) const {
  const auto& p = r.params();
  std::vector<FrontJob> jobs = frontJobs();
  std::string wanted;
  if (auto it = p.find("job"); it != p.end()) {
    if (!it->is_string()) return invalidArgument("job must be a string (a job name)");
    wanted = it->get<std::string>();
  }
  auto job = resolveJob(wanted, jobs);
  if (!job) {
    if (job.status().code() == Code::kUnavailable) return failedPrecondition("no job is running");
    return job.status();
  }
  return job->name;
}

void JobHost::jobSubmit(PendingRequest& r) {
  const auto& p = r.params();
  auto it = p.find("config");
  if (it == p.end() || !it->is_object()) {
    return r.fail(ControlError::kInvalidParams,
                  "params.config (the job, a JSON object) is missing");
  }
  auto cfg = parseJobConfig(*it, cfg_);
  std::vector<std::string> problems;
  if (!cfg) problems.push_back(cfg.status().message());
  const auto name_it = it->find("name");
  const std::string name =
      name_it != it->end() && name_it->is_string() ? name_it->get<std::string>() : "";
  if (!name.empty() && table_.find(name) != nullptr) {
    problems.push_back("name '" + name + "' is in use (job " +
                       std::to_string(table_.find(name)->id) + ", " +
                       jobStateName(table_.find(name)->state) + "); names are never reused");
  }
  if (jobArbiterWeight(*it) && arbiter_ == nullptr) {
    problems.push_back("arbiter_weight needs the daemon's device arbiter (arbiter_listen)");
  }
  if (cfg) {
    if (auto lacking = slotsLacking(cfg->groupCount())) problems.push_back(*lacking);
  }
  if (table_link_ && !table_link_->attached() && cfg_.standby_alone_ms == 0) {
    // As a one-run head with standby_alone_ms 0 commits nothing without its standby.
    problems.push_back(
        "no standby attached: with replication_listen and standby_alone_ms 0 a job is taken "
        "only while a --serve standby follows the table (start groupsgdd --serve --role standby "
        "--primary " +
        table_link_->endpoint() + ", or set standby_alone_ms)");
  }
  if (!problems.empty()) {
    std::string text;
    for (const auto& pr : problems) text += (text.empty() ? "" : "; ") + pr;
    return r.fail(ControlError::kInvalidParams, "job refused: " + text);
  }
  JobRecord rec;
  rec.name = name;
  rec.id = table_.nextId();
  rec.config = *it;
  rec.submitted_unix = unixNow();
  table_.jobs().push_back(rec);
  JobRecord& stored = table_.jobs().back();
  if (Status s = launch(stored); !s) {
    stored.state = JobState::kFailed;
    stored.error = s.message();
    stored.ended_unix = unixNow();
    saveTable();
    return r.fail(ControlError::kRefused, "job '" + name + "' could not start: " + s.message());
  }
  saveTable();
  answerOnceReplicated(r, jobRow(stored));
}

void JobHost::answerOnceReplicated(PendingRequest& r, ojson row) {
  if (!table_link_) return r.respond(row);
  // The table holding the change, sent now: its revision is what the standby must reach.
  table_link_->poll(std::exchange(table_changed_, false), [this] { return tableMessage(); });
  if (!table_link_->attached()) {  // none (standby_alone_ms > 0), or lost at that send
    row["standby_acknowledged"] = false;
    return r.respond(row);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.standby_takeover_ms);
  awaiting_standby_.push_back(
      AwaitingStandby{std::move(r), std::move(row), table_link_->revision(), deadline});
}

void JobHost::answerReplicated(bool all) {
  for (auto it = awaiting_standby_.begin(); it != awaiting_standby_.end();) {
    const bool acked = table_link_ && table_link_->acked() >= it->revision;
    if (!acked && !all && Clock::now() < it->deadline) {
      ++it;
      continue;
    }
    if (!acked) {
      GSGD_WARN("the standby did not acknowledge table revision "
                << it->revision << " within standby_takeover_ms " << cfg_.standby_takeover_ms
                << ": answered without it");
    }
    it->row["standby_acknowledged"] = acked;
    it->request.respond(std::move(it->row));
    it = awaiting_standby_.erase(it);
  }
}

void JobHost::jobStop(PendingRequest& r) {
  auto name = targetJob(r);
  if (!name) return r.fail(name.status());
  HostedJob& h = *running_.at(*name);
  const auto drain = r.params().find("drain");
  const bool wait = drain != r.params().end() && drain->is_boolean() && drain->get<bool>();
  h.stopped_by_operator = true;
  h.stop_now.store(!wait);
  h.stop.store(true);
  ojson row = jobRow(*table_.find(*name));
  row["drain"] = wait;
  r.respond(row);
}

// The job's row, and for a running job its coordinator's own status (asked on its thread).
void JobHost::jobStatus(PendingRequest& r) {
  const auto& p = r.params();
  const auto it = p.find("job");
  std::string name;
  if (it != p.end() && it->is_string()) {
    name = it->get<std::string>();
  } else {
    auto target = targetJob(r);
    if (!target) return r.fail(target.status());
    name = *target;
  }
  const JobRecord* rec = table_.find(name);
  if (rec == nullptr) return r.fail(ControlError::kInvalidParams, "no job '" + name + "'");
  ojson row = jobRow(*rec);
  row["config"] = rec->config;
  auto running = running_.find(name);
  if (running == running_.end() || running->second->done.load() ||
      running->second->awaiting_model.load()) {
    if (rec->summary.is_object()) row["summary"] = rec->summary;
    return r.respond(row);
  }
  // Ask the coordinator for its status; the answer goes to the original request.
  auto original = std::make_shared<PendingRequest>(std::move(r));
  ControlRequest inner = original->request();
  inner.method = "status";
  running->second->control.push(
      PendingRequest(std::move(inner), [original, row](ojson reply) mutable {
        if (reply.value("ok", false)) row["status"] = reply["result"];
        original->respond(row);
      }));
}

void JobHost::jobList(PendingRequest& r) {
  ojson rows = ojson::array();
  for (const auto& rec : table_.jobs()) rows.push_back(jobRow(rec));
  ojson result{{"jobs", rows}, {"group_slots", groupSlotsJson()}};
  if (arbiter_ != nullptr) result["arbiter"] = arbiterJson();
  r.respond(result);
}

void JobHost::publishDashboard() {
  next_dashboard_ = Clock::now() + std::chrono::seconds(1);
  ojson rows = ojson::array();
  for (const auto& rec : table_.jobs()) rows.push_back(jobRow(rec));
  dashboard_.publishJobTable(
      ojson{{"jobs", rows}, {"group_slots", groupSlotsJson()}, {"arbiter", arbiterJson()}}.dump());
}

void JobHost::jobSummary(PendingRequest& r) {
  const auto it = r.params().find("job");
  if (it == r.params().end() || !it->is_string()) {
    return r.fail(ControlError::kInvalidParams, "params.job (a job name) is missing");
  }
  const JobRecord* rec = table_.find(it->get<std::string>());
  if (rec == nullptr) {
    return r.fail(ControlError::kInvalidParams, "no job '" + it->get<std::string>() + "'");
  }
  if (!rec->summary.is_object()) {
    return r.fail(ControlError::kRefused, "job '" + rec->name + "' is " + jobStateName(rec->state) +
                                              "; its summary comes when it ends");
  }
  r.respond(rec->summary);
}

void JobHost::handleControl(PendingRequest&& r) {
  const std::string& m = r.method();
  if (m == "job.submit") return jobSubmit(r);
  if (m == "job.stop") return jobStop(r);
  if (m == "job.status") return jobStatus(r);
  if (m == "job.list") return jobList(r);
  if (m == "job.summary") return jobSummary(r);
  if (m == "version") {
    return r.respond(
        {{"version", ops::buildVersion()}, {"control_protocol", ops::kControlProtocolVersion}});
  }
  if (m == "shutdown" && r.params().find("job") == r.params().end()) {
    shutdown_requested_ = true;
    return r.respond({{"shutting_down", true}, {"jobs_suspended", running_.size()}});
  }
  // Every other method belongs to one job's coordinator.
  auto name = targetJob(r);
  if (!name) return r.fail(name.status());
  HostedJob& h = *running_.at(*name);
  if (h.awaiting_model.load()) {
    return r.fail(ControlError::kRefused,
                  "job '" + *name + "' waits for its first worker's model (model external)");
  }
  h.control.push(std::move(r));
}

void JobHost::serveControl() {
  if (!control_) return;
  while (auto r = control_->tryPop()) {
    const ControlRequest request = r->request();
    try {
      handleControl(std::move(*r));
    } catch (const std::exception& e) {
      // A request the checks above missed never takes the daemon down; its connection
      // gets "internal" from the dropped request.
      GSGD_ERROR("control: " << request.method << " failed: " << e.what());
    }
  }
}

}  // namespace groupsgd::jobs
