#include "groupsgd/coordinator/coordinator.h"

#include <algorithm>
#include <set>
#include <cstdio>
#include <map>
#include <sstream>

#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/external_model.h"
#include "groupsgd/coordinator/run_summary.h"

namespace groupsgd::coordinator {
namespace {

constexpr auto kRpcTimeout = std::chrono::milliseconds(5000);
constexpr int kMaxMessagesPerPass = 1000;

// Waits up to timeout for a message on sock (false on a signal or a poll error).
bool readable(zmq::socket_t& sock, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
  try {
    zmq::poll(&item, 1, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) GSGD_ERROR("poll failed: " << e.what());
    return false;
  }
  return (item.revents & ZMQ_POLLIN) != 0;
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

WorkerRole roleOf(proto::Role r) {
  switch (r) {
    case proto::Role::TRAINER: return WorkerRole::kTrainer;
    case proto::Role::EVALUATOR: return WorkerRole::kEvaluator;
    case proto::Role::NODE: return WorkerRole::kNode;
    default: return WorkerRole::kTool;
  }
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::create(zmq::context_t& ctx, DaemonConfig cfg,
                                                         Topology topo, CurveKeys curve) {
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(curve));
  if (!sock) return sock.status();
  auto ep = bindSocket(*sock, cfg.listen);
  if (!ep) return ep.status();
  return std::unique_ptr<Coordinator>(
      new Coordinator(ctx, std::move(*sock), *ep, std::move(cfg), std::move(topo), std::move(curve)));
}

std::unique_ptr<Coordinator> Coordinator::createOn(zmq::context_t& ctx, zmq::socket_t sock,
                                                  std::string endpoint, DaemonConfig cfg,
                                                  Topology topo, CurveKeys curve) {
  return std::unique_ptr<Coordinator>(new Coordinator(ctx, std::move(sock), std::move(endpoint),
                                                      std::move(cfg), std::move(topo),
                                                      std::move(curve)));
}

Coordinator::Coordinator(zmq::context_t& ctx, zmq::socket_t sock, std::string endpoint,
                         DaemonConfig cfg, Topology topo, CurveKeys curve)
    : ctx_(ctx),
      sock_(std::move(sock)),
      endpoint_(std::move(endpoint)),
      cfg_(std::move(cfg)),
      topo_(std::move(topo)),
      curve_(std::move(curve)),
      policy_(std::make_unique<LeastLoadedPolicy>()) {
  limits_.job_id = cfg_.job_id;
  fleet_ = std::make_unique<GroupFleet>(ctx_, limits_, cfg_.groupCount(), cfg_.exchangePeriod());
  epoch_ = head_.incarnation << 32;
  if (cfg_.mode == Mode::kAdaptive) {
    adaptive_ = std::make_unique<AdaptiveController>(cfg_.adaptive, cfg_.batch_size,
                                                     cfg_.groupCount());
    for (std::uint32_t g = 0; g < fleet_->slots(); ++g) fleet_->setPeriod(g, adaptive_->periodOf(g));
  }
  // This daemon's own group PSes (role all); node daemons offer theirs as they register.
  for (const auto& ep : topo_.group_endpoints) {
    if (!fleet_->allReady()) fleet_->add(ep, clientSocketOptions(curve_), 0);
  }
  topo_.group_endpoints.clear();  // the fleet knows where each group is from now on
  central_ = std::make_unique<RpcClient>(ctx_, topo_.central_endpoint, limits_,
                                         clientSocketOptions(curve_));
  calls_ = std::make_unique<PendingCalls>(ctx_, limits_);
  configs_ = std::make_unique<GroupConfigQueue>(
      ctx_, limits_,
      [this](std::uint32_t g, bool flush) { return groupConfigMessage(g, flush); },
      [this](std::uint32_t g) { return fleet_->link(g); },
      kRpcTimeout);
}

void Coordinator::setHeadStart(HeadStart start) {
  head_ = std::move(start);
  // Epochs carry the incarnation in their high bits, so every assignment of an earlier
  // head is older than any of this one: its pushes, heartbeats and leaves are refused.
  epoch_ = std::max(epoch_, head_.incarnation << 32);
}

nlohmann::json Coordinator::run(const std::atomic<bool>& stop_requested) {
  log::setThreadTag("coordinator");
  GSGD_INFO("coordinator listening on " << endpoint_ << " (mode " << modeName(cfg_.mode) << ", "
                                        << cfg_.groupCount() << " group(s), K="
                                        << cfg_.exchangePeriod() << ")");
  auto next_progress = Clock::now() + std::chrono::milliseconds(cfg_.progress_ms);
  reportSkippedCheckpoints();
  next_control_ = Clock::now() + std::chrono::milliseconds(cfg_.adaptive.control_ms);
  std::string reason;
  while (true) {
    serveOnce(std::chrono::milliseconds(50));
    checkLiveness();
    if (Clock::now() >= next_poll_) pollGroups();
    if (adaptive_ && Clock::now() >= next_control_) {
      next_control_ = Clock::now() + std::chrono::milliseconds(cfg_.adaptive.control_ms);
      controlWindow();
    }
    serveControl();
    if (reload_ != nullptr && reload_->exchange(false)) reloadConfig();
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
    if (suspend_ != nullptr && suspend_->load()) {
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
  lingerForLateTrainers(stop_requested);
  return summary;
}

std::size_t Coordinator::trainersSeen() const {
  std::set<std::pair<std::string, std::uint32_t>> seen = told_finished_;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role == WorkerRole::kTrainer) seen.insert({w.host, w.pid});
  }
  return seen.size();
}

void Coordinator::lingerForLateTrainers(const std::atomic<bool>& stop_requested) {
  // A fresh head's late trainers are still within their --connect-timeout-ms and find
  // the run over only if they come in time; a restarted head's ones were already
  // running, and would retry for their --give-up-s against a head that is gone.
  // (Without a checkpoint directory there is no restart: the incarnation is a time.)
  if (head_.state_file.empty() || head_.incarnation <= 1 || cfg_.finish_linger_s <= 0) return;
  if (stop_now_ != nullptr && stop_now_->load()) return;
  if (trainersSeen() >= cfg_.workers) return;
  const auto until = Clock::now() + std::chrono::milliseconds(
                                        static_cast<std::int64_t>(cfg_.finish_linger_s * 1000));
  GSGD_INFO("the run is over with " << trainersSeen() << " of " << cfg_.workers
                                    << " trainers back since the restart: telling late ones "
                                    << "`finished` for up to " << cfg_.finish_linger_s << " s");
  while (trainersSeen() < cfg_.workers && Clock::now() < until && !stop_requested.load() &&
         !shutdown_requested_) {
    serveOnce(std::chrono::milliseconds(50));
    serveControl();
  }
  GSGD_INFO("stopped lingering: " << trainersSeen() << " of " << cfg_.workers
                                  << " trainers seen since the restart");
}

void Coordinator::serveOnce(std::chrono::milliseconds timeout) {
  // Everything queued is read before the loop judges anyone's silence (bounded, so a
  // flood cannot starve the rest of the loop).
  for (int n = 0; n < kMaxMessagesPerPass &&
                  readable(sock_, n == 0 ? timeout : std::chrono::milliseconds(0));
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
    case BodyKind::REGISTER: return onRegister(from, *msg, key);
    case BodyKind::HEARTBEAT: return onHeartbeat(from, *msg, key);
    case BodyKind::LEAVE: return onLeave(from, *msg, key);
    default:
      return refuse(from, invalidArgument(std::string("the coordinator does not serve '") +
                                          bodyKindName(msg->kind()) + "'"));
  }
}

bool Coordinator::ownsId(const zmq::message_t& from, const WorkerRecord& w,
                         const std::string& key) {
  if (key.empty() || key == w.public_key) return true;
  ++identity_refused_;
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
  if (group >= fleet_->ready()) return unavailable("group " + std::to_string(group) + " has no PS yet");
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

void Coordinator::onRegister(const zmq::message_t& from, const InMessage& msg,
                             const std::string& key) {
  auto r = msg.header().getBody().getRegister();
  if (Status s = admissionCheck(r, key); !s) return refuse(from, s);
  if (r.getWorkerId() != 0) return onReturningWorker(from, msg, key);
  onNewWorker(from, msg, key);
}

Status Coordinator::admissionCheck(proto::Register::Reader r, const std::string& key) {
  if (stopping_) {
    // Remembered so that a trainer asking again while the head lingers is told `finished`.
    if (roleOf(r.getRole()) == WorkerRole::kTrainer) {
      told_finished_.insert({r.getHost().cStr(), r.getPid()});
    }
    return finished("training is over; not accepting workers");
  }
  if (!key.empty() && quarantined_keys_.count(key) != 0) {
    ++quarantine_refusals_;
    return quarantined("CURVE key " + key + " is quarantined");
  }
  if (quarantined_procs_.count({r.getHost().cStr(), r.getPid()}) != 0) {
    ++quarantine_refusals_;
    return quarantined("process " + std::to_string(r.getPid()) + " on " + r.getHost().cStr() +
                       " is quarantined");
  }
  if (r.getJob().size() > 0 && cfg_.job_name != r.getJob().cStr()) {
    return notFound(std::string("no job '") + r.getJob().cStr() +
                    "' here; jobs you can join: " + cfg_.job_name);
  }
  return checkWorkerModel(cfg_, topo_, r);
}

// A moved worker asks for its new assignment under the id it has.
void Coordinator::onReturningWorker(const zmq::message_t& from, const InMessage& msg,
                                    const std::string& key) {
  auto r = msg.header().getBody().getRegister();
  WorkerRecord* known = registry_.find(r.getWorkerId());
  if (known != nullptr && known->state == WorkerState::kQuarantined) {
    ++quarantine_refusals_;
    return refuse(from, quarantined("worker " + std::to_string(known->id) + " is quarantined"));
  }
  // An id handed out by an earlier head incarnation names somebody else now.
  const std::uint64_t claimed = msg.header().getEpoch();
  if (known != nullptr && claimed != 0 && (claimed >> 32) != (known->epoch >> 32)) known = nullptr;
  if (known == nullptr || known->state != WorkerState::kActive) {
    return refuse(from, notFound("worker " + std::to_string(r.getWorkerId()) +
                                 " is not registered; register as a new worker"));
  }
  if (!ownsId(from, *known, key)) return;
  known->last_seen = Clock::now();
  if (known->role == WorkerRole::kTrainer && groupFailed(known->group)) {
    return refuse(from, unavailable("group " + std::to_string(known->group) +
                                    " failed and no live group is left; retry"));
  }
  if (known->moving_from) {
    const std::uint32_t old = *known->moving_from;
    known->moving_from.reset();
    configureGroup(old);  // drop it from the old group's list
  }
  // Answered once its group's configuration on its way (a failover, a regroup) returned,
  // so the group expects it when it arrives.
  auto to = std::make_shared<zmq::message_t>(from.data(), from.size());
  configs_->whenSettled(known->group, [this, to, id = known->id](const Status&) {
    const WorkerRecord* w = registry_.find(id);
    if (w == nullptr || w->state != WorkerState::kActive) {
      return refuse(*to, notFound("worker " + std::to_string(id) +
                                  " is not registered; register as a new worker"));
    }
    sendAssignment(*to, *w);
  });
}

void Coordinator::onNewWorker(const zmq::message_t& from, const InMessage& msg,
                              const std::string& key) {
  auto r = msg.header().getBody().getRegister();
  WorkerRecord w;
  w.id = next_id_++;
  w.role = roleOf(r.getRole());
  w.host = r.getHost().cStr();
  w.pid = r.getPid();
  w.name = r.getName().cStr();
  w.public_key = key;
  w.batch_size = cfg_.batch_size;
  w.epoch = ++epoch_;
  w.last_seen = Clock::now();
  if (w.role == WorkerRole::kTrainer && !slotsReady()) {
    --next_id_;
    return refuse(from, unavailable("waiting for node daemons to offer group PSes (" +
                                    std::to_string(fleet_->ready()) + " of " +
                                    std::to_string(cfg_.groupCount()) + "); retry"));
  }
  if (w.role == WorkerRole::kNode && !key.empty() && !curve_.hasDaemonRights(key)) {
    --next_id_;
    return refuse(from, permissionDenied("key " + key + " may not register as a node daemon "
                                         "(label its allow-list line `node`)"));
  }
  if (w.role == WorkerRole::kNode) {
    WorkerRecord& node = registry_.add(w);
    return onNodeRegister(from, msg, node);
  }
  if (w.role == WorkerRole::kTrainer) {
    // Adaptive mode trains everybody in one group until a plan splits it; later joiners
    // go to the smallest group until the next window re-plans.
    const std::uint32_t slots = adaptive_ && adaptive_->oneGroup() ? 1 : cfg_.groupCount();
    w.group = policy_->groupFor(registry_, slots);
    if (groupFailed(w.group)) {
      auto live = liveGroupFor();
      if (!live) {
        --next_id_;
        return refuse(from, unavailable("every group PS has failed; retry"));
      }
      w.group = *live;
    }
    w.shard = next_shard_++ % cfg_.workers;
    if (adaptive_) adaptive_->membershipChanged("worker " + std::to_string(w.id) + " joined");
  }
  WorkerRecord& rec = registry_.add(w);
  if (rec.role == WorkerRole::kTrainer) {
    // Answered once its group PS expects it (its pushes are refused before that).
    admitting_.insert(rec.id);
    auto to = std::make_shared<zmq::message_t>(from.data(), from.size());
    return configureGroup(rec.group, false, [this, to, id = rec.id, g = rec.group](const Status& s) {
      admitTrainer(to, id, g, s);
    });
  }
  GSGD_INFO("registered " << workerRoleName(rec.role) << " " << rec.id << " (" << rec.host
                          << " pid " << rec.pid << ")");
  if (rec.role == WorkerRole::kEvaluator) evaluatorJoined(rec);
  sendAssignment(from, rec);
}

void Coordinator::admitTrainer(const std::shared_ptr<zmq::message_t>& to, std::uint64_t id,
                               std::uint32_t group, const Status& configured) {
  const zmq::message_t& from = *to;
  WorkerRecord* rec = registry_.find(id);
  if (rec != nullptr && rec->state == WorkerState::kActive && rec->group != group &&
      !groupFailed(rec->group)) {
    // Moved meanwhile (its group failed, or a regroup): it waits for its new group.
    auto retry = [this, to, id, g = rec->group](const Status& s) { admitTrainer(to, id, g, s); };
    if (configured) return configs_->whenSettled(rec->group, std::move(retry));
    return configureGroup(rec->group, false, std::move(retry));
  }
  admitting_.erase(id);
  if (rec == nullptr || rec->state != WorkerState::kActive) {
    return refuse(from, unavailable("worker " + std::to_string(id) + " was removed while its "
                                    "group was configured; retry"));
  }
  if (stopping_) {  // the run ended while its group was configured
    rec->state = WorkerState::kLeft;
    told_finished_.insert({rec->host, rec->pid});
    return refuse(from, finished("training is over; not accepting workers"));
  }
  if (!configured) {
    rec->state = WorkerState::kLeft;
    return refuse(from, unavailable("cannot configure the group: " + configured.message()));
  }
  rec->last_seen = Clock::now();
  if (!training_started_) training_started_ = Clock::now();
  noteReregistration();
  GSGD_INFO("registered trainer " << rec->id << " (" << rec->host << " pid " << rec->pid
                                  << ") -> group " << rec->group << ", shard " << rec->shard);
  sendAssignment(from, *rec);
}

void Coordinator::onNodeRegister(const zmq::message_t& from, const InMessage& msg,
                                 WorkerRecord& rec) {
  auto eps = msg.header().getBody().getRegister().getEndpoints();
  std::size_t taken = 0;
  for (auto ep : eps) {
    if (fleet_->allReady()) {
      // Enough group PSes already: the rest wait for a failed group to re-create.
      spares_.offer(rec.id, ep.cStr());
      continue;
    }
    fleet_->add(ep.cStr(), clientSocketOptions(keysForNode(rec)), rec.id);
    ++taken;
  }
  event("node", "node " + std::to_string(rec.id) + " (" + rec.host + ") offers " +
                    std::to_string(eps.size()) + " group PS(es), " + std::to_string(taken) +
                    " used; " + std::to_string(fleet_->ready()) + " of " +
                    std::to_string(cfg_.groupCount()) + " groups ready");
  sendAssignment(from, rec);
  // A node that comes after a failure gives the failed slots back a group PS. Their old
  // members were spread over the live groups: new trainers fill the slot (the smallest
  // group first), and in adaptive mode the next plan regroups everybody.
  for (std::uint32_t g = 0; g < fleet_->ready() && spares_.count() > 0; ++g) {
    if (groupFailed(g)) (void)recreateGroup(g, {});
  }
}

void Coordinator::sendAssignment(const zmq::message_t& to, const WorkerRecord& rec) {
  OutMessage out(cfg_.job_id, 0);
  out.header().setEpoch(rec.epoch);
  auto a = out.header().getBody().initAssignment();
  a.setWorkerId(rec.id);
  a.setGroupId(rec.group);
  a.setGroupEndpoint(fleet_->endpoint(rec.group));
  a.setCentralEndpoint(topo_.central_endpoint);
  a.setBatchSize(rec.batch_size);
  a.setExchangePeriod(rec.group < fleet_->slots() ? fleet_->period(rec.group) : cfg_.exchangePeriod());
  a.setShardIndex(rec.shard);
  a.setShardCount(cfg_.workers);
  a.setModel(cfg_.external_model ? "external" : kernels::modelKindName(cfg_.model));
  a.setParamCount(topo_.param_count);
  a.setSeed(cfg_.seed);
  a.setHeartbeatMs(cfg_.heartbeat_ms);
  a.setCompression(cfg_.compress_gradients);
  if (fleet_->node(rec.group) != 0) {
    // A node daemon with its own CURVE pair serves this group PS under its key.
    if (const WorkerRecord* node = registry_.find(fleet_->node(rec.group))) {
      a.setGroupServerKey(node->public_key);
    }
  }
  (void)replyTo(sock_, to, std::move(out));
}

void Coordinator::onHeartbeat(const zmq::message_t& from, const InMessage& msg,
                              const std::string& key) {
  auto h = msg.header();
  WorkerRecord* w = registry_.find(h.getSenderId());
  if (w != nullptr && !ownsId(from, *w, key)) return;
  if (w != nullptr && w->state == WorkerState::kQuarantined && h.getEpoch() >= w->epoch) {
    ++quarantine_refusals_;
    return refuse(from, quarantined("worker " + std::to_string(w->id) + " is quarantined"));
  }
  OutMessage out(cfg_.job_id, 0);
  auto reply = out.header().getBody().initHeartbeatReply();
  // A regrouped trainer learns its move from its old group's next answer; until then it
  // still speaks with its old epoch, and is the same trainer: not asked to register anew
  // (that would close its id and count it as a new worker).
  const bool moving =
      w != nullptr && w->moving_from.has_value() && h.getEpoch() == w->moving_epoch;
  if (w == nullptr || w->state != WorkerState::kActive || (h.getEpoch() < w->epoch && !moving)) {
    // Unknown, dead or from an old epoch: refuse the statistics, ask it to register again.
    ++stale_heartbeats_;
    reply.setReregister(!stopping_);
    reply.setStop(stopping_);
    (void)replyTo(sock_, from, std::move(out));
    return;
  }
  auto hb = h.getBody().getHeartbeat();
  w->last_seen = Clock::now();
  if (w->role == WorkerRole::kTrainer) observeSteps(*w, msg);  // before steps is updated
  w->samples_trained = hb.getSamplesTrained();
  w->steps = hb.getSteps();
  w->last_loss = hb.getLastLoss();
  w->compute_ms = hb.getComputeMs();
  w->comm_ms = hb.getCommMs();
  w->wait_ms = hb.getWaitMs();
  if (w->role == WorkerRole::kEvaluator && hb.getTestAccuracy() >= 0) {
    w->test_accuracy = hb.getTestAccuracy();
    w->evaluated_version = hb.getEvaluatedVersion();
  }
  // The evaluator is stopped last, after it has seen the final model (see finish()).
  // Evaluators and nodes stop last: after the final flush (nodes host the group PSes).
  const bool last = w->role == WorkerRole::kEvaluator || w->role == WorkerRole::kNode;
  reply.setStop((stopping_ && (!last || stop_evaluators_)) || w->draining);
  (void)replyTo(sock_, from, std::move(out));
}

void Coordinator::onLeave(const zmq::message_t& from, const InMessage& msg,
                          const std::string& key) {
  auto h = msg.header();
  WorkerRecord* w = registry_.find(h.getSenderId());
  if (w == nullptr) return refuse(from, notFound("unknown worker " + std::to_string(h.getSenderId())));
  if (!ownsId(from, *w, key)) return;
  if (h.getEpoch() >> 32 != w->epoch >> 32) {
    // The id is reused by this head incarnation; the sender's registration died with the
    // previous head.
    return refuse(from, notFound("worker " + std::to_string(h.getSenderId()) +
                                 " registered with an earlier head incarnation"));
  }
  auto l = h.getBody().getLeave();
  if (w->state == WorkerState::kDead) {
    // Declared dead, back after a partition or a freeze: it stays dead and is credited
    // with what its groups acknowledged (finish()). Its own count can be short: a push
    // whose reply the partition swallowed was counted by the group, not by the worker.
    // Kept all the same: should its group fail (now or later), that group cannot be
    // asked, its last heartbeat may be behind what the group applied before it died, and
    // this final count is the best there is (run_summary.cc).
    if (w->role == WorkerRole::kTrainer) {
      w->samples_trained = std::max(w->samples_trained, l.getSamplesTrained());
      w->samples_unconfirmed = l.getSamplesUnconfirmed();
      w->steps = std::max(w->steps, l.getSteps());
      w->reported_after_death = true;
    }
    GSGD_INFO("worker " << w->id << " (declared dead) closed its registration at "
                        << l.getSamplesTrained() << " samples; credited by its groups "
                        << "unless its group failed");
    OutMessage out(cfg_.job_id, 0);
    out.header().getBody().setAck();
    (void)replyTo(sock_, from, std::move(out));
    return;
  }
  if (w->role == WorkerRole::kTrainer) {
    w->samples_trained = l.getSamplesTrained();
    w->samples_unconfirmed = l.getSamplesUnconfirmed();
    w->steps = l.getSteps();
  }
  const bool was_active = w->state == WorkerState::kActive;
  if (w->state != WorkerState::kQuarantined) w->state = WorkerState::kLeft;
  GSGD_INFO(workerRoleName(w->role) << " " << w->id << " left after " << w->steps << " steps, "
                                    << w->samples_trained << " samples");
  if (was_active && w->role == WorkerRole::kEvaluator && !stopping_) evaluatorLost(*w, "left");
  OutMessage out(cfg_.job_id, 0);
  out.header().getBody().setAck();
  (void)replyTo(sock_, from, std::move(out));
  // A node daemon stopped mid-run (SIGTERM, or its multi-job daemon took its slots back)
  // takes its group PSes with it: their groups fail over as for a dead node.
  if (was_active && w->role == WorkerRole::kNode && !stopping_) failNode(*w, "left");
  if (was_active && w->role == WorkerRole::kTrainer) {
    if (adaptive_) {
      adaptive_->forget(w->id);
      adaptive_->membershipChanged("worker " + std::to_string(w->id) + " left");
    }
    configureGroup(w->group);
  }
}

std::chrono::milliseconds Coordinator::livenessLimit() const {
  return std::chrono::milliseconds(
      std::max<std::uint64_t>(static_cast<std::uint64_t>(cfg_.heartbeat_ms) * cfg_.heartbeat_misses,
                              cfg_.step_deadline_ms + 2ull * cfg_.heartbeat_ms));
}

void Coordinator::checkLiveness() {
  // Once stopping, a silent trainer may only be stalled (a loaded machine): finish() waits
  // for each to hear "stop" until its deadline and only then declares the rest dead.
  if (stopping_) return;
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
    if (admitting_.count(id) != 0) continue;  // its registration is not answered yet
    WorkerRecord* rec = registry_.find(id);
    rec->state = WorkerState::kDead;
    GSGD_WARN(workerRoleName(rec->role) << " " << id << " missed its heartbeats: declared dead");
    if (rec->role == WorkerRole::kNode) failNode(*rec);
    if (rec->role == WorkerRole::kEvaluator && !stopping_) {
      evaluatorLost(*rec, "missed its heartbeats: declared dead");
    }
    if (rec->role == WorkerRole::kTrainer) {
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
    if (w.role != WorkerRole::kEvaluator || w.test_accuracy < 0) continue;
    if (best.value < 0 || w.evaluated_version > best.version) {
      best.value = w.test_accuracy;
      best.version = w.evaluated_version;
    }
  }
  return best;
}

std::optional<std::string> Coordinator::stopReason() {
  if (!training_started_) return std::nullopt;
  const double elapsed = secondsSince(*training_started_);
  if (cfg_.target_acc > 0) {
    if (const Accuracy acc = latestAccuracy(); acc.value >= cfg_.target_acc) {
      time_to_target_s_ = elapsed;
      acc_at_target_ = acc.value;
      return "target accuracy reached";
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
    if (w.role == WorkerRole::kTrainer && w.state == WorkerState::kActive && w.group < used.size()) {
      used[w.group] = true;
    }
  }
  return static_cast<std::size_t>(std::count(used.begin(), used.end(), true));
}

void Coordinator::printProgress() {
  if (!training_started_) return;
  double loss = 0;
  std::uint64_t steps = 0;
  std::size_t n = 0;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role != WorkerRole::kTrainer || w.state != WorkerState::kActive || w.steps == 0) continue;
    loss += w.last_loss;
    steps = std::max(steps, w.steps);
    ++n;
  }
  const double acc = latestAccuracy().value;
  std::string stage =
      adaptive_ ? std::string("  stage ") + policy::stageName(adaptive_->stage()) : std::string();
  // The jobs of a --serve daemon share its standard output: each line names its job.
  if (suspend_ != nullptr) stage += "  job " + cfg_.job_name;
  const std::string acc_text = (acc < 0 ? std::string("  -   ") : std::to_string(acc).substr(0, 6)) +
                               evaluators_.progressNote(secondsSince(started_));
  std::printf("[%7.1fs] step %6llu  loss %.4f  test_acc %s  groups %zu  workers %zu  samples %llu%s\n",
              secondsSince(*training_started_), static_cast<unsigned long long>(steps),
              n ? loss / static_cast<double>(n) : 0.0, acc_text.c_str(), groupsInUse(),
              registry_.activeTrainers(), static_cast<unsigned long long>(registry_.samplesTrained()),
              stage.c_str());
  std::fflush(stdout);
}

nlohmann::json Coordinator::finish(const std::string& reason) {
  GSGD_INFO("stopping: " << reason);
  stopping_ = true;
  const double elapsed = training_started_ ? secondsSince(*training_started_) : 0.0;
  const bool now = stop_now_ != nullptr && stop_now_->load();
  drainTrainers(now);
  FinalStats stats;
  stats.coordinator_bad_messages = bad_messages_;
  flushGroups(&stats);  // may fail a group whose node is gone (failGroupAtStop)
  stats.groups_failed = !failures_.empty();
  stats.failed_group_members = failed_group_members_;
  queryCentral(&stats);
  const Accuracy final_acc = stopEvaluators(stats.central ? stats.central->version : 0, now);
  // The accounting (run_summary.h); trainers keep the samples it credits them with.
  const RunSummary run = summarizeRun(registry_, stats);
  for (const auto& [id, samples] : run.credited) registry_.find(id)->samples_trained = samples;
  for (const auto& line : run.inconsistent_reports) GSGD_ERROR(line);
  return summaryJson(run, reason, elapsed, final_acc);
}

// Step 1: tell trainers to stop (heartbeat replies) and wait until each has left or died.
// A job stopped without --drain does not wait: its trainers learn at their next contact.
void Coordinator::drainTrainers(bool now) {
  const auto drain_deadline =
      now ? Clock::now()
          : Clock::now() + std::chrono::milliseconds(cfg_.step_deadline_ms +
                                                     4ull * cfg_.heartbeat_ms * cfg_.heartbeat_misses);
  if (control_ != nullptr) control_->setRefusing("the daemon is stopping");
  while (registry_.activeTrainers() > 0 && Clock::now() < drain_deadline) {
    serveOnce(std::chrono::milliseconds(50));
    serveControl();
  }
  calls_->finish("checkpoint");  // a checkpoint requested just before the stop
  // A node lost during the drain takes its groups with it: failed now, so nothing below
  // (configurations, the flush) waits on their silent PSes.
  awaitGroupNodes();
  for (std::uint32_t g = 0; g < fleet_->ready(); ++g) {
    if (groupFailed(g)) continue;
    if (auto gone = nodeGone(g)) failGroupAtStop(g, *gone);
  }
  // Those that did not hear "stop" in time are gone: their groups credit them (below).
  std::set<std::uint32_t> their_groups;
  for (const auto& [id, w] : registry_.all()) {
    if (w.role != WorkerRole::kTrainer || w.state != WorkerState::kActive) continue;
    registry_.find(id)->state = WorkerState::kDead;
    their_groups.insert(w.group);
    GSGD_WARN("worker " << id << " did not leave before the drain deadline: declared dead");
    event("death", "worker " + std::to_string(id) + " did not leave before the drain deadline");
  }
  // They may still be running: out of their groups before the flush, or a step of theirs
  // completing between the groups' counts and the central PS's would be applied uncounted.
  for (std::uint32_t g : their_groups) {
    if (groupFailed(g)) continue;
    configureGroup(g, false, [g](const Status& s) {
      if (!s) GSGD_WARN("could not take the remaining trainers out of group " << g << ": " << s.toString());
    });
  }
  // Every configuration on its way returns before the flush (and cannot reach a group
  // after it).
  configs_->waitIdle(kRpcTimeout + std::chrono::seconds(1));
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
    calls_->start("flush", fleet_->link(g), std::move(out), std::chrono::milliseconds(15000),
                  [this, g, stats](Result<InMessage> reply) { readFlush(g, std::move(reply), stats); });
  }
  while (calls_->inFlight("flush")) serveOnce(std::chrono::milliseconds(20));
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
  group_replays_[g] = s.getReplayedPushes();
  for (auto q : s.getQuarantined()) markQuarantined(q, g);
}

// Step 3: the central PS's counters, once every group has flushed into it (asked off the
// loop like the flushes, so heartbeats are still answered meanwhile).
void Coordinator::queryCentral(FinalStats* stats) {
  OutMessage out(cfg_.job_id, 0);
  out.header().getBody().initCentralStatsQuery();
  calls_->start("final central stats", {central_->endpoint(), central_->options()},
                std::move(out), kRpcTimeout,
                [this, stats](Result<InMessage> reply) { readCentralFinal(std::move(reply), stats); });
  while (calls_->inFlight("final central stats")) serveOnce(std::chrono::milliseconds(20));
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
  while (registry_.activeOfRole(WorkerRole::kEvaluator) > 0 &&
         latestAccuracy().version < final_version && Clock::now() < eval_deadline) {
    serveOnce(std::chrono::milliseconds(50));
  }
  const Accuracy final_acc = latestAccuracy();
  stop_evaluators_ = true;
  const auto stop_deadline =
      Clock::now() + std::chrono::milliseconds(2ull * cfg_.heartbeat_ms + 1000);
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
  std::uint64_t replays = 0;
  for (const auto& [g, n] : group_replays_) replays += n;
  nlohmann::json summary = run.toJson();
  summary.update({
      {"mode", modeName(cfg_.mode)},
      {"workers", cfg_.workers},
      {"groups", cfg_.groupCount()},
      {"exchange_period", cfg_.exchangePeriod()},
      {"stop_reason", reason},
      {"target_acc", cfg_.target_acc},
      {"reached", time_to_target_s_.has_value()},
      {"time_to_target_s", time_to_target_s_ ? nlohmann::json(*time_to_target_s_) : nlohmann::json()},
      {"acc_at_target", time_to_target_s_ ? nlohmann::json(acc_at_target_) : nlohmann::json()},
      {"elapsed_s", elapsed},
      {"final_test_acc", final_acc.value < 0 ? nlohmann::json() : nlohmann::json(final_acc.value)},
      {"final_acc_version", final_acc.version},
      {"stale_heartbeats", stale_heartbeats_},
      {"curve", curveJson()},
      {"replayed_pushes", replays},
      {"quarantined", quarantined_total_},
      {"quarantine_refusals", quarantine_refusals_},
      {"node_failures", failuresJson(run.samples_lost_in_failed_groups, run.lost_bound)},
      {"head_restart", headRestartJson()},
      {"evaluation", evaluators_.summaryJson(secondsSince(started_))},
      {"regroups", regroups_},
      {"stage", adaptive_ ? policy::stageName(adaptive_->stage()) : "none"},
      {"events", events_},
  });
  return summary;
}

void Coordinator::event(const std::string& kind, const std::string& text, double predicted_gain) {
  const double t = training_started_ ? secondsSince(*training_started_) : 0.0;
  nlohmann::json e = {{"t_s", t}, {"kind", kind}, {"text", text}};
  if (kind == "regroup") e["predicted_gain"] = predicted_gain;
  events_.push_back(e);
  GSGD_INFO(kind << ": " << text);
  if (cfg_.progress_ms > 0) {
    std::printf("[%7.1fs] %s: %s\n", t, kind.c_str(), text.c_str());
    std::fflush(stdout);
  }
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

void Coordinator::controlWindow() {
  if (stopping_) return;
  const ControlActions act = adaptive_->window(registry_, Clock::now(), registry_.samplesTrained(),
                                               cfg_.max_samples);
  for (const auto& d : act.detections) {
    event("straggler", d.text);
    events_.back().update({{"worker", d.worker}, {"onset", d.straggler}, {"step", d.step},
                           {"ratio", d.ratio}, {"steps", d.steps}, {"erratic", d.erratic},
                           {"action", d.action}});
  }
  if (act.stage_change) {
    event("stage", std::string("-> ") + policy::stageName(act.stage_change->to) + " (" +
                       act.stage_change->cause + ")");
  }
  if (act.regroup) return applyRegroup(act);
  std::vector<bool> touched(fleet_->slots(), false);
  for (std::uint32_t g = 0; g < fleet_->slots() && g < act.periods.size(); ++g) {
    if (fleet_->period(g) != act.periods[g]) {
      fleet_->setPeriod(g, act.periods[g]);
      touched[g] = true;
    }
  }
  for (const auto& [id, batch] : act.rebatch) {
    WorkerRecord* w = registry_.find(id);
    if (w == nullptr || w->batch_size == batch) continue;
    w->batch_size = batch;
    touched[w->group] = true;
  }
  for (std::uint32_t g = 0; g < touched.size(); ++g) {
    if (touched[g]) configureGroup(g);
  }
}

void Coordinator::applyRegroup(const ControlActions& act) {
  // 1. Record where everybody goes; a worker that changes group gets a new epoch and
  //    stays listed (leaving) in its old group until it has been told.
  std::vector<bool> gains(fleet_->slots(), false), affected(fleet_->slots(), false);
  std::size_t moved = 0;
  for (const auto& [id, place] : act.placement) {
    WorkerRecord* w = registry_.find(id);
    if (w == nullptr || w->state != WorkerState::kActive || groupFailed(place.slot)) continue;
    w->batch_size = place.batch;
    affected[place.slot] = true;
    if (w->group != place.slot) {
      affected[w->group] = true;
      gains[place.slot] = true;
      w->moving_from = w->group;
      w->moving_epoch = w->epoch;
      w->group = place.slot;
      w->epoch = ++epoch_;
      ++moved;
    }
  }
  for (std::uint32_t g = 0; g < fleet_->slots() && g < act.periods.size(); ++g) {
    if (fleet_->period(g) != act.periods[g]) affected[g] = true;
    fleet_->setPeriod(g, act.periods[g]);
  }
  ++regroups_;
  std::ostringstream os;
  os << act.regroup->plan.describe() << "; " << moved << " worker(s) move; cause: "
     << act.regroup->cause << "; predicted gain "
     << static_cast<int>(act.regroup->predicted_gain * 100) << "%";
  event("regroup", os.str(), act.regroup->predicted_gain);
  // 2. Groups that receive workers learn about them first (so a moved worker is
  //    expected when it arrives), then the others, after them; every affected group
  //    flushes its delta to the central PS so the new grouping starts from the central
  //    model.
  std::vector<std::uint32_t> gaining;
  for (std::uint32_t g = 0; g < affected.size(); ++g) {
    if (affected[g] && gains[g]) gaining.push_back(g);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t g = 0; g < affected.size(); ++g) {
      if (!affected[g] || gains[g] != (pass == 0)) continue;
      configureGroup(g, /*flush=*/true, [g](const Status& s) {
        if (!s) GSGD_WARN("could not reconfigure group " << g << ": " << s.toString());
      }, pass == 0 ? std::vector<std::uint32_t>{} : gaining);
    }
  }
}

}  // namespace groupsgd::coordinator
