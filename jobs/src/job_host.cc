#include "groupsgd/jobs/job_host.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/incarnation.h"
#include "groupsgd/daemon/curve_setup.h"
#include "groupsgd/ops/control_protocol.h"
#include "groupsgd/ops/sd_notify.h"
#include "groupsgd/ops/version.h"
#include "job_host_impl.h"

namespace groupsgd::jobs {

using ops::ControlServer;
using ops::ControlServerOptions;
using ops::MetricsServer;
using ops::MetricsServerOptions;

std::int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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

void JobHost::saveTable() {
  table_changed_ = true;  // the standby gets it at the next poll
  if (Status s = table_.save(); !s) GSGD_ERROR("cannot write the job table: " << s.toString());
}

std::string JobHost::tableMessage() const {
  nlohmann::json links = nlohmann::json::object();
  for (const auto& [name, h] : running_) {
    // Not a model external job (no link; its runner may still be creating its Job).
    if (h->done.load() || h->cfg.replication_listen.empty() || !h->job) continue;
    if (h->job->replicationEndpoint().empty()) continue;
    links[name] = h->job->replicationEndpoint();
  }
  return nlohmann::json{{"role", cfg_.role}, {"table", table_.toJson()}, {"replication", links}}
      .dump();
}

Status JobHost::startReplication(std::optional<ServeTakeover> takeover, std::uint64_t term) {
  if (takeover) {
    auto fence = TableFence::create(ctx_, cfg_.primary, keys_, term);
    if (!fence) return Status(fence.status().code(), "fence: " + fence.status().toString());
    fence_ = std::move(*fence);
    takeover_ = std::move(takeover);
  }
  // A promoted standby's too: a new --serve standby can follow it.
  if (cfg_.replication_listen.empty()) return Status::ok();
  auto link =
      TableLink::create(ctx_, cfg_.replication_listen, keys_, term, cfg_.standby_takeover_ms);
  if (!link && takeover_) {
    // A promoted daemon must serve: it runs without a standby (its jobs commit alone).
    GSGD_ERROR("the promoted daemon runs WITHOUT a standby: " << link.status().toString());
    return Status::ok();
  }
  if (!link) return link.status();
  table_link_ = std::move(*link);
  return Status::ok();
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
    mopts.dashboard = &dashboard_;
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
    if (table_link_) {
      table_link_->poll(std::exchange(table_changed_, false), [this] { return tableMessage(); });
      answerReplicated(false);
    }
    if (fence_) fence_->poll();
    metrics_.gauge("jobs_running", "jobs the daemon hosts now")
        .set(static_cast<double>(running_.size()));
    metrics_.gauge("group_slots_in_use", "group PSes the running jobs use").set(slotsInUse());
    metrics_.gauge("node_group_slots", "group PS slots the node daemons in the pool offer")
        .set(pool_.total());
    if (metrics_server_ && Clock::now() >= next_dashboard_) publishDashboard();
    if (watchdog_ && Clock::now() >= next_watchdog_) {
      (void)ops::sdNotifyWatchdog();
      next_watchdog_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(*watchdog_ / 2);
    }
  }
  GSGD_INFO("stopping: " << running_.size() << " running job(s) suspended until the next start");
  (void)ops::sdNotifyStopping();
  reapEnded();
  answerReplicated(true);
  suspendAll();
}

int runJobHost(zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
               const ZapHandler* zap, AllowList* daemons, const std::atomic<bool>& stop,
               std::atomic<bool>* reload, ArbiterHost* arbiter,
               std::optional<ServeTakeover> takeover) {
  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir + "/jobs", ec);
  if (ec) {
    std::fprintf(stderr, "groupsgdd: cannot create %s/jobs: %s\n", cfg.state_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  // The daemon's term (its standby link's and its fence's): an incarnation of its own in
  // <state_dir>/head.json; a promoted standby's is above its primary's.
  std::uint64_t term = 0;
  if (takeover || !cfg.replication_listen.empty()) {
    auto head = coordinator::startIncarnation(cfg.state_dir, takeover ? takeover->term + 1 : 0);
    if (!head) {
      std::fprintf(stderr, "groupsgdd: daemon term: %s\n", head.status().toString().c_str());
      return 1;
    }
    term = head->incarnation;
  }
  if (takeover) {
    // The table as the primary last sent it, now this daemon's own.
    auto replicated = JobTable::fromJson(takeover->table, cfg.state_dir + "/jobs.json");
    Status saved = replicated ? replicated->save() : replicated.status();
    if (!saved) {
      std::fprintf(stderr, "groupsgdd: the replicated job table: %s\n", saved.toString().c_str());
      return 1;
    }
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
  if (Status s = host.startReplication(std::move(takeover), term); !s) {
    std::fprintf(stderr, "groupsgdd: %s\n", s.message().c_str());
    return 1;
  }
  host.resumeJobs();
  host.run(stop, reload);
  return 0;
}

}  // namespace groupsgd::jobs
