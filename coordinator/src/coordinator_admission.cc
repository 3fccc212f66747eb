// Admission: registrations (new workers, returning ones, node daemons), heartbeats and
// leaves, on the coordinator thread. Who may register at all is the AdmissionBook's call
// (admission_book.h); here a registration becomes a worker record, a group place and an
// assignment, answered once its group PS expects the worker.
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/coordinator/external_model.h"

namespace groupsgd::coordinator {
namespace {

WorkerRole roleOf(proto::Role r) {
  switch (r) {
    case proto::Role::TRAINER:
      return WorkerRole::kTrainer;
    case proto::Role::EVALUATOR:
      return WorkerRole::kEvaluator;
    case proto::Role::NODE:
      return WorkerRole::kNode;
    default:
      return WorkerRole::kTool;
  }
}

}  // namespace

void Coordinator::onRegister(const zmq::message_t& from, const InMessage& msg,
                             const std::string& key) {
  auto r = msg.header().getBody().getRegister();
  if (Status s = admissionCheck(r, key); !s) return refuse(from, s);
  if (r.getWorkerId() != 0) return onReturningWorker(from, msg, key);
  onNewWorker(from, msg, key);
}

Status Coordinator::admissionCheck(proto::Register::Reader r, const std::string& key) {
  if (stopping()) {
    // Remembered so that a trainer asking again while the head lingers is told `finished`.
    if (roleOf(r.getRole()) == WorkerRole::kTrainer) {
      admission_.toldFinished(r.getHost().cStr(), r.getPid());
    }
    return finished("training is over; not accepting workers");
  }
  GSGD_RETURN_IF_ERROR(admission_.checkNotQuarantined(r.getHost().cStr(), r.getPid(), key));
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
    admission_.countQuarantineRefusal();
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
  w.id = admission_.nextId();  // taken once it is accepted
  w.role = roleOf(r.getRole());
  w.host = r.getHost().cStr();
  w.pid = r.getPid();
  w.name = r.getName().cStr();
  w.public_key = key;
  w.batch_size = cfg_.batch_size;
  w.epoch = ++epoch_;
  w.last_seen = Clock::now();
  if (w.role == WorkerRole::kTrainer && !slotsReady()) {
    return refuse(from, unavailable("waiting for node daemons to offer group PSes (" +
                                    std::to_string(fleet_->ready()) + " of " +
                                    std::to_string(cfg_.groupCount()) + "); retry"));
  }
  if (w.role == WorkerRole::kNode && !key.empty() && !curve_.hasDaemonRights(key)) {
    return refuse(from, permissionDenied("key " + key +
                                         " may not register as a node daemon "
                                         "(label its allow-list line `node`)"));
  }
  if (w.role == WorkerRole::kNode) {
    admission_.takeId();
    WorkerRecord& node = registry_.add(w);
    return onNodeRegister(from, msg, node);
  }
  if (w.role == WorkerRole::kTrainer) {
    // Adaptive mode trains everybody in one group until a plan splits it; later joiners
    // go to the smallest group until the next window re-plans.
    const std::uint32_t slots = adaptive_ && adaptive_->oneGroup() ? 1 : cfg_.groupCount();
    w.group = localGroupFor(w.host, policy_->groupFor(registry_, slots), slots);
    if (groupFailed(w.group)) {
      auto live = liveGroupFor();
      if (!live) {
        return refuse(from, unavailable("every group PS has failed; retry"));
      }
      w.group = *live;
    }
    placeAsFollowed(w);  // a promoted standby: the group and batch it had (adaptive)
    w.shard = admission_.takeShard();
    if (adaptive_) adaptive_->membershipChanged("worker " + std::to_string(w.id) + " joined");
  }
  admission_.takeId();
  WorkerRecord& rec = registry_.add(w);
  if (rec.role == WorkerRole::kTrainer) {
    // Answered once its group PS expects it (its pushes are refused before that).
    admission_.admitting(rec.id);
    auto to = std::make_shared<zmq::message_t>(from.data(), from.size());
    return configureGroup(
        rec.group, false,
        [this, to, id = rec.id, g = rec.group](const Status& s) { admitTrainer(to, id, g, s); });
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
  admission_.admitted(id);
  if (rec == nullptr || rec->state != WorkerState::kActive) {
    return refuse(from, unavailable("worker " + std::to_string(id) +
                                    " was removed while its "
                                    "group was configured; retry"));
  }
  if (stopping()) {  // the run ended while its group was configured
    rec->state = WorkerState::kLeft;
    admission_.toldFinished(rec->host, rec->pid);
    return refuse(from, finished("training is over; not accepting workers"));
  }
  if (!configured) {
    rec->state = WorkerState::kLeft;
    return refuse(from, unavailable("cannot configure the group: " + configured.message()));
  }
  rec->last_seen = Clock::now();
  run_log_.trainingBegins();
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
      failures_.spares().offer(rec.id, ep.cStr());
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
  for (std::uint32_t g = 0; g < fleet_->ready() && failures_.spares().count() > 0; ++g) {
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
  a.setCentralEndpoint(topo_.central_map.empty() ? topo_.central_endpoint : topo_.central_map);
  a.setBatchSize(rec.batch_size);
  a.setExchangePeriod(rec.group < fleet_->slots() ? fleet_->period(rec.group)
                                                  : cfg_.exchangePeriod());
  a.setShardIndex(rec.shard);
  a.setShardCount(cfg_.workers);
  a.setDataRanges(cfg_.data_ranges);
  a.setModel(cfg_.external_model ? "external" : kernels::modelKindName(cfg_.model));
  a.setParamCount(topo_.param_count);
  a.setSeed(cfg_.seed);
  a.setHeartbeatMs(cfg_.heartbeat_ms);
  a.setCompression(gradientCompressionFor(rec.group));
  a.setOptimizerPlacement(cfg_.optimizer_placement == groupps::OptimizerPlacement::kWorkers
                              ? proto::OptimizerPlacement::WORKERS
                              : proto::OptimizerPlacement::SERVER);
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
    admission_.countQuarantineRefusal();
    return refuse(from, quarantined("worker " + std::to_string(w->id) + " is quarantined"));
  }
  OutMessage out(cfg_.job_id, 0);
  auto reply = out.header().getBody().initHeartbeatReply();
  // A regrouped trainer learns its move from its old group's next answer; until then it
  // still speaks with its old epoch, and is the same trainer: not asked to register anew
  // (that would close its id and count it as a new worker).
  const bool moving = w != nullptr && w->moving_from.has_value() && h.getEpoch() == w->moving_epoch;
  if (w == nullptr || w->state != WorkerState::kActive || (h.getEpoch() < w->epoch && !moving)) {
    // Unknown, dead or from an old epoch: refuse the statistics, ask it to register again.
    admission_.countStaleHeartbeat();
    reply.setReregister(!stopping());
    reply.setStop(stopping());
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
  if (w->role == WorkerRole::kEvaluator && (hb.getTestAccuracy() >= 0 || hb.getTestLoss() >= 0)) {
    w->test_accuracy = hb.getTestAccuracy();
    w->test_loss = hb.getTestLoss();
    w->evaluated_version = hb.getEvaluatedVersion();
    noteEvaluation(*w);
  }
  // The evaluator is stopped last, after it has seen the final model (see finish()).
  // Evaluators and nodes stop last: after the final flush (nodes host the group PSes).
  // Nodes stop after the evaluators: they may host central shards an evaluator reads.
  const bool last = w->role == WorkerRole::kEvaluator || w->role == WorkerRole::kNode;
  const bool node_may_stop = w->role != WorkerRole::kNode ||
                             registry_.activeOfRole(WorkerRole::kEvaluator) == 0 ||
                             Clock::now() >= nodes_stop_at_;
  // The final model waits for its reading: an evaluator is asked to measure it at once,
  // and the one that brings it may stop at once.
  const bool final_reading = w->role == WorkerRole::kEvaluator && phase_ == Phase::kFinalReading &&
                             w->evaluated_version >= final_version_ &&
                             (w->test_accuracy >= 0 || w->test_loss >= 0);
  reply.setStop((stopping() && (!last || (phase_ == Phase::kStoppingEvaluators && node_may_stop) ||
                                final_reading)) ||
                w->draining);
  reply.setMeasureNow(w->role == WorkerRole::kEvaluator && phase_ == Phase::kFinalReading &&
                      !final_reading);
  if (w->role == WorkerRole::kTrainer && !moving && gradientCompressionChosenPerGroup(cfg_)) {
    reply.setCompression(gradientCompressionFor(w->group));
  }
  (void)replyTo(sock_, from, std::move(out));
}

void Coordinator::onLeave(const zmq::message_t& from, const InMessage& msg,
                          const std::string& key) {
  auto h = msg.header();
  WorkerRecord* w = registry_.find(h.getSenderId());
  if (w == nullptr)
    return refuse(from, notFound("unknown worker " + std::to_string(h.getSenderId())));
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
  if (was_active && w->role == WorkerRole::kEvaluator && !stopping()) evaluatorLost(*w, "left");
  OutMessage out(cfg_.job_id, 0);
  out.header().getBody().setAck();
  (void)replyTo(sock_, from, std::move(out));
  // A node daemon stopped mid-run (SIGTERM, or its multi-job daemon took its slots back)
  // takes its group PSes with it: their groups fail over as for a dead node.
  if (was_active && w->role == WorkerRole::kNode && !stopping()) failNode(*w, "left");
  // A trainer that stopped cleanly said what it trained (a final DataClaim) and holds
  // nothing; one that did not may have trained what it held.
  if (w->role == WorkerRole::kTrainer) releaseData(*w, "left without a final data claim");
  if (was_active && w->role == WorkerRole::kTrainer) {
    if (adaptive_) {
      adaptive_->forget(w->id);
      adaptive_->membershipChanged("worker " + std::to_string(w->id) + " left");
    }
    configureGroup(w->group);
  }
}

}  // namespace groupsgd::coordinator
