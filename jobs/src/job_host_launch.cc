#include <algorithm>
#include <filesystem>
#include <system_error>

#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/coordinator/external_model.h"
#include "groupsgd/daemon/curve_setup.h"
#include "groupsgd/daemon/group_server_setup.h"
#include "groupsgd/jobs/job_config.h"
#include "job_host_impl.h"

namespace groupsgd::jobs {

using coordinator::awaitExternalModel;
using coordinator::loadExternalModelFile;

namespace {

std::string externalModelPath(const DaemonConfig& job_cfg) {
  return job_cfg.checkpoint_dir + "/external_model.bin";
}

// The summary of a job that ended before it trained (stopped while awaiting its model).
nlohmann::json untrainedSummary(const std::string& reason) {
  return {{"stop_reason", reason},     {"elapsed_s", 0.0},     {"samples_trained", 0},
          {"samples_applied", 0},      {"samples_dropped", 0}, {"accounting_ok", true},
          {"final_test_acc", nullptr}, {"reached", false}};
}

}  // namespace

Result<DaemonConfig> JobHost::jobConfig(const JobRecord& rec) const {
  auto cfg = parseJobConfig(rec.config, cfg_);
  if (!cfg) return cfg.status();
  cfg->job_id = rec.id;
  cfg->listen = "tcp://" + cfg_.bind_host + ":*";
  cfg->checkpoint_dir = jobDir(rec.name);
  cfg->endpoint_file.clear();
  cfg->summary_file = jobDir(rec.name) + "/summary.json";
  cfg->config_file.clear();
  // With a --serve standby each job's central PS replicates on a link of its own, at a
  // kernel-chosen port the table tells the standby (docs/jobs.md, "Standby"). Not a model
  // external job: its model comes with its first worker, which the standby does not see.
  // None without the daemon's table link (a promoted daemon that could not bind it).
  cfg->replication_listen =
      !table_link_ || cfg->external_model ? "" : "tcp://" + cfg_.bind_host + ":*";
  cfg->primary.clear();  // the daemon's (a promoted standby's fence); a job's is set at launch
  return cfg;
}

coordinator::CoordinatorDeps JobHost::depsFor(HostedJob& h) {
  coordinator::CoordinatorDeps deps;
  deps.zap = zap_;
  if (zap_ != nullptr) {  // the allow-list is the daemon's: any job's reload_keys re-reads it
    deps.reload_keys = [this] { return reloadAllowList(cfg_, zap_, keys_.public_key, daemons_); };
  }
  deps.metrics = &metrics_;
  if (metrics_server_) deps.dashboard = &dashboard_;
  deps.control = &h.control;
  deps.stop_now = &h.stop_now;
  deps.suspend = &h.suspend;
  return deps;
}

Status JobHost::launchExternal(HostedJob& h) {
  auto sock = makeSocket(ctx_, zmq::socket_type::router, serverSocketOptions(keys_));
  if (!sock) return Status(sock.status().code(), "coordinator: " + sock.status().toString());
  auto ep = bindSocket(*sock, h.cfg.listen);
  if (!ep) return Status(ep.status().code(), "coordinator: " + ep.status().toString());
  h.endpoint = *ep;
  const std::string saved = externalModelPath(h.cfg);
  if (!std::filesystem::exists(saved)) {
    h.intake = std::move(*sock);
    h.awaiting_model.store(true);
    return Status::ok();
  }
  auto model = loadExternalModelFile(saved);
  if (!model) return Status(model.status().code(), "model external: " + model.status().toString());
  auto job = Job::create(ctx_, h.cfg, keys_,
                         ExternalIntake{std::move(*sock), *ep, std::move(model->fingerprint),
                                        std::move(model->initial), std::move(model->layout)},
                         h.local_slots, depsFor(h));
  if (!job) return job.status();
  h.job = std::move(*job);
  return Status::ok();
}

void JobHost::createAwaitedJob(HostedJob& h) {
  auto model =
      awaitExternalModel(*h.intake, h.cfg, [&h] { return h.stop.load() || h.suspend.load(); });
  if (!model) {
    h.summary = h.suspend.load() ? nlohmann::json{{"suspended", true}}
                                 : untrainedSummary("stopped before any worker brought the model");
    return;
  }
  if (Status s = saveExternalModelFile(externalModelPath(h.cfg), *model); !s) {
    // The job trains all the same; a restart would wait for a worker's model again.
    GSGD_ERROR("cannot keep the external model: " << s.toString());
  }
  auto job =
      Job::create(ctx_, h.cfg, keys_,
                  ExternalIntake{std::move(*h.intake), h.endpoint, std::move(model->fingerprint),
                                 std::move(model->initial), std::move(model->layout)},
                  h.local_slots, depsFor(h));
  h.intake.reset();
  if (!job) {
    h.error = job.status().message();
    GSGD_ERROR("the job cannot start with the model it was brought: " << h.error);
    return;
  }
  h.job = std::move(*job);
  h.awaiting_model.store(false);
}

Status JobHost::launch(JobRecord& rec, const FollowedJob* from) {
  auto cfg = jobConfig(rec);
  if (!cfg) return cfg.status();
  if (from != nullptr) cfg->primary = from->primary;  // its old central PS, fenced
  std::error_code ec;
  std::filesystem::create_directories(cfg->checkpoint_dir, ec);
  if (ec) return unavailable("cannot create " + cfg->checkpoint_dir + ": " + ec.message());
  auto hosted = std::make_unique<HostedJob>();
  hosted->cfg = *cfg;
  hosted->slots = cfg->groupCount();
  // Node daemons' slots first (they are there to carry the group traffic), then local
  // ones; what neither has free now (a job resumed before its nodes are back) is placed
  // on nodes as they come (tendNodes), its coordinator waiting for their offers.
  const std::uint32_t on_nodes = std::min(hosted->slots, pool_.free());
  hosted->local_slots = std::min(hosted->slots - on_nodes, localSlotsFree());
  hosted->group_settings = groupSettingsJson(*cfg);
  if (cfg->external_model) {
    GSGD_RETURN_IF_ERROR(launchExternal(*hosted));
  } else {
    std::optional<centralps::ReplicaState> replica;
    if (from != nullptr) replica = from->replica;
    auto job = Job::create(ctx_, *cfg, keys_, std::nullopt, hosted->local_slots, depsFor(*hosted),
                           std::move(replica));
    if (!job) return job.status();
    hosted->job = std::move(*job);
    hosted->endpoint = hosted->job->endpoint();
  }
  if (const auto weight = jobArbiterWeight(rec.config); weight && arbiter_ != nullptr) {
    arbiter_->setJobWeight(rec.id, *weight);  // leases are keyed by the job's id
  }
  ++rec.starts;
  if (on_nodes > 0) (void)pool_.place(rec.id, on_nodes);
  HostedJob* h = hosted.get();
  const std::string name = rec.name;
  h->runner = std::thread([this, h, name] {
    log::setThreadTag("job " + name);
    if (!h->job) createAwaitedJob(*h);
    if (h->job) {
      h->job->startServers();
      h->summary = h->job->runCoordinator(h->stop);
      h->job->stopServers();
    }
    h->done.store(true);
  });
  GSGD_INFO("job '" << rec.name << "' (id " << rec.id << ") runs: coordinator on " << h->endpoint
                    << ", " << h->slots << " group PS(es) (" << h->local_slots << " here, "
                    << h->slots - h->local_slots << " on node daemons)"
                    << (h->awaiting_model.load() ? ", waiting for the first worker's model"
                        : h->job->resumedFrom().empty()
                            ? ""
                            : ", resumed from " + h->job->resumedFrom()));
  running_[rec.name] = std::move(hosted);
  return Status::ok();
}

void JobHost::resumeJobs() {
  for (auto& rec : table_.jobs()) {
    if (rec.state != JobState::kRunning) continue;
    const FollowedJob* from = nullptr;
    if (takeover_) {
      // A promoted standby: a running job starts from its replica, or not at all (it has no
      // checkpoint here, and the old primary's are on the old primary's host).
      auto it = takeover_->jobs.find(rec.name);
      if (it == takeover_->jobs.end()) {
        const std::string why =
            "the standby had no replica of it (a model external job, or its central PS never "
            "sent a snapshot): not taken over";
        GSGD_ERROR("job '" << rec.name << "': " << why);
        rec.state = JobState::kFailed;
        rec.error = why;
        rec.ended_unix = unixNow();
        continue;
      }
      from = &it->second;
    }
    if (Status s = launch(rec, from); !s) {
      GSGD_ERROR("job '" << rec.name << "' cannot resume: " << s.toString());
      rec.state = JobState::kFailed;
      rec.error = s.message();
      rec.ended_unix = unixNow();
    }
  }
  takeover_.reset();  // the replicas are in the jobs' central PSes now
  saveTable();
}

void JobHost::reapEnded() {
  for (auto it = running_.begin(); it != running_.end();) {
    HostedJob& h = *it->second;
    if (!h.done.load()) {
      ++it;
      continue;
    }
    h.runner.join();
    pool_.release(h.cfg.job_id);
    JobRecord* rec = table_.find(it->first);
    if (rec != nullptr && !h.error.empty()) {
      rec->state = JobState::kFailed;
      rec->error = h.error;
      rec->ended_unix = unixNow();
      saveTable();
    } else if (rec != nullptr && !h.summary.value("suspended", false)) {
      rec->state = h.stopped_by_operator ? JobState::kStopped : JobState::kFinished;
      h.summary["job"] = {{"name", rec->name}, {"id", rec->id}};
      if (!h.summary.contains("config")) h.summary["config"] = toJson(h.cfg);
      rec->summary = h.summary;
      const std::string file = h.cfg.summary_file;
      if (Status s = writeFileAtomically(file, h.summary.dump(2) + "\n"); !s) {
        GSGD_ERROR("cannot write " << file << ": " << s.toString());
      }
      rec->ended_unix = unixNow();
      GSGD_INFO("job '" << rec->name << "' " << jobStateName(rec->state) << " ("
                        << h.summary.value("stop_reason", "") << "); its " << h.slots
                        << " group PS slot(s) are free");
      saveTable();
    }
    it = running_.erase(it);
  }
}

}  // namespace groupsgd::jobs
