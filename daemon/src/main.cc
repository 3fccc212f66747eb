// groupsgdd: the groupsgd daemon. main() reads as the startup sequence: configuration,
// the central PS, the group PSes, the coordinator, then wait for the end of training.
#include <csignal>
#include <cstdio>
#include <optional>
#include <thread>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/common/allocator.h"
#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/crash_report.h"
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/coordinator/external_model.h"
#include "groupsgd/daemon/arbiter_host.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/daemon/curve_setup.h"
#include "groupsgd/jobs/central_shards.h"
#include "groupsgd/jobs/job.h"
#include "groupsgd/jobs/job_host.h"
#include "groupsgd/jobs/node_shard_intake.h"
#include "groupsgd/jobs/serve_standby.h"
#include "groupsgd/node/node.h"
#include "groupsgd/ops/control_server.h"
#include "groupsgd/ops/metrics.h"
#include "groupsgd/ops/metrics_server.h"
#include "groupsgd/ops/sd_notify.h"
#include "groupsgd/ops/version.h"
#include "standby_follower.h"

namespace {

using namespace groupsgd;

std::atomic<bool> g_stop_requested{false};
std::atomic<bool> g_reload_requested{false};
// Signal handlers only set a flag; the coordinator's loop acts on it.
void onSignal(int) { g_stop_requested.store(true); }
void onHangup(int) { g_reload_requested.store(true); }

int fail(const std::string& what) {
  std::fprintf(stderr, "groupsgdd: %s\n", what.c_str());
  return 1;
}

// Flags and file into cfg, validated, log level set. An exit code when the process ends
// here: 0 after --help, 2 for a configuration error.
std::optional<int> readConfiguration(int argc, char** argv, daemon::DaemonConfig* cfg) {
  bool help = false;
  Status parsed = daemon::applyFlags(std::vector<std::string>(argv + 1, argv + argc), cfg, &help);
  if (help) {
    std::fputs(daemon::daemonUsage(), stdout);
    return 0;
  }
  if (!parsed) return fail(parsed.message()) + 1;
  if (Status v = daemon::validate(*cfg); !v) return fail(v.message()) + 1;
  log::Level level;
  if (!log::parseLevel(cfg->log_level, &level))
    return fail("bad log_level '" + cfg->log_level + "'") + 1;
  log::setLevel(level);
  return std::nullopt;
}

void installSignalHandlers() {
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::signal(SIGHUP, onHangup);
  std::signal(SIGPIPE, SIG_IGN);
  installCrashReport("groupsgdd");
}

// Publishes the coordinator endpoint (atomically: a reader never sees half a line).
Status writeEndpointFile(const std::string& path, const std::string& endpoint) {
  if (path.empty()) return Status::ok();
  return writeFileAtomically(path, endpoint + "\n");
}

// The coordinator's socket bound (and published) before the job: the intake below talks
// on it first, then hands it to the coordinator.
Result<jobs::ExternalIntake> bindCoordinatorEarly(zmq::context_t& ctx,
                                                  const daemon::DaemonConfig& cfg,
                                                  const CurveKeys& keys) {
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(keys));
  if (!sock) return Status(sock.status().code(), "coordinator: " + sock.status().toString());
  auto ep = bindSocket(*sock, cfg.listen);
  if (!ep) return Status(ep.status().code(), "coordinator: " + ep.status().toString());
  if (Status s = writeEndpointFile(cfg.endpoint_file, *ep); !s) {
    return Status(s.code(), "cannot write the endpoint file: " + s.toString());
  }
  return jobs::ExternalIntake{std::move(*sock), *ep, "", {}, ""};
}

// central_shards > 1 with no central_shard_endpoints: node daemons hosting shards 1..S-1
// offer them at the coordinator's endpoint (jobs/node_shard_intake.h); their endpoints
// become cfg's central_shard_endpoints, checked by the job as listed ones are.
Result<jobs::ExternalIntake> takeNodeShards(zmq::context_t& ctx, daemon::DaemonConfig& cfg,
                                            const CurveKeys& keys) {
  auto ranges = jobs::centralShardRanges(cfg);
  if (!ranges) return Status(ranges.status().code(), "central PS: " + ranges.status().message());
  auto intake = bindCoordinatorEarly(ctx, cfg, keys);
  if (!intake) return intake.status();
  auto endpoints =
      jobs::awaitNodeShards(intake->socket, cfg, *ranges, [] { return g_stop_requested.load(); });
  if (!endpoints) return endpoints.status();
  cfg.central_shard_endpoints = *endpoints;
  return intake;
}

// Model external: the coordinator's socket is bound (and published) first, and the first
// registering worker's model (or external_model_file) sizes the central PS and the group
// PSes. The bound socket is handed to the coordinator afterwards.
Result<jobs::ExternalIntake> takeExternalModel(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                                               const CurveKeys& keys) {
  auto intake = bindCoordinatorEarly(ctx, cfg, keys);
  if (!intake) return intake.status();
  auto model = cfg.external_model_file.empty()
                   ? coordinator::awaitExternalModel(intake->socket, cfg,
                                                     [] { return g_stop_requested.load(); })
                   : coordinator::loadExternalModelFile(cfg.external_model_file);
  if (!model) return Status(model.status().code(), "model external: " + model.status().toString());
  intake->fingerprint = std::move(model->fingerprint);
  intake->initial = std::move(model->initial);
  intake->layout = std::move(model->layout);
  return intake;
}

// The control socket, /metrics and the dashboard page. They start just before the job binds its
// data plane: the coordinator takes them at its creation (requests wait in the queue until it
// runs).
struct Operations {
  ops::MetricsRegistry metrics;
  ops::DashboardBoard dashboard;  // what the page at / of the metrics endpoint shows
  std::unique_ptr<ops::ControlServer> control;
  std::unique_ptr<ops::MetricsServer> metrics_server;
};

Status startOperations(const daemon::DaemonConfig& cfg, Operations* running,
                       coordinator::CoordinatorDeps* deps) {
  running->metrics.setBuildInfo(ops::buildVersion());
  if (!cfg.control_socket.empty()) {
    ops::ControlServerOptions copts;
    copts.path = cfg.control_socket;
    if (cfg.role == "standby") copts.methods = ops::standbyControlMethods();
    if (cfg.control_admin_gid >= 0) copts.admin_gid = static_cast<gid_t>(cfg.control_admin_gid);
    copts.metrics = &running->metrics;
    auto started = ops::ControlServer::start(copts);
    if (!started)
      return Status(started.status().code(), "control socket: " + started.status().toString());
    running->control = std::move(*started);
    deps->control = running->control.get();
  }
  if (!cfg.metrics_listen.empty()) {
    ops::MetricsServerOptions mopts;
    const auto colon = cfg.metrics_listen.rfind(':');
    mopts.host = cfg.metrics_listen.substr(0, colon);
    mopts.port = static_cast<std::uint16_t>(std::atoi(cfg.metrics_listen.c_str() + colon + 1));
    mopts.dashboard = &running->dashboard;
    auto started = ops::MetricsServer::start(running->metrics, mopts);
    if (!started) {
      return Status(started.status().code(), "metrics endpoint: " + started.status().toString());
    }
    running->metrics_server = std::move(*started);
    GSGD_INFO("metrics on http://" << running->metrics_server->host() << ":"
                                   << running->metrics_server->port() << "/metrics");
    deps->dashboard = &running->dashboard;
  }
  deps->metrics = &running->metrics;
  deps->watchdog = ops::sdWatchdogInterval();
  deps->reload = &g_reload_requested;
  return Status::ok();
}

// The closing summary: into summary_file if set, then one JSON line or one text line.
void reportSummary(const daemon::DaemonConfig& cfg, nlohmann::json summary) {
  // The coordinator's configuration at the end (with live settings); the start one where
  // no coordinator reported.
  if (!summary.contains("config")) summary["config"] = daemon::toJson(cfg);
  if (!cfg.summary_file.empty()) {
    if (Status s = writeFileAtomically(cfg.summary_file, summary.dump(2) + "\n"); !s) {
      GSGD_ERROR("cannot write the summary file: " << s.toString());
    }
  }
  if (cfg.json) {
    std::printf("%s\n", summary.dump().c_str());
    return;
  }
  // The accuracy a float reported: four decimals, not the double it widened to.
  char accuracy[16] = "n/a";
  if (summary["final_test_acc"].is_number()) {
    std::snprintf(accuracy, sizeof accuracy, "%.4f", summary["final_test_acc"].get<double>());
  }
  std::printf(
      "done (%s): %.1f s, final test accuracy %s, %llu samples trained, %llu applied, "
      "%llu dropped, accounting %s\n",
      summary["stop_reason"].get<std::string>().c_str(), summary["elapsed_s"].get<double>(),
      accuracy, static_cast<unsigned long long>(summary["samples_trained"].get<std::uint64_t>()),
      static_cast<unsigned long long>(summary["samples_applied"].get<std::uint64_t>()),
      static_cast<unsigned long long>(summary["samples_dropped"].get<std::uint64_t>()),
      summary["accounting_ok"].get<bool>() ? "ok" : "MISMATCH");
  // A validation loss and the best version where the evaluator reported them.
  if (summary.value("final_test_loss", nlohmann::json()).is_number()) {
    std::printf("final test loss %.4f\n", summary["final_test_loss"].get<double>());
  }
  if (summary.value("best_version", nlohmann::json()).is_number()) {
    const auto figure = [&](const char* key) {
      return summary[key].is_number() ? std::to_string(summary[key].get<double>()).substr(0, 6)
                                      : std::string("n/a");
    };
    const std::string file = summary["best_model_file"].is_string()
                                 ? ", kept in " + summary["best_model_file"].get<std::string>()
                                 : std::string();
    std::printf("best: version %llu, test accuracy %s, test loss %s%s\n",
                static_cast<unsigned long long>(summary["best_version"].get<std::uint64_t>()),
                figure("best_test_acc").c_str(), figure("best_test_loss").c_str(), file.c_str());
  }
}

// --role standby --serve until the takeover (nullopt: stopped first). Its control socket
// answers status and failover meanwhile; the promoted daemon binds its own there.
Result<std::optional<jobs::ServeTakeover>> followServe(zmq::context_t& ctx,
                                                       const daemon::DaemonConfig& cfg,
                                                       const CurveKeys& keys) {
  std::unique_ptr<ops::ControlServer> control;
  if (!cfg.control_socket.empty()) {
    ops::ControlServerOptions copts;
    copts.path = cfg.control_socket;
    copts.methods = ops::standbyControlMethods();
    if (cfg.control_admin_gid >= 0) copts.admin_gid = static_cast<gid_t>(cfg.control_admin_gid);
    auto started = ops::ControlServer::start(copts);
    if (!started) {
      return Status(started.status().code(), "control socket: " + started.status().toString());
    }
    control = std::move(*started);
  }
  return jobs::followServePrimary(ctx, cfg, keys, g_stop_requested, control.get());
}

}  // namespace

int main(int argc, char** argv) {
  daemon::DaemonConfig cfg;
  if (auto exit_code = readConfiguration(argc, argv, &cfg)) return *exit_code;
  if (!tuneAllocatorForLargeBuffers()) GSGD_WARN("mallopt refused the allocator settings");
  installSignalHandlers();
  if (cfg.role == "node") return node::runNode(cfg, g_stop_requested, &g_reload_requested);

  zmq::context_t ctx(2);
  // CURVE: the ZAP handler runs before anything binds (without it libzmq admits anyone).
  auto curve = daemon::startCurve(ctx, cfg);
  if (!curve) return fail("CURVE: " + curve.status().toString());
  auto arbiter = daemon::startArbiter(ctx, cfg, curve->keys);  // arbiter_listen, or nothing
  if (!arbiter) return fail(arbiter.status().message());
  if (cfg.role == "central-shard") {
    auto shard = jobs::centralShardSetup(cfg, curve->keys, cfg.shard_index);
    if (!shard) return fail("central shard: " + shard.status().message());
    // With --primary: a standby of that shard, serving once it took over (docs/shards.md).
    std::optional<centralps::ReplicaState> replica;
    if (!cfg.primary.empty()) {
      auto followed = daemon::followPrimary(ctx, cfg, curve->keys, shard->central,
                                            daemon::FollowedPrimary{false, shard->role},
                                            g_stop_requested, nullptr);
      if (!followed) return fail(followed.status().message());
      if (!*followed) {
        GSGD_INFO("shard standby stopped before any takeover");
        return 0;
      }
      replica = std::move(**followed);
    }
    Status served =
        jobs::serveCentralShard(ctx, cfg, std::move(*shard), g_stop_requested, std::move(replica));
    return served ? 0 : fail(served.message());
  }
  if (cfg.serve) {
    // --role standby --serve: follow a --serve primary (docs/jobs.md, "Standby"), then serve
    // its jobs as the primary did.
    std::optional<jobs::ServeTakeover> takeover;
    if (cfg.role == "standby") {
      auto taken = followServe(ctx, cfg, curve->keys);
      if (!taken) return fail(taken.status().message());
      if (!*taken) {
        GSGD_INFO("standby stopped before any takeover");
        return 0;
      }
      takeover = std::move(**taken);
      cfg.role = takeover->role;
      // Its replication_listen, if set, is opened now: a new --serve standby can follow it.
    }
    return jobs::runJobHost(ctx, cfg, curve->keys, curve->zap.get(), curve->daemons.get(),
                            g_stop_requested, &g_reload_requested, arbiter->get(),
                            std::move(takeover));
  }

  // One run: one job, its coordinator on this thread; the process ends with it.
  std::optional<jobs::ExternalIntake> intake;
  if (cfg.external_model) {
    auto taken = takeExternalModel(ctx, cfg, curve->keys);
    if (!taken) return fail(taken.status().message());
    intake = std::move(*taken);
  } else if (cfg.central_shards > 1 && cfg.central_shard_endpoints.empty() &&
             cfg.role != "standby") {  // a standby gathers them once promoted (below)
    auto taken = takeNodeShards(ctx, cfg, curve->keys);
    if (!taken) return fail(taken.status().message());
    intake = std::move(*taken);
  }
  const bool published = intake.has_value();
  coordinator::CoordinatorDeps deps;
  deps.zap = curve->zap.get();
  if (curve->zap) {
    deps.reload_keys = [&cfg, &curve] {
      return daemon::reloadAllowList(cfg, curve->zap.get(), curve->keys.public_key,
                                     curve->daemons.get());
    };
  }
  Operations ops;
  if (Status s = startOperations(cfg, &ops, &deps); !s) return fail(s.message());
  // Role standby: follow the primary until it falls silent, then become the head it was.
  std::optional<centralps::ReplicaState> replica;
  if (cfg.role == "standby") {
    // Sharded: the replica is of shard 0, and the primary must run the same cut.
    auto central = jobs::headCentralConfigFor(cfg, curve->keys);
    if (!central) return fail("standby: " + central.status().message());
    auto described = jobs::headShardDescription(cfg);
    if (!described) return fail("standby: " + described.status().message());
    auto followed = daemon::followPrimary(ctx, cfg, curve->keys, *central,
                                          daemon::FollowedPrimary{true, *described},
                                          g_stop_requested, ops.control.get());
    if (!followed) return fail(followed.status().message());
    if (!*followed) {
      GSGD_INFO("standby stopped before any takeover");
      return 0;
    }
    replica = std::move(**followed);
    // all | coordinator, as the primary ran (a sharded head's snapshot says more after it).
    cfg.role = replica->head_role.substr(0, replica->head_role.find(' '));
    // Its replication_listen, if set, is opened now: a new standby can follow this head.
    // Shards hosted by node daemons are gathered again: they offer them to this head.
    if (cfg.central_shards > 1 && cfg.central_shard_endpoints.empty()) {
      auto taken = takeNodeShards(ctx, cfg, curve->keys);
      if (!taken) return fail(taken.status().message());
      intake = std::move(*taken);
    }
  }
  auto job = jobs::Job::create(ctx, cfg, curve->keys, std::move(intake), std::nullopt,
                               std::move(deps), std::move(replica));
  if (!job) return fail(job.status().message());
  coordinator::Coordinator& coordinator = (*job)->coordinator();
  if (!published) {
    if (Status s = writeEndpointFile(cfg.endpoint_file, coordinator.endpoint()); !s) {
      return fail("cannot write the endpoint file: " + s.toString());
    }
  }

  // Each server runs on its own thread with its own sockets; they talk only by messages.
  (*job)->startServers();
  (void)ops::sdNotifyReady("training: coordinator on " + coordinator.endpoint());
  nlohmann::json summary = (*job)->runCoordinator(g_stop_requested);

  (void)ops::sdNotifyStopping();
  (*job)->stopServers();
  ops.control.reset();
  ops.metrics_server.reset();
  reportSummary(cfg, std::move(summary));
  return 0;
}
