#include "groupsgd/jobs/job_host.h"

#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/daemon/group_server_setup.h"
#include "groupsgd/daemon/curve_setup.h"
#include "groupsgd/coordinator/external_model.h"
#include "groupsgd/jobs/job_config.h"
#include "groupsgd/jobs/job_table.h"
#include "groupsgd/ops/control_server.h"
#include "groupsgd/ops/metrics.h"
#include "groupsgd/ops/metrics_server.h"
#include "groupsgd/ops/sd_notify.h"
#include "groupsgd/ops/version.h"
#include "groupsgd/jobs/job.h"
#include "job_front.h"

namespace groupsgd::jobs {

using coordinator::awaitExternalModel;
using coordinator::loadExternalModelFile;

using ops::ControlError;
using ops::ControlQueue;
using ops::ControlRequest;
using ops::ControlServer;
using ops::ControlServerOptions;
using ops::MetricsRegistry;
using ops::MetricsServer;
using ops::MetricsServerOptions;
using ops::PendingRequest;
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The control requests forwarded to one job's coordinator (it pops them on its thread).
class JobControlQueue : public ControlQueue {
 public:
  void push(PendingRequest r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (refusing_) return r.fail(ControlError::kRefused, *refusing_);
    queue_.push_back(std::move(r));
  }
  std::optional<PendingRequest> tryPop() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return std::nullopt;
    PendingRequest r = std::move(queue_.front());
    queue_.pop_front();
    return r;
  }
  void setRefusing(std::optional<std::string> reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    refusing_ = std::move(reason);
    if (!refusing_) return;
    for (auto& r : queue_) r.fail(ControlError::kRefused, *refusing_);
    queue_.clear();
  }

 private:
  std::mutex mu_;
  std::deque<PendingRequest> queue_;
  std::optional<std::string> refusing_;
};

// A job the daemon hosts now: its Job runs on `runner` until it ends, then the host
// joins it and records the summary.
struct HostedJob {
  DaemonConfig cfg;
  // Null while a model-external job waits for its first worker's model: the runner
  // creates it then (the host thread reads it only after `done`).
  std::unique_ptr<Job> job;
  std::optional<zmq::socket_t> intake;  // that wait's socket (the job's coordinator's)
  std::atomic<bool> awaiting_model{false};
  std::string error;  // set by the runner when the job could not start (state failed)
  std::string endpoint;
  std::uint32_t slots = 0;       // its group PSes: local_slots here, the rest on node daemons
  std::uint32_t local_slots = 0;
  std::string group_settings;    // handed to the node daemons serving it (groupSettingsJson)
  std::atomic<bool> stop{false};      // end the job (a stop condition of the operator)
  std::atomic<bool> stop_now{false};  // ... without waiting for trainers (stop without --drain)
  std::atomic<bool> suspend{false};   // the daemon stops: keep the job for the next start
  std::atomic<bool> done{false};
  bool stopped_by_operator = false;
  JobControlQueue control;
  nlohmann::json summary;  // written by the runner before done
  std::thread runner;
};

class JobHost {
 public:
  JobHost(zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
          const ZapHandler* zap, AllowList* daemons, JobTable table, JobFront front,
          ArbiterHost* arbiter)
      : ctx_(ctx),
        cfg_(cfg),
        keys_(keys),
        zap_(zap),
        daemons_(daemons),
        table_(std::move(table)),
        front_(std::move(front)),
        arbiter_(arbiter) {
    front_.attachPool(&pool_, cfg_.heartbeat_ms);
  }

  Status startOperations();
  void resumeJobs();
  void run(const std::atomic<bool>& stop, std::atomic<bool>* reload);

 private:
  std::string jobDir(const std::string& name) const { return cfg_.state_dir + "/jobs/" + name; }
  // Group PS slots in use: here (of max_group_slots), and all (with the node daemons').
  std::uint32_t localSlotsInUse() const;
  std::uint32_t slotsInUse() const { return localSlotsInUse() + pool_.inUse(); }
  std::uint32_t localSlotsFree() const {
    return cfg_.max_group_slots - std::min(cfg_.max_group_slots, localSlotsInUse());
  }
  // Places the node slots a running job lacks (a resumed job before the nodes were back,
  // a node lost mid-job) on the nodes' free slots; drops nodes gone silent.
  void tendNodes();
  ojson groupSlotsJson() const;
  std::vector<FrontJob> frontJobs() const;
  Result<DaemonConfig> jobConfig(const JobRecord& rec) const;
  // Binds and starts the job of this record; on failure the record is marked failed.
  Status launch(JobRecord& rec);
  // Model external: binds the job's coordinator socket; with the model saved at an
  // earlier start the job is created at once, else its runner waits for a worker's.
  Status launchExternal(HostedJob& h);
  // The runner's side of that wait: the model, saved beside the checkpoints, then the Job.
  void createAwaitedJob(HostedJob& h);
  // Hooks a created job's coordinator to the daemon (zap, metrics, control, flags).
  // What a job's coordinator borrows from the host (its control queue, metrics, flags).
  coordinator::CoordinatorDeps depsFor(HostedJob& h);
  void reapEnded();
  void saveTable();
  void serveControl();
  void handleControl(PendingRequest&& r);
  Result<std::string> targetJob(const PendingRequest& r) const;  // name of a running job
  ojson jobRow(const JobRecord& rec) const;
  void jobSubmit(PendingRequest& r);
  void jobStop(PendingRequest& r);
  void jobStatus(PendingRequest& r);
  void suspendAll();
  void reloadOnHangup();

  zmq::context_t& ctx_;
  const DaemonConfig& cfg_;
  const CurveKeys& keys_;
  const ZapHandler* zap_;
  // keys_.daemons, writable: a reload gives node keys their rights (or takes them).
  AllowList* daemons_;
  JobTable table_;
  JobFront front_;
  ArbiterHost* arbiter_;  // null without arbiter_listen
  NodePool pool_;         // node daemons registered at the front, and their slots
  std::map<std::string, std::unique_ptr<HostedJob>> running_;
  MetricsRegistry metrics_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<MetricsServer> metrics_server_;
  bool shutdown_requested_ = false;
  std::optional<std::chrono::microseconds> watchdog_;
  Clock::time_point next_watchdog_ = Clock::now();
};

std::uint32_t JobHost::localSlotsInUse() const {
  std::uint32_t n = 0;
  for (const auto& [name, h] : running_) n += h->local_slots;
  return n;
}

void JobHost::tendNodes() {
  // The coordinators' rule for their workers: a loaded node may be late, and a node
  // really dead is failed by each job's coordinator on its own.
  const auto limit = std::chrono::milliseconds(std::max<std::uint64_t>(
      static_cast<std::uint64_t>(cfg_.heartbeat_ms) * cfg_.heartbeat_misses,
      cfg_.step_deadline_ms + 2ull * cfg_.heartbeat_ms));
  for (const auto& gone : pool_.expire(limit)) {
    GSGD_WARN(gone << " missed its heartbeats: dropped from the pool (the jobs' coordinators "
                      "fail the groups it served)");
  }
  if (pool_.free() == 0) return;
  for (const auto& [name, h] : running_) {
    if (h->done.load()) continue;
    const std::uint32_t wanted = h->slots - h->local_slots;
    const std::uint64_t id = h->cfg.job_id;
    const std::uint32_t have = pool_.placed(id);
    if (have >= wanted) continue;
    const std::uint32_t placed = pool_.place(id, wanted - have);
    if (placed > 0) {
      GSGD_INFO("job '" << name << "': " << placed << " group PS slot(s) placed on node daemons ("
                        << have + placed << " of " << wanted << ")");
    }
  }
}

ojson JobHost::groupSlotsJson() const {
  ojson nodes = ojson::array();
  for (const auto& [id, n] : pool_.nodes()) {
    ojson placed = ojson::object();
    for (const auto& [job, k] : n.placed) placed[std::to_string(job)] = k;
    nodes.push_back({{"id", id - NodePool::kFirstId + 1},
                     {"host", n.host},
                     {"slots", n.slots},
                     {"in_use", std::min(n.slots, n.used())},
                     {"jobs", placed}});
  }
  return {{"max", cfg_.max_group_slots},
          {"in_use", slotsInUse()},
          {"local_in_use", localSlotsInUse()},
          {"node_slots", pool_.total()},
          {"free", localSlotsFree() + pool_.free()},
          {"nodes", nodes}};
}

std::vector<FrontJob> JobHost::frontJobs() const {
  std::vector<FrontJob> jobs;
  for (const auto& rec : table_.jobs()) {
    FrontJob f{rec.name, rec.id, false, "", ""};
    if (auto it = running_.find(rec.name); it != running_.end() && !it->second->done.load()) {
      f.running = true;
      f.endpoint = it->second->endpoint;
      f.settings = it->second->group_settings;
    }
    jobs.push_back(std::move(f));
  }
  return jobs;
}

Result<DaemonConfig> JobHost::jobConfig(const JobRecord& rec) const {
  auto cfg = parseJobConfig(rec.config, cfg_);
  if (!cfg) return cfg.status();
  cfg->job_id = rec.id;
  cfg->listen = "tcp://" + cfg_.bind_host + ":*";
  cfg->checkpoint_dir = jobDir(rec.name);
  cfg->endpoint_file.clear();
  cfg->summary_file = jobDir(rec.name) + "/summary.json";
  cfg->config_file.clear();
  return cfg;
}

std::string externalModelPath(const DaemonConfig& job_cfg) {
  return job_cfg.checkpoint_dir + "/external_model.bin";
}

// The summary of a job that ended before it trained (stopped while awaiting its model).
nlohmann::json untrainedSummary(const std::string& reason) {
  return {{"stop_reason", reason},     {"elapsed_s", 0.0},     {"samples_trained", 0},
          {"samples_applied", 0},      {"samples_dropped", 0}, {"accounting_ok", true},
          {"final_test_acc", nullptr}, {"reached", false}};
}

coordinator::CoordinatorDeps JobHost::depsFor(HostedJob& h) {
  coordinator::CoordinatorDeps deps;
  deps.zap = zap_;
  if (zap_ != nullptr) {  // the allow-list is the daemon's: any job's reload_keys re-reads it
    deps.reload_keys = [this] { return reloadAllowList(cfg_, zap_, keys_.public_key, daemons_); };
  }
  deps.metrics = &metrics_;
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
                                        std::move(model->initial)},
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
  auto job = Job::create(ctx_, h.cfg, keys_,
                         ExternalIntake{std::move(*h.intake), h.endpoint,
                                        std::move(model->fingerprint), std::move(model->initial)},
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

Status JobHost::launch(JobRecord& rec) {
  auto cfg = jobConfig(rec);
  if (!cfg) return cfg.status();
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
    auto job = Job::create(ctx_, *cfg, keys_, std::nullopt, hosted->local_slots,
                           depsFor(*hosted));
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

void JobHost::saveTable() {
  if (Status s = table_.save(); !s) GSGD_ERROR("cannot write the job table: " << s.toString());
}

void JobHost::resumeJobs() {
  for (auto& rec : table_.jobs()) {
    if (rec.state != JobState::kRunning) continue;
    if (Status s = launch(rec); !s) {
      GSGD_ERROR("job '" << rec.name << "' cannot resume: " << s.toString());
      rec.state = JobState::kFailed;
      rec.error = s.message();
      rec.ended_unix = unixNow();
    }
  }
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
      h.summary["config"] = toJson(h.cfg);
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
    const std::uint32_t local = localSlotsFree();
    if (cfg->groupCount() > local + pool_.free()) {
      std::string text = "the job needs " + std::to_string(cfg->groupCount()) + " group PS(es), ";
      if (pool_.nodes().empty()) {
        text += std::to_string(local) + " of max_group_slots " +
                std::to_string(cfg_.max_group_slots) + " are free";
      } else {
        text += std::to_string(local + pool_.free()) + " are free (" + std::to_string(local) +
                " of max_group_slots " + std::to_string(cfg_.max_group_slots) + " here, " +
                std::to_string(pool_.free()) + " of " + std::to_string(pool_.total()) + " on " +
                std::to_string(pool_.nodes().size()) + " node daemon(s))";
      }
      problems.push_back(text);
    }
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
  r.respond(jobRow(stored));
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

void JobHost::handleControl(PendingRequest&& r) {
  const std::string& m = r.method();
  if (m == "job.submit") return jobSubmit(r);
  if (m == "job.stop") return jobStop(r);
  if (m == "job.status") return jobStatus(r);
  if (m == "job.list") {
    ojson rows = ojson::array();
    for (const auto& rec : table_.jobs()) rows.push_back(jobRow(rec));
    return r.respond({{"jobs", rows},
                      {"group_slots", groupSlotsJson()}});
  }
  if (m == "job.summary") {
    const auto it = r.params().find("job");
    if (it == r.params().end() || !it->is_string()) {
      return r.fail(ControlError::kInvalidParams, "params.job (a job name) is missing");
    }
    const JobRecord* rec = table_.find(it->get<std::string>());
    if (rec == nullptr)
      return r.fail(ControlError::kInvalidParams, "no job '" + it->get<std::string>() + "'");
    if (!rec->summary.is_object()) {
      return r.fail(ControlError::kRefused, "job '" + rec->name + "' is " +
                                                jobStateName(rec->state) +
                                                "; its summary comes when it ends");
    }
    return r.respond(rec->summary);
  }
  if (m == "version") {
    return r.respond({{"version", ops::buildVersion()}, {"control_protocol", ops::kControlProtocolVersion}});
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

Status JobHost::startOperations() {
  metrics_.setBuildInfo(ops::buildVersion());
  ControlServerOptions copts;
  copts.path = cfg_.control_socket;
  if (cfg_.control_admin_gid >= 0) copts.admin_gid = static_cast<gid_t>(cfg_.control_admin_gid);
  copts.metrics = &metrics_;
  for (auto& m : ops::jobControlMethods()) copts.methods.push_back(m);
  auto started = ControlServer::start(copts);
  if (!started)
    return Status(started.status().code(), "control socket: " + started.status().toString());
  control_ = std::move(*started);
  if (!cfg_.metrics_listen.empty()) {
    MetricsServerOptions mopts;
    const auto colon = cfg_.metrics_listen.rfind(':');
    mopts.host = cfg_.metrics_listen.substr(0, colon);
    mopts.port = static_cast<std::uint16_t>(std::atoi(cfg_.metrics_listen.c_str() + colon + 1));
    auto ms = MetricsServer::start(metrics_, mopts);
    if (!ms) return Status(ms.status().code(), "metrics endpoint: " + ms.status().toString());
    metrics_server_ = std::move(*ms);
    GSGD_INFO("metrics on http://" << metrics_server_->host() << ":" << metrics_server_->port()
                                   << "/metrics");
  }
  watchdog_ = ops::sdWatchdogInterval();
  return Status::ok();
}

void JobHost::suspendAll() {
  control_->setRefusing("the daemon is stopping");
  for (auto& [name, h] : running_) h->suspend.store(true);
  for (auto& [name, h] : running_) {
    if (h->runner.joinable()) h->runner.join();
  }
  running_.clear();  // suspended jobs stay "running" in the table: they resume at the next start
  saveTable();
}

// The daemon's own settings are fixed for its life and each job's come from its job file
// (changed live by `groupsgdctl --job JOB set`): the allow-list is all SIGHUP re-reads.
void JobHost::reloadOnHangup() {
  (void)ops::sdNotifyReloading();
  if (zap_ == nullptr) {
    GSGD_WARN("SIGHUP: CURVE is off, nothing to reload (job settings: groupsgdctl --job JOB set)");
    (void)ops::sdNotifyReady("reload: nothing to do");
    return;
  }
  auto change = reloadAllowList(cfg_, zap_, keys_.public_key, daemons_);
  if (!change) {
    GSGD_ERROR("SIGHUP: allow-list reload refused, keeping the running list: "
               << change.status().toString());
    (void)ops::sdNotifyReady("reload refused: " + change.status().message());
    return;
  }
  GSGD_INFO("SIGHUP: allow-list reloaded");
  (void)ops::sdNotifyReady("reloaded");
}

void JobHost::run(const std::atomic<bool>& stop, std::atomic<bool>* reload) {
  GSGD_INFO("serving jobs: front on " << front_.endpoint() << ", control socket "
                                      << cfg_.control_socket << ", " << cfg_.max_group_slots
                                      << " group PS slots, state in " << cfg_.state_dir);
  (void)ops::sdNotifyReady("serving jobs: front on " + front_.endpoint());
  while (!stop.load() && !shutdown_requested_) {
    front_.serve(std::chrono::milliseconds(50), frontJobs());
    serveControl();
    reapEnded();
    tendNodes();
    if (reload != nullptr && reload->exchange(false)) reloadOnHangup();
    metrics_.gauge("jobs_running", "jobs the daemon hosts now")
        .set(static_cast<double>(running_.size()));
    metrics_.gauge("group_slots_in_use", "group PSes the running jobs use").set(slotsInUse());
    metrics_.gauge("node_group_slots", "group PS slots the node daemons in the pool offer")
        .set(pool_.total());
    if (watchdog_ && Clock::now() >= next_watchdog_) {
      (void)ops::sdNotifyWatchdog();
      next_watchdog_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(*watchdog_ / 2);
    }
  }
  GSGD_INFO("stopping: " << running_.size() << " running job(s) suspended until the next start");
  (void)ops::sdNotifyStopping();
  reapEnded();
  suspendAll();
}

}  // namespace

int runJobHost(zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
               const ZapHandler* zap, AllowList* daemons, const std::atomic<bool>& stop,
               std::atomic<bool>* reload, ArbiterHost* arbiter) {
  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir + "/jobs", ec);
  if (ec) {
    std::fprintf(stderr, "groupsgdd: cannot create %s/jobs: %s\n", cfg.state_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  auto table = JobTable::load(cfg.state_dir + "/jobs.json");
  if (!table) {
    std::fprintf(stderr, "groupsgdd: %s\n", table.status().message().c_str());
    return 1;
  }
  auto front = JobFront::bind(ctx, cfg.listen, keys);
  if (!front) {
    std::fprintf(stderr, "groupsgdd: %s\n", front.status().message().c_str());
    return 1;
  }
  if (!cfg.endpoint_file.empty()) {
    if (Status s = writeFileAtomically(cfg.endpoint_file, front->endpoint() + "\n"); !s) {
      std::fprintf(stderr, "groupsgdd: cannot write the endpoint file: %s\n", s.toString().c_str());
      return 1;
    }
  }
  JobHost host(ctx, cfg, keys, zap, daemons, std::move(*table), std::move(*front), arbiter);
  if (Status s = host.startOperations(); !s) {
    std::fprintf(stderr, "groupsgdd: %s\n", s.message().c_str());
    return 1;
  }
  host.resumeJobs();
  host.run(stop, reload);
  return 0;
}

}  // namespace groupsgd::jobs
