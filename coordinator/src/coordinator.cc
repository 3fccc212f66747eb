#include "groupsgd/coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "groupsgd/common/log.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/coordinator/external_model.h"
#include "groupsgd/coordinator/run_summary.h"
#include "groupsgd/daemon/group_server_setup.h"

namespace groupsgd::coordinator {
namespace {

constexpr int kMaxMessagesPerPass = 1000;

// Waits up to timeout for a message on sock (false on a signal or a poll error).
bool readable(zmq::socket_t& sock, std::chrono::milliseconds timeout) {
  auto ready = pollReadable(sock, timeout);
  if (!ready) GSGD_ERROR(ready.status().message());
  return ready && *ready;
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::create(zmq::context_t& ctx, DaemonConfig cfg,
                                                         Topology topo, CurveKeys curve,
                                                         CoordinatorDeps deps) {
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(curve));
  if (!sock) return sock.status();
  auto ep = bindSocket(*sock, cfg.listen);
  if (!ep) return ep.status();
  return std::unique_ptr<Coordinator>(new Coordinator(ctx, std::move(*sock), *ep, std::move(cfg),
                                                      std::move(topo), std::move(curve),
                                                      std::move(deps)));
}

std::unique_ptr<Coordinator> Coordinator::createOn(zmq::context_t& ctx, zmq::socket_t sock,
                                                   std::string endpoint, DaemonConfig cfg,
                                                   Topology topo, CurveKeys curve,
                                                   CoordinatorDeps deps) {
  return std::unique_ptr<Coordinator>(new Coordinator(ctx, std::move(sock), std::move(endpoint),
                                                      std::move(cfg), std::move(topo),
                                                      std::move(curve), std::move(deps)));
}

Coordinator::Coordinator(zmq::context_t& ctx, zmq::socket_t sock, std::string endpoint,
                         DaemonConfig cfg, Topology topo, CurveKeys curve, CoordinatorDeps deps)
    : ctx_(ctx),
      sock_(std::move(sock)),
      endpoint_(std::move(endpoint)),
      cfg_(std::move(cfg)),
      topo_(std::move(topo)),
      curve_(std::move(curve)),
      deps_(std::move(deps)),
      policy_(std::make_unique<LeastLoadedPolicy>()),
      admission_(cfg_.workers),
      data_ledger_(16ull * cfg_.batch_size),
      run_log_(cfg_.progress_ms > 0) {
  limits_.job_id = cfg_.job_id;
  fleet_ = std::make_unique<GroupFleet>(ctx_, limits_, cfg_.groupCount(), cfg_.exchangePeriod());
  // Epochs carry the incarnation in their high bits, so every assignment of an earlier
  // head is older than any of this one: its pushes, heartbeats and leaves are refused.
  head_.setStart(std::move(deps_.head));
  epoch_ = head_.start().incarnation << 32;
  resumeLedger();
  resumeFromFollowedState();  // a promoted standby: the primary's ledger, newer than any record
  if (deps_.metrics != nullptr) {  // every series the coordinator exports carries its job
    metrics_ =
        std::make_unique<MetricsRegistry>(deps_.metrics, MetricLabels{{"job", cfg_.job_name}});
    exporter_ = std::make_unique<MetricsExporter>(metrics_.get());
    evaluators_.attachMetrics(metrics_.get());
  }
  if (deps_.dashboard != nullptr) dashboard_ = std::make_unique<DashboardFeed>();
  if (cfg_.mode == Mode::kAdaptive) {
    adaptive_ =
        std::make_unique<AdaptiveController>(cfg_.adaptive, cfg_.batch_size, cfg_.groupCount());
    for (std::uint32_t g = 0; g < fleet_->slots(); ++g)
      fleet_->setPeriod(g, adaptive_->periodOf(g));
    resumeAdaptive();  // a promoted standby: the primary's stage and grouping
  }
  // This daemon's own group PSes (role all); node daemons offer theirs as they register.
  for (const auto& ep : topo_.group_endpoints) {
    if (!fleet_->allReady()) fleet_->add(ep, clientSocketOptions(curve_), 0);
  }
  topo_.group_endpoints.clear();  // the fleet knows where each group is from now on
  central_ = {topo_.central_endpoint, clientSocketOptions(curve_)};
  calls_ = std::make_unique<PendingCalls>(ctx_, limits_);
  configs_ = std::make_unique<GroupConfigQueue>(
      ctx_, limits_, [this](std::uint32_t g, bool flush) { return groupConfigMessage(g, flush); },
      [this](std::uint32_t g) { return fleet_->link(g); }, kRpcTimeout);
}

nlohmann::json Coordinator::run(const std::atomic<bool>& stop_requested) {
  log::setThreadTag("coordinator");
  GSGD_INFO("coordinator listening on " << endpoint_ << " (mode " << modeName(cfg_.mode) << ", "
                                        << cfg_.groupCount()
                                        << " group(s), K=" << cfg_.exchangePeriod() << ")");
  auto next_progress = Clock::now() + std::chrono::milliseconds(cfg_.progress_ms);
  reportSkippedCheckpoints();
  schedule_.control = Clock::now() + std::chrono::milliseconds(cfg_.adaptive.control_ms);
  std::string reason;
  while (true) {
    serveOnce(std::chrono::milliseconds(50));
    publishStateIfLogChanged();  // a standby follows the run log (coordinator_state.cc)
    checkLiveness();
    if (Clock::now() >= schedule_.poll) pollGroups();
    if (adaptive_ && Clock::now() >= schedule_.control) {
      schedule_.control = Clock::now() + std::chrono::milliseconds(cfg_.adaptive.control_ms);
      controlWindow();
      if (deps_.standby_state) publishState();  // the standby follows the grouping too
    }
    serveControl();
    if (dashboard_ && Clock::now() >= schedule_.dashboard) publishDashboard();
    if (deps_.reload != nullptr && deps_.reload->exchange(false)) reloadConfig();
    if (shutdown_requested_) {
      reason = "shutdown requested over the control socket";
      break;
    }
    if (Clock::now() >= next_progress) {
      next_progress += std::chrono::milliseconds(cfg_.progress_ms > 0 ? cfg_.progress_ms : 1000);
      if (cfg_.progress_ms > 0) printProgress();
      updateMetrics();
      askCentralStats();  // for the metrics and the checkpoint watch; read when it comes
    }
    if (deps_.suspend != nullptr && deps_.suspend->load()) {
      GSGD_INFO("suspended: the daemon is stopping; the job resumes when it starts again");
      return nlohmann::json{{"suspended", true}};
    }
    if (stop_requested.load()) {
      reason = "stop requested";
      break;
    }
    if (auto r = stopReason()) {
      reason = *r;
      break;
    }
  }
  nlohmann::json summary = finish(reason);
  if (dashboard_) publishDashboard();  // the page's last view: the final figures
  lingerForLateTrainers(stop_requested);
  return summary;
}

void Coordinator::serveOnce(std::chrono::milliseconds timeout) {
  // Everything queued is read before the loop judges anyone's silence (bounded, so a
  // flood cannot starve the rest of the loop).
  for (int n = 0;
       n < kMaxMessagesPerPass && readable(sock_, n == 0 ? timeout : std::chrono::milliseconds(0));
       ++n) {
    auto routed = recvRouted(sock_);
    if (!routed) {
      ++bad_messages_;
      continue;
    }
    try {
      handle(routed->routing_id, std::move(routed->frames));
    } catch (const std::exception& e) {
      refuse(routed->routing_id, internalError(std::string("request failed: ") + e.what()));
    }
  }
  // Answers of the calls that run on threads of their own.
  configs_->pump();
  calls_->pump();
}

void Coordinator::refuse(const zmq::message_t& from, const Status& why) {
  ++bad_messages_;
  GSGD_WARN("refused: " << why.toString());
  (void)replyTo(sock_, from, makeErrorReply(cfg_.job_id, 0, why));
}

void Coordinator::handle(const zmq::message_t& from, std::vector<zmq::message_t>&& frames) {
  const std::string key = frames.empty() ? std::string() : peerKey(frames.front());
  if (Status allowed = checkPeerAllowed(curve_.allowed, key); !allowed) {
    return refuse(from, allowed);
  }
  auto msg = decodeMessage(std::move(frames), limits_);
  if (!msg) return refuse(from, msg.status());
  switch (msg->kind()) {
    case BodyKind::REGISTER:
      return onRegister(from, *msg, key);
    case BodyKind::HEARTBEAT:
      return onHeartbeat(from, *msg, key);
    case BodyKind::LEAVE:
      return onLeave(from, *msg, key);
    case BodyKind::DATA_CLAIM:
      return onDataClaim(from, *msg, key);
    default:
      return refuse(from, invalidArgument(std::string("the coordinator does not serve '") +
                                          bodyKindName(msg->kind()) + "'"));
  }
}

bool Coordinator::ownsId(const zmq::message_t& from, const WorkerRecord& w,
                         const std::string& key) {
  if (key.empty() || key == w.public_key) return true;
  admission_.countIdentityRefused();
  GSGD_WARN("identity refused: key " << key << " used worker " << w.id << "'s id");
  (void)replyTo(sock_, from,
                makeErrorReply(cfg_.job_id, 0,
                               permissionDenied("worker " + std::to_string(w.id) +
                                                " is bound to another key")));
  return false;
}

void Coordinator::configureGroup(std::uint32_t group, bool flush, GroupConfigQueue::Done done,
                                 const std::vector<std::uint32_t>& after) {
  if (!done) {
    done = [group](const Status& s) {
      if (!s) GSGD_WARN("could not update group " << group << ": " << s.toString());
    };
  }
  configs_->request(group, flush, std::move(done), after);
}

Result<OutMessage> Coordinator::groupConfigMessage(std::uint32_t group, bool flush) const {
  if (group >= fleet_->ready())
    return unavailable("group " + std::to_string(group) + " has no PS yet");
  if (groupFailed(group)) return unavailable("group " + std::to_string(group) + " has failed");
  auto members = registry_.groupMembers(group);
  // Workers regrouped away from this group are still listed, leaving, until they learn it.
  for (const auto& [id, w] : registry_.all()) {
    if (w.state == WorkerState::kActive && w.moving_from == group && w.group != group) {
      members.push_back(&w);
    }
  }
  OutMessage out(cfg_.job_id, 0);
  out.header().setEpoch(epoch_);
  auto gc = out.header().getBody().initGroupConfig();
  gc.setGroupId(group);
  gc.setExchangePeriod(fleet_->period(group));
  gc.setStepDeadlineMs(cfg_.step_deadline_ms);
  if (cfg_.mode == Mode::kAdaptive) {  // the other modes are the textbook baselines
    gc.setStepCutoff(static_cast<float>(cfg_.adaptive.step_cutoff));
    gc.setStepCutoffLateFraction(static_cast<float>(cfg_.adaptive.step_cutoff_late_fraction));
  }
  groupps::toProto(daemon::lrScheduleOf(cfg_), gc.initLrSchedule());
  gc.setFlush(flush);
  auto list = gc.initMembers(static_cast<unsigned>(members.size()));
  for (unsigned i = 0; i < members.size(); ++i) {
    const WorkerRecord* m = members[i];
    list[i].setWorkerId(m->id);
    list[i].setBatchSize(m->batch_size);
    list[i].setEpoch(m->group != group ? m->moving_epoch : m->epoch);
    list[i].setPublicKey(m->public_key);
    if (m->group != group) {
      list[i].setLeaving(proto::Directive::REASSIGN);
    } else if (m->draining) {
      list[i].setLeaving(proto::Directive::STOP);
    }
  }
  return out;
}

std::chrono::milliseconds Coordinator::livenessLimit() const {
  return std::chrono::milliseconds(
      std::max<std::uint64_t>(static_cast<std::uint64_t>(cfg_.heartbeat_ms) * cfg_.heartbeat_misses,
                              cfg_.step_deadline_ms + 2ull * cfg_.heartbeat_ms));
}

void Coordinator::checkLiveness() {
  // Once stopping, a silent trainer may only be stalled (a loaded machine): finish() waits
  // for each to hear "stop" until its deadline and only then declares the rest dead.
  if (stopping()) return;
  // A worker waits at most one step deadline inside a push, so it is only declared dead
  // once it has been silent for longer than that plus its heartbeat misses. No call of
  // this loop waits on a server (group configurations, polls, metrics and checkpoints run
  // on threads of their own) and serveOnce() reads every queued message before this
  // runs, so a busy loop does not make anyone look silent.
  const auto limit = livenessLimit();
  const auto now = Clock::now();
  std::vector<std::uint32_t> touched;
  for (const auto& [id, w] : registry_.all()) {
    if (w.state != WorkerState::kActive || now - w.last_seen < limit) continue;
    if (admission_.isAdmitting(id)) continue;  // its registration is not answered yet
    WorkerRecord* rec = registry_.find(id);
    rec->state = WorkerState::kDead;
    GSGD_WARN(workerRoleName(rec->role) << " " << id << " missed its heartbeats: declared dead");
    if (rec->role == WorkerRole::kNode) failNode(*rec);
    if (rec->role == WorkerRole::kEvaluator && !stopping()) {
      evaluatorLost(*rec, "missed its heartbeats: declared dead");
    }
    if (rec->role == WorkerRole::kTrainer) {
      releaseData(*rec, "declared dead");
      touched.push_back(rec->group);
      if (adaptive_) {
        adaptive_->forget(id);
        adaptive_->membershipChanged("worker " + std::to_string(id) + " died");
      }
      event("death", "worker " + std::to_string(id) + " missed its heartbeats: declared dead");
    }
  }
  for (auto g : touched) {
    if (!groupFailed(g)) configureGroup(g);
  }
}

Coordinator::Accuracy Coordinator::latestAccuracy() const {
  Accuracy best;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role != WorkerRole::kEvaluator || (w.test_accuracy < 0 && w.test_loss < 0)) continue;
    if ((best.value < 0 && best.loss < 0) || w.evaluated_version > best.version) {
      best.value = w.test_accuracy;
      best.version = w.evaluated_version;
      best.loss = w.test_loss;
    }
  }
  return best;
}

std::optional<std::string> Coordinator::stopReason() {
  if (!run_log_.training()) return std::nullopt;
  const double elapsed = run_log_.trainingS();
  if (cfg_.target_acc > 0) {
    if (const Accuracy acc = latestAccuracy(); acc.value >= cfg_.target_acc) {
      run_log_.targetReached(acc.value, acc.loss);
      return "target accuracy reached";
    }
  }
  if (cfg_.target_loss > 0) {
    if (const Accuracy acc = latestAccuracy(); acc.loss >= 0 && acc.loss <= cfg_.target_loss) {
      run_log_.targetReached(acc.value, acc.loss);
      return "target loss reached";
    }
  }
  if (cfg_.max_seconds > 0 && elapsed >= cfg_.max_seconds) return "time budget spent";
  if (cfg_.max_samples > 0 && registry_.samplesTrained() >= cfg_.max_samples) {
    return "sample budget spent";
  }
  return std::nullopt;
}

std::size_t Coordinator::groupsInUse() const {
  std::vector<bool> used(fleet_->slots(), false);
  for (const auto& [id, w] : registry_.all()) {
    if (w.role == WorkerRole::kTrainer && w.state == WorkerState::kActive &&
        w.group < used.size()) {
      used[w.group] = true;
    }
  }
  return static_cast<std::size_t>(std::count(used.begin(), used.end(), true));
}

void Coordinator::printProgress() {
  if (!run_log_.training()) return;
  double loss = 0;
  std::uint64_t steps = 0;
  std::size_t n = 0;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role != WorkerRole::kTrainer || w.state != WorkerState::kActive || w.steps == 0) continue;
    loss += w.last_loss;
    steps = std::max(steps, w.steps);
    ++n;
  }
  const Accuracy latest = latestAccuracy();
  const double acc = latest.value;
  std::string stage =
      adaptive_ ? std::string("  stage ") + policy::stageName(adaptive_->stage()) : std::string();
  // The jobs of a --serve daemon share its standard output: each line names its job.
  if (deps_.suspend != nullptr) stage += "  job " + cfg_.job_name;
  // The group optimizer's lr as the groups last reported it (their mean: they differ only
  // by the samples each has stepped since its last exchange).
  double lr_sum = 0;
  std::size_t lr_groups = 0;
  for (std::uint32_t g = 0; g < fleet_->ready(); ++g) {
    if (fleet_->learningRate(g) > 0 && !groupFailed(g)) {
      lr_sum += fleet_->learningRate(g);
      ++lr_groups;
    }
  }
  if (lr_groups > 0) {
    char lr_text[32];
    std::snprintf(lr_text, sizeof lr_text, "  lr %.4g", lr_sum / static_cast<double>(lr_groups));
    stage = lr_text + stage;
  }
  const std::string acc_text =
      (acc < 0 ? std::string("  -   ") : std::to_string(acc).substr(0, 6)) +
      evaluators_.progressNote(run_log_.uptimeS());
  // A validation loss only where an evaluator reports one (a language model's).
  char loss_text[32] = "";
  if (latest.loss >= 0) std::snprintf(loss_text, sizeof loss_text, "  test_loss %.4f", latest.loss);
  std::printf(
      "[%7.1fs] step %6llu  loss %.4f  test_acc %s%s  groups %zu  workers %zu  samples %llu%s\n",
      run_log_.trainingS(), static_cast<unsigned long long>(steps),
      n ? loss / static_cast<double>(n) : 0.0, acc_text.c_str(), loss_text, groupsInUse(),
      registry_.activeTrainers(), static_cast<unsigned long long>(registry_.samplesTrained()),
      stage.c_str());
  std::fflush(stdout);
}

Status Coordinator::drain(std::uint64_t worker_id, std::function<void(const Status&)> done) {
  WorkerRecord* w = registry_.find(worker_id);
  if (w == nullptr || w->role != WorkerRole::kTrainer) {
    return notFound("no trainer " + std::to_string(worker_id));
  }
  if (w->state != WorkerState::kActive) {
    return failedPrecondition("worker " + std::to_string(worker_id) + " is " +
                              workerStateName(w->state));
  }
  if (w->draining) {  // idempotent
    if (done) configs_->whenSettled(w->group, std::move(done));
    return Status::ok();
  }
  w->draining = true;
  event("drain", "worker " + std::to_string(worker_id) + " drains after its next step");
  configureGroup(w->group, false, std::move(done));
  return Status::ok();
}

}  // namespace groupsgd::coordinator
