// groupsgdd: the groupsgd daemon. main() reads as the startup sequence: configuration,
// the central PS, the group PSes, the coordinator, then wait for the end of training.
#include <csignal>
#include <cstdio>
#include <thread>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/common/allocator.h"
#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/daemon/control_server.h"
#include "groupsgd/daemon/coordinator.h"
#include "groupsgd/daemon/external_model.h"
#include "groupsgd/daemon/incarnation.h"
#include "groupsgd/daemon/curve_setup.h"
#include "groupsgd/daemon/metrics.h"
#include "groupsgd/daemon/metrics_server.h"
#include "groupsgd/daemon/node.h"
#include "groupsgd/daemon/sd_notify.h"
#include "groupsgd/daemon/version.h"
#include "groupsgd/groupps/group_server.h"
#include "group_server_setup.h"

namespace {

std::atomic<bool> g_stop_requested{false};
std::atomic<bool> g_reload_requested{false};
// Signal handlers only set a flag; the coordinator's loop acts on it.
void onSignal(int) { g_stop_requested.store(true); }
void onHangup(int) { g_reload_requested.store(true); }

int fail(const std::string& what) {
  std::fprintf(stderr, "groupsgdd: %s\n", what.c_str());
  return 1;
}

// Publishes the coordinator endpoint (atomically: a reader never sees half a line).
groupsgd::Status writeEndpointFile(const std::string& path, const std::string& endpoint) {
  if (path.empty()) return groupsgd::Status::ok();
  return groupsgd::writeFileAtomically(path, endpoint + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace groupsgd;
  daemon::DaemonConfig cfg;
  bool help = false;
  Status parsed = daemon::applyFlags(std::vector<std::string>(argv + 1, argv + argc), &cfg, &help);
  if (help) {
    std::fputs(daemon::daemonUsage(), stdout);
    return 0;
  }
  if (!parsed) return fail(parsed.message()) + 1;
  if (Status v = daemon::validate(cfg); !v) return fail(v.message()) + 1;
  log::Level level;
  if (!log::parseLevel(cfg.log_level, &level)) return fail("bad log_level '" + cfg.log_level + "'") + 1;
  log::setLevel(level);
  if (!tuneAllocatorForLargeBuffers()) GSGD_WARN("mallopt refused the allocator settings");
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::signal(SIGHUP, onHangup);
  std::signal(SIGPIPE, SIG_IGN);

  if (cfg.role == "node") return daemon::runNode(cfg, g_stop_requested);

  zmq::context_t ctx(2);
  // CURVE: the ZAP handler runs before anything binds (without it libzmq admits anyone).
  auto curve = daemon::startCurve(ctx, cfg);
  if (!curve) return fail("CURVE: " + curve.status().toString());
  MessageLimits limits;
  limits.job_id = cfg.job_id;
  const std::string any_port = "tcp://" + cfg.bind_host + ":*";

  centralps::CentralConfig ccfg;
  ccfg.model = cfg.model;
  ccfg.seed = cfg.seed;
  ccfg.staleness = cfg.staleness;
  ccfg.outer = cfg.outer_optimizer;
  ccfg.max_delta_norm = cfg.max_delta_norm;
  ccfg.limits = limits;
  ccfg.curve = curve->keys;
  ccfg.checkpoint_dir = cfg.checkpoint_dir;
  ccfg.checkpoint_keep = cfg.checkpoint_keep;
  ccfg.checkpoint_every_versions = cfg.checkpoint_every_versions;
  ccfg.checkpoint_interval_s = cfg.checkpoint_interval_s;
  // Model external: the coordinator's socket is bound first, and the first worker's model
  // sizes the central PS and the group PSes (daemon/external_model.h).
  std::optional<std::pair<zmq::socket_t, std::string>> intake;
  std::string model_fingerprint;
  if (cfg.external_model) {
    auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(curve->keys));
    if (!sock) return fail("coordinator: " + sock.status().toString());
    auto ep = bindSocket(*sock, cfg.listen);
    if (!ep) return fail("coordinator: " + ep.status().toString());
    if (Status s = writeEndpointFile(cfg.endpoint_file, *ep); !s) {
      return fail("cannot write the endpoint file: " + s.toString());
    }
    auto model = cfg.external_model_file.empty()
                     ? daemon::awaitExternalModel(*sock, cfg, g_stop_requested)
                     : daemon::loadExternalModelFile(cfg.external_model_file);
    if (!model) return fail("model external: " + model.status().toString());
    ccfg.initial = std::move(model->initial);
    model_fingerprint = std::move(model->fingerprint);
    intake.emplace(std::move(*sock), *ep);
  }
  auto central = centralps::CentralServer::create(ctx, ccfg, any_port);
  if (!central) return fail("central PS: " + central.status().toString());

  daemon::Topology topo;
  topo.central_endpoint = (*central)->endpoint();
  topo.param_count = (*central)->paramCount();
  topo.model_fingerprint = model_fingerprint;
  std::vector<std::unique_ptr<groupps::GroupServer>> groups;
  // Role coordinator hosts no group PS: node daemons offer them when they register.
  const std::uint32_t local_groups = cfg.role == "coordinator" ? 0 : cfg.groupCount();
  for (std::uint32_t g = 0; g < local_groups; ++g) {
    const groupps::GroupServerConfig gcfg =
        daemon::groupServerConfig(cfg, g, topo.central_endpoint, curve->keys);
    auto server = groupps::GroupServer::create(ctx, gcfg, topo.param_count, any_port);
    if (!server) return fail("group PS " + std::to_string(g) + ": " + server.status().toString());
    topo.group_endpoints.push_back((*server)->endpoint());
    groups.push_back(std::move(*server));
  }
  auto coordinator =
      intake ? Result<std::unique_ptr<daemon::Coordinator>>(daemon::Coordinator::createOn(
                   ctx, std::move(intake->first), intake->second, cfg, topo, curve->keys))
             : daemon::Coordinator::create(ctx, cfg, topo, curve->keys);
  if (!coordinator) return fail("coordinator: " + coordinator.status().toString());
  (*coordinator)->attachZap(curve->zap.get());
  // Operations: the control socket and /metrics start once the data plane is bound.
  daemon::MetricsRegistry metrics;
  metrics.setBuildInfo(daemon::buildVersion());
  std::unique_ptr<daemon::ControlServer> control;
  if (!cfg.control_socket.empty()) {
    daemon::ControlServerOptions copts;
    copts.path = cfg.control_socket;
    if (cfg.control_admin_gid >= 0) copts.admin_gid = static_cast<gid_t>(cfg.control_admin_gid);
    copts.metrics = &metrics;
    auto started = daemon::ControlServer::start(copts);
    if (!started) return fail("control socket: " + started.status().toString());
    control = std::move(*started);
    (*coordinator)->attachControl(control.get());
  }
  std::unique_ptr<daemon::MetricsServer> metrics_server;
  if (!cfg.metrics_listen.empty()) {
    daemon::MetricsServerOptions mopts;
    const auto colon = cfg.metrics_listen.rfind(':');
    mopts.host = cfg.metrics_listen.substr(0, colon);
    mopts.port = static_cast<std::uint16_t>(std::atoi(cfg.metrics_listen.c_str() + colon + 1));
    auto started = daemon::MetricsServer::start(metrics, mopts);
    if (!started) return fail("metrics endpoint: " + started.status().toString());
    metrics_server = std::move(*started);
    GSGD_INFO("metrics on http://" << metrics_server->host() << ":" << metrics_server->port()
                                   << "/metrics");
  }
  (*coordinator)->attachMetrics(&metrics);
  (*coordinator)->setWatchdog(daemon::sdWatchdogInterval());
  (*coordinator)->setReloadFlag(&g_reload_requested);
  if (!(*central)->resumedFrom().empty()) {
    GSGD_INFO("resumed from checkpoint " << (*central)->resumedFrom() << " (central version "
                                         << (*central)->version() << ")");
  }
  // A restarted head: workers and nodes of the previous incarnation re-register on
  // their own (their old epochs are refused); the summary reports what was lost.
  auto head = daemon::startIncarnation(cfg.checkpoint_dir);
  if (!head) return fail("head state: " + head.status().toString());
  head->resumed_from = (*central)->resumedFrom();
  head->resumed_version = (*central)->version();
  GSGD_INFO("head incarnation " << head->incarnation);
  (*coordinator)->setHeadStart(std::move(*head));

  if (!intake) {
    if (Status s = writeEndpointFile(cfg.endpoint_file, (*coordinator)->endpoint()); !s) {
      return fail("cannot write the endpoint file: " + s.toString());
    }
  }

  // Each server runs on its own thread with its own sockets; they talk only by messages.
  std::atomic<bool> servers_stop{false};
  std::vector<std::thread> threads;
  threads.emplace_back([&] { (*central)->run(servers_stop); });
  for (auto& g : groups) threads.emplace_back([&g, &servers_stop] { g->run(servers_stop); });

  (void)daemon::sdNotifyReady("training: coordinator on " + (*coordinator)->endpoint());
  nlohmann::json summary = (*coordinator)->run(g_stop_requested);

  (void)daemon::sdNotifyStopping();
  servers_stop.store(true);  // the central PS writes its final checkpoint before it returns
  for (auto& t : threads) t.join();
  control.reset();
  metrics_server.reset();
  summary["config"] = daemon::toJson(cfg);
  if (!cfg.summary_file.empty()) {
    if (Status s = writeFileAtomically(cfg.summary_file, summary.dump(2) + "\n"); !s) {
      GSGD_ERROR("cannot write the summary file: " << s.toString());
    }
  }
  if (cfg.json) {
    std::printf("%s\n", summary.dump().c_str());
  } else {
    std::printf("done (%s): %.1f s, final test accuracy %s, %llu samples trained, %llu applied, "
                "%llu dropped, accounting %s\n",
                summary["stop_reason"].get<std::string>().c_str(), summary["elapsed_s"].get<double>(),
                summary["final_test_acc"].is_null() ? "n/a" : summary["final_test_acc"].dump().c_str(),
                static_cast<unsigned long long>(summary["samples_trained"].get<std::uint64_t>()),
                static_cast<unsigned long long>(summary["samples_applied"].get<std::uint64_t>()),
                static_cast<unsigned long long>(summary["samples_dropped"].get<std::uint64_t>()),
                summary["accounting_ok"].get<bool>() ? "ok" : "MISMATCH");
  }
  return 0;
}
