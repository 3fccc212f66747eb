#include "groupsgd/groupps/group_server.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/allow_list.h"
#include "groupsgd/common/deadline.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::groupps {

Result<std::unique_ptr<GroupServer>> GroupServer::create(zmq::context_t& ctx, GroupServerConfig cfg,
                                                         std::size_t param_count,
                                                         const std::string& bind_endpoint) {
  if (param_count == 0) return invalidArgument("a group PS needs a model with parameters");
  if (cfg.central_endpoint.empty()) return invalidArgument("a group PS needs the central endpoint");
  if (isCentralShardMap(cfg.central_endpoint)) {
    auto shards = parseCentralShards(cfg.central_endpoint, param_count);
    if (!shards) return shards.status();
    if (shards->size() > kMaxCentralShards) {
      return invalidArgument("more than " + std::to_string(kMaxCentralShards) + " central shards");
    }
    if (cfg.delta_compression.encoding != kernels::Encoding::kDense) {
      return invalidArgument("a sharded central PS takes dense deltas (compress_deltas none)");
    }
  }
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(cfg.curve));
  if (!sock) return sock.status();
  auto ep = bindSocket(*sock, bind_endpoint);
  if (!ep) return ep.status();
  return std::unique_ptr<GroupServer>(
      new GroupServer(ctx, std::move(*sock), *ep, std::move(cfg), param_count));
}

GroupServer::GroupServer(zmq::context_t& ctx, zmq::socket_t router, std::string endpoint,
                         GroupServerConfig cfg, std::size_t param_count)
    : ctx_(ctx),
      router_(std::move(router)),
      endpoint_(std::move(endpoint)),
      cfg_(std::move(cfg)),
      barrier_(param_count),
      quarantine_(cfg_.quarantine_after, std::chrono::milliseconds(cfg_.quarantine_window_ms)),
      replica_(std::make_shared<std::vector<float>>(param_count)) {
  exchange_.base.resize(param_count);
  if (cfg_.delta_compression.encoding != kernels::Encoding::kDense) {
    exchange_.compressor.emplace(cfg_.delta_compression.encoding, param_count,
                                 cfg_.delta_compression.ratio);
  }
  const bool parted = cfg_.part_bytes > 0 && param_count * sizeof(float) > cfg_.part_bytes;
  part_elements_ = parted ? partElementsFor(param_count, cfg_.part_bytes) : param_count;
  for (std::size_t off = 0; off < param_count; off += part_elements_) {
    const std::size_t n = std::min<std::size_t>(part_elements_, param_count - off);
    optimizers_.emplace_back(cfg_.optimizer, n, kernels::clipRanges(cfg_.no_decay, off, n));
  }
  counters_.learning_rate = cfg_.optimizer.lr;
  if (isCentralShardMap(cfg_.central_endpoint)) {
    auto shards = parseCentralShards(cfg_.central_endpoint, param_count);  // checked in create
    for (auto& where : *shards) shards_.emplace_back().where = std::move(where);
  }
}

void GroupServer::run(const std::atomic<bool>& stop) {
  log::setThreadTag("group-" + std::to_string(cfg_.group_id));
  GSGD_INFO("group PS " << cfg_.group_id << " serving on " << endpoint_);
  requestModel();
  while (!stop.load()) {
    auto timeout = std::chrono::milliseconds(100);
    if (step_opened_) {
      timeout = std::min(timeLeft(stepDeadline()), timeout);
    }
    // The router, then the central PS's socket or (sharded) each shard's.
    std::array<zmq::pollitem_t, 1 + kMaxCentralShards> items{};
    items[0] = {router_.handle(), 0, ZMQ_POLLIN, 0};
    items[1] = {central_ ? central_->handle() : nullptr, 0, ZMQ_POLLIN, 0};
    std::size_t polled = central_ ? 2 : 1;
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      items[1 + k] = {shards_[k].sock ? shards_[k].sock->handle() : nullptr, 0, ZMQ_POLLIN, 0};
      polled = 1 + shards_.size();
    }
    try {
      zmq::poll(items.data(), polled, timeout);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      GSGD_ERROR("poll failed: " << e.what());
      break;
    }
    try {
      if (items[0].revents & ZMQ_POLLIN) {
        auto routed = recvRouted(router_);
        if (!routed) {
          ++counters_.bad_messages;
        } else {
          try {
            handleRouter(routed->routing_id, std::move(routed->frames));
          } catch (const std::exception& e) {  // never leave a sender without an answer
            refuse(routed->routing_id, internalError(std::string("request failed: ") + e.what()));
          }
        }
      }
      if (central_ && (items[1].revents & ZMQ_POLLIN)) {
        auto frames = recvFrames(*central_);
        if (frames) handleCentral(std::move(*frames));
      }
      for (std::size_t k = 0; k < shards_.size(); ++k) {
        if (!shards_[k].sock || !(items[1 + k].revents & ZMQ_POLLIN)) continue;
        auto frames = recvFrames(*shards_[k].sock);
        if (frames) handleShard(k, std::move(*frames));
      }
      if (step_opened_ && Clock::now() >= stepDeadline()) maybeCloseStep(true);
      checkExchangeTimeout();
      if (exchange_.in_flight == CentralRequest::kNone && !have_model_) requestModel();
    } catch (const std::exception& e) {  // a bug or a library throw: log, keep serving
      GSGD_ERROR("request failed: " << e.what());
    }
  }
  GSGD_INFO("group PS " << cfg_.group_id << " stopped at step " << step_);
}

void GroupServer::refuse(const zmq::message_t& from, const Status& why) {
  // "No model yet" is a retry hint during start-up, not a bad message.
  if (why.code() != Code::kUnavailable) {
    ++counters_.bad_messages;
    GSGD_WARN("refused: " << why.toString());
  }
  (void)replyTo(router_, from, makeErrorReply(cfg_.limits.job_id, cfg_.group_id, why));
}

void GroupServer::refuseBadUpdate(const zmq::message_t& from, std::uint64_t worker,
                                  const Status& why) {
  refuse(from, why);
  if (barrier_.member(worker) == nullptr || !quarantine_.recordBad(worker, Clock::now())) return;
  // A repeat offender: out of the barrier (the group stops waiting for it) and refused
  // from now on; the coordinator learns it from GroupStats.
  barrier_.remove(worker);
  if (inbound_.pushes.count(worker) != 0) abortInbound(worker);
  releaseGrant(worker);
  GSGD_WARN("worker " << worker << " quarantined after " << cfg_.quarantine_after
                      << " bad updates within " << cfg_.quarantine_window_ms
                      << " ms (last: " << why.message() << ")");
  maybeCloseStep(false);
}

void GroupServer::handleRouter(const zmq::message_t& from, std::vector<zmq::message_t>&& frames) {
  const std::string key = frames.empty() ? std::string() : peerKey(frames.front());
  if (Status allowed = checkPeerAllowed(cfg_.curve.allowed, key); !allowed) {
    return refuse(from, allowed);
  }
  auto msg = decodeMessage(std::move(frames), cfg_.limits);
  if (!msg) return refuse(from, msg.status());
  if (!mayActAs(from, key, *msg)) return;
  if (msg->part()) {
    if (msg->kind() == BodyKind::PUSH) return onPushPart(from, std::move(*msg));
    return refuse(from, invalidArgument(std::string("'") + bodyKindName(msg->kind()) +
                                        "' is not sent in parts"));
  }
  switch (msg->kind()) {
    case BodyKind::PULL:
      return onPull(from, *msg);
    case BodyKind::PUSH:
      return onPush(from, *msg);
    case BodyKind::GROUP_CONFIG:
      return onGroupConfig(from, *msg);
    case BodyKind::FLUSH:
      return onFlush(from);
    case BodyKind::GROUP_STATS_QUERY:
      return sendStats(from);
    default:
      return refuse(from, invalidArgument(std::string("a group PS does not serve '") +
                                          bodyKindName(msg->kind()) + "'"));
  }
}

bool GroupServer::mayActAs(const zmq::message_t& from, const std::string& key,
                           const InMessage& msg) {
  if (key.empty()) return true;
  const BodyKind kind = msg.kind();
  std::string why;
  if (kind == BodyKind::PULL || kind == BodyKind::PUSH) {
    const std::uint64_t worker = msg.header().getSenderId();
    auto it = member_keys_.find(worker);
    if (it != member_keys_.end() && it->second != key) {
      why = "worker " + std::to_string(worker) + " is bound to another key";
    }
  } else if (!cfg_.curve.hasDaemonRights(key)) {
    why = std::string("only the coordinator may send '") + bodyKindName(kind) + "'";
  }
  if (why.empty()) return true;
  ++counters_.identity_refused;
  GSGD_WARN("identity refused (key " << key << "): " << why);
  (void)replyTo(router_, from,
                makeErrorReply(cfg_.limits.job_id, cfg_.group_id, permissionDenied(why)));
  return false;
}

namespace {

proto::Directive toProto(Leaving l) {
  switch (l) {
    case Leaving::kNo:
      return proto::Directive::CONTINUE;
    case Leaving::kReassign:
      return proto::Directive::REASSIGN;
    case Leaving::kStop:
      return proto::Directive::STOP;
  }
  return proto::Directive::CONTINUE;
}

Leaving fromProto(proto::Directive d) {
  switch (d) {
    case proto::Directive::REASSIGN:
      return Leaving::kReassign;
    case proto::Directive::STOP:
      return Leaving::kStop;
    default:
      return Leaving::kNo;
  }
}

}  // namespace

OutMessage GroupServer::stepReplyMessage(std::uint64_t worker, bool accepted,
                                         const std::string& reason, double wait_ms) {
  // The replica itself, shared by all replies until it next changes: no copy.
  if (!replica_payload_) replica_payload_ = replica_;
  OutMessage out = stepReplyHeader(worker, accepted, reason, wait_ms);
  out.addTensor(replica_payload_);
  return out;
}

OutMessage GroupServer::stepReplyHeader(std::uint64_t worker, bool accepted,
                                        const std::string& reason, double wait_ms) {
  OutMessage out(cfg_.limits.job_id, cfg_.group_id);
  out.header().setStep(step_);
  out.header().setEpoch(epoch_);
  out.header().setModelVersion(exchange_.base_version);
  auto r = out.header().getBody().initStepReply();
  r.setAccepted(accepted);
  r.setReason(reason);
  r.setWaitMs(static_cast<float>(wait_ms));
  if (const MemberInfo* m = barrier_.member(worker)) {
    r.setBatchSize(m->batch_size);
    r.setDirective(toProto(m->leaving));
  } else if (auto it = departed_.find(worker); it != departed_.end()) {
    r.setDirective(toProto(it->second));
  }
  return out;
}

void GroupServer::sendStepReply(const zmq::message_t& to, std::uint64_t worker, bool accepted,
                                const std::string& reason, double wait_ms) {
  Status s = replyInParts(router_, to, stepReplyMessage(worker, accepted, reason, wait_ms),
                          cfg_.part_bytes);
  if (!s) GSGD_WARN("could not answer a member: " << s.toString());
}

std::vector<float>& GroupServer::writableReplica() {
  replica_payload_.reset();  // it is about to change
  if (replica_.use_count() > 1) {
    // A reply still being sent holds it: write into another buffer, the spare when no
    // reply holds that one either.
    if (!spare_ || spare_.use_count() > 1) {
      spare_ = std::make_shared<std::vector<float>>(replica_->size());
    }
    kernels::copy(*replica_, *spare_);
    std::swap(replica_, spare_);
  }
  // Pairs with the release in the I/O thread's final reference drop (as PayloadPool).
  std::atomic_thread_fence(std::memory_order_acquire);
  return *replica_;
}

void GroupServer::answerDeparted(const zmq::message_t& from, std::uint64_t worker,
                                 Leaving directive, std::uint32_t dropped_batch) {
  if (dropped_batch > 0) {
    counters_.samples_dropped += dropped_batch;  // acknowledged, so counted, never lost
    acknowledged_[worker] += dropped_batch;
    ++counters_.late_gradients;
  }
  departed_[worker] = directive;
  sendStepReply(from, worker, false,
                directive == Leaving::kStop ? "drained: leave" : "moved to another group");
}

void GroupServer::retireIfLeaving(std::uint64_t worker) {
  const MemberInfo* m = barrier_.member(worker);
  if (m == nullptr || m->leaving == Leaving::kNo) return;
  departed_[worker] = m->leaving;
  barrier_.remove(worker);
  releaseGrant(worker);
  GSGD_INFO("member " << worker << " finished its last step here ("
                      << (departed_[worker] == Leaving::kStop ? "drained" : "moved") << ")");
}

void GroupServer::onPull(const zmq::message_t& from, const InMessage& msg) {
  const std::uint64_t worker = msg.header().getSenderId();
  if (quarantine_.isQuarantined(worker)) {
    ++counters_.quarantine_refusals;
    return refuse(from, quarantined("worker " + std::to_string(worker) + " is quarantined"));
  }
  const MemberInfo* m = barrier_.member(worker);
  if (m == nullptr) {
    if (auto it = departed_.find(worker); it != departed_.end() && have_model_) {
      return answerDeparted(from, worker, it->second, 0);
    }
    return refuse(
        from, permissionDenied("worker " + std::to_string(worker) + " is not a member of group " +
                               std::to_string(cfg_.group_id)));
  }
  if (msg.header().getEpoch() < m->epoch) {
    return refuse(from, failedPrecondition("epoch " + std::to_string(msg.header().getEpoch()) +
                                           " is older than the assignment's " +
                                           std::to_string(m->epoch) + "; register again"));
  }
  if (!have_model_) return refuse(from, unavailable("group has no model yet; retry"));
  if (workersPlacement()) {
    // Optimizers on the workers: it needs the members' parameters as they are now, and
    // everybody restarts its optimizer state with it (docs/protocol.md).
    if (!replicaCurrent()) return holdForParameters(from, worker, "");
    workers_.reset_optimizer = true;
  }
  barrier_.markActive(worker);
  sendStepReply(from, worker, true, "");
}

GroupServer::PushCheck GroupServer::validatePush(const zmq::message_t& from, const InMessage& msg,
                                                 std::uint64_t elements) {
  if (!admitPusher(from, msg, elements)) return PushCheck::kAnswered;
  const std::uint64_t worker = msg.header().getSenderId();
  if (Status bad = checkPushShape(msg, elements); !bad) {
    refuseBadUpdate(from, worker, bad);
    return PushCheck::kAnswered;
  }
  if (Status bad = checkBufferCount(msg, elements); !bad) {
    refuseBadUpdate(from, worker, bad);
    return PushCheck::kAnswered;
  }
  if (!buffer_count_) buffer_count_ = msg.header().getBody().getPush().getBufferCount();
  return placePush(from, worker, msg.header().getStep());
}

bool GroupServer::admitPusher(const zmq::message_t& from, const InMessage& msg,
                              std::uint64_t elements) {
  auto h = msg.header();
  auto push = h.getBody().getPush();
  const std::uint64_t worker = h.getSenderId();
  if (quarantine_.isQuarantined(worker)) {
    ++counters_.quarantine_refusals;
    refuse(from, quarantined("worker " + std::to_string(worker) +
                             " is quarantined for repeated bad updates"));
    return false;
  }
  const MemberInfo* m = barrier_.member(worker);
  const auto departed = departed_.find(worker);
  if (m == nullptr && departed != departed_.end() && have_model_ && push.getBatchSize() > 0 &&
      msg.tensorCount() >= 1 && elements == replica().size()) {
    // It left (moved or drained) before this gradient arrived: drop it, count it, and
    // tell the worker where it stands.
    answerDeparted(from, worker, departed->second, push.getBatchSize());
    return false;
  }
  Status allowed;
  if (m == nullptr) {
    allowed = permissionDenied("worker " + std::to_string(worker) + " is not a member of group " +
                               std::to_string(cfg_.group_id));
  } else if (h.getEpoch() < m->epoch) {
    allowed = failedPrecondition("push from epoch " + std::to_string(h.getEpoch()) +
                                 ", assignment is epoch " + std::to_string(m->epoch) +
                                 "; register again");
  } else if (!have_model_) {
    allowed = unavailable("group has no model yet; retry");
  }
  if (!allowed) refuse(from, allowed);
  return allowed.isOk();
}

Status GroupServer::checkPushShape(const InMessage& msg, std::uint64_t elements) const {
  if (msg.tensorCount() == 2 && workersPlacement()) {
    GSGD_RETURN_IF_ERROR(checkAttachedParameters(msg));
  } else if (msg.tensorCount() != 1) {
    return invalidArgument(workersPlacement()
                               ? "a push carries a gradient tensor and, asked, the parameters"
                               : "a push carries one gradient tensor");
  }
  if (elements != replica().size()) {
    return invalidArgument("tensor has " + std::to_string(elements) + " elements, expected " +
                           std::to_string(replica().size()));
  }
  auto push = msg.header().getBody().getPush();
  // A skipped step (the member's gradient was not finite) has no samples; any other
  // empty batch is a bad update.
  if (push.getSkipped() != (push.getBatchSize() == 0)) {
    return invalidArgument(push.getSkipped() ? "a skipped step's push with a batch"
                                             : "push of an empty batch");
  }
  return Status::ok();
}

GroupServer::PushCheck GroupServer::placePush(const zmq::message_t& from, std::uint64_t worker,
                                              std::uint64_t step) {
  // Replays: a step this worker's gradient is already in (or the open step again).
  const auto last = last_step_.find(worker);
  if ((last != last_step_.end() && step <= last->second) ||
      (step == step_ && barrier_.hasArrived(worker))) {
    ++counters_.replayed_pushes;
    refuse(from,
           failedPrecondition("replayed push for step " + std::to_string(step) + ": worker " +
                              std::to_string(worker) + " already pushed for it; group at step " +
                              std::to_string(step_)));
    return PushCheck::kAnswered;
  }
  if (step > step_) {
    refuse(from, invalidArgument("push for step " + std::to_string(step) +
                                 ", the group is at step " + std::to_string(step_)));
    return PushCheck::kAnswered;
  }
  return step < step_ ? PushCheck::kLate : PushCheck::kOpenStep;
}

void GroupServer::answerLate(const zmq::message_t& from, std::uint64_t worker, std::uint64_t step,
                             std::uint32_t batch) {
  // The step closed without it (deadline or cutoff): drop the gradient, count it, and
  // hand the member a replica to go on from.
  ++counters_.late_gradients;
  counters_.samples_dropped += batch;
  acknowledged_[worker] += batch;
  last_step_[worker] = step;
  std::string reason = "late: step " + std::to_string(step) + " closed; group at step ";
  if (workersPlacement()) {
    // Late by one step: it takes that step as the others did. Further behind: it takes
    // the members' parameters, as a joiner.
    if (step + 1 == step_ && workers_.mean) return answerLateWithLastMean(from, worker, reason);
    holdForParameters(from, worker, std::move(reason));
    return maybeCloseStep(false);
  }
  if (barrier_.arrivals() > 0) {
    // The others are half way through the open step: answered at its close with them,
    // so it starts the next step in step with the group instead of trailing it forever.
    waiting_.push_back(
        {zmq::message_t(from.data(), from.size()), worker, Clock::now(), std::move(reason)});
    return;
  }
  barrier_.markActive(worker);
  sendStepReply(from, worker, false, reason + std::to_string(step_));
  retireIfLeaving(worker);
  maybeCloseStep(false);
}

void GroupServer::onPush(const zmq::message_t& from, const InMessage& msg) {
  auto h = msg.header();
  auto push = h.getBody().getPush();
  const std::uint64_t worker = h.getSenderId();
  const PushCheck check =
      validatePush(from, msg, msg.tensorCount() >= 1 ? msg.tensorElements(0) : 0);
  if (check == PushCheck::kAnswered) return;
  releaseGrant(worker);  // room granted for a push in parts that came whole instead
  // Checked and accumulated in place in the received frames: no copy of the gradient.
  auto grad = msg.viewTensor(0, replica().size(), decodePayload);
  if (!grad) return refuseBadUpdate(from, worker, grad.status());
  const double squares = sumSquares(*grad);  // one pass for both checks
  if (!std::isfinite(squares)) {
    return refuseBadUpdate(from, worker,
                           invalidArgument(std::to_string(countNonFinite(*grad)) +
                                           " non-finite values in the gradient"));
  }
  // Buffer values (batch-norm statistics) are not a gradient: not bounded.
  if (const double norm = std::sqrt(std::max(0.0, squares - bufferSquares(*grad)));
      norm > cfg_.max_grad_norm) {
    return refuseBadUpdate(
        from, worker,
        invalidArgument("gradient norm " + std::to_string(norm) + " over the bound " +
                        std::to_string(cfg_.max_grad_norm)));
  }
  if (check == PushCheck::kLate) return answerLate(from, worker, h.getStep(), push.getBatchSize());
  if (msg.tensorCount() == 2) takeAttachedParameters(worker, msg);
  Status added = push.getSkipped()
                     ? barrier_.skip(worker)
                     : barrier_.add(worker, push.getBatchSize(), push.getLoss(), *grad);
  if (!added) return refuse(from, added);
  last_step_[worker] = h.getStep();
  acknowledged_[worker] += push.getBatchSize();
  if (!step_opened_) step_opened_ = Clock::now();
  waiting_.push_back({zmq::message_t(from.data(), from.size()), worker, Clock::now()});
  noteArrival();
  maybeCloseStep(false);
}

GroupServer::Clock::time_point GroupServer::fixedDeadline() const {
  return *step_opened_ + std::chrono::milliseconds(cfg_.step_deadline_ms);
}

GroupServer::Clock::time_point GroupServer::stepDeadline() const {
  const auto fixed = fixedDeadline();
  const auto cut = cutoff_.deadline();
  return cut && *cut < fixed ? *cut : fixed;
}

void GroupServer::noteArrival() {
  cutoff_.pushArrived(barrier_.arrivals(), barrier_.memberCount(), Clock::now());
}

void GroupServer::excuseMissing(Clock::time_point closed_at) {
  const auto missing = barrier_.missing();
  if (missing.empty()) return;
  for (auto id : missing) barrier_.excuse(id);
  const auto allowed = cutoff_.allowance();
  if (allowed && step_opened_ && closed_at < fixedDeadline()) {
    ++counters_.steps_cut;
    const double allowed_ms = std::chrono::duration<double, std::milli>(*allowed).count();
    GSGD_DEBUG("step " << step_ << " cut " << allowed_ms << " ms after its release without "
                       << missing.size() << " member(s)");
  } else {
    GSGD_INFO("step " << step_ << " closed at its deadline without " << missing.size()
                      << " member(s)");
  }
}

void GroupServer::maybeCloseStep(bool deadline_passed) {
  if (barrier_.arrivals() == 0) {
    // Nothing whole yet: a push still arriving in parts keeps the step open (a member
    // that died half way is removed by the coordinator's next configuration).
    if (deadline_passed) admitStalledPushes();
    return;
  }
  if (!barrier_.complete() && !deadline_passed) return;
  excuseMissing(Clock::now());
  dropUnfinishedPushes();
  std::span<float> sum;
  float scale = 1.0f;
  const auto closed = barrier_.closeUnscaled(&sum, &scale);
  if (workersPlacement()) {
    // The members step their own optimizers with the mean: the replica stays as it is.
    // Every member skipped (no samples): a zero mean, the same step for every member.
    computeMeanGradient(sum, closed.samples > 0 ? scale : 0.0f);
    finishReplies(stepReplies(advanceStep(closed)));
    afterWorkersStep();
  } else {
    std::vector<float>& replica = writableReplica();
    const Clock::time_point released = advanceStep(closed);
    std::vector<OutMessage> replies = stepReplies(released);
    applySchedule();
    // Every member skipped (no samples): the replica stays as it is, no optimizer step.
    if (closed.samples == 0) {
      GSGD_DEBUG("step " << step_ - 1 << " closed with every member skipping");
    }
    stepReplicaAndSend(replica, sum, scale, replies, closed.samples > 0);
    finishReplies(std::move(replies));
  }
  maybeExchange(false);
  barrier_.clearAfterClose();  // off the members' path: their replies are on the wire
  admitWaiting();
}

void GroupServer::admitStalledPushes() {
  // Past the deadline every waiting push is admitted, so one member stalled half way
  // through its push cannot hold the others back (the memory budget yields to progress).
  step_opened_.reset();
  admitWaiting(true);
  if (!inbound_.pushes.empty()) step_opened_ = Clock::now();
}

GroupServer::Clock::time_point GroupServer::advanceStep(const StepBarrier::Closed& closed) {
  ++step_;
  ++exchange_.steps_since_cut;
  step_opened_.reset();
  counters_.samples_received += closed.samples;
  counters_.samples_pending += closed.samples;
  counters_.last_loss = closed.mean_loss;
  const auto released = Clock::now();
  cutoff_.stepReleased(released);
  return released;
}

std::vector<OutMessage> GroupServer::stepReplies(Clock::time_point released) {
  std::vector<OutMessage> replies;
  replies.reserve(waiting_.size());
  for (const auto& w : waiting_) {
    const double wait_ms = std::chrono::duration<double, std::milli>(released - w.arrived).count();
    const bool late = !w.late_reason.empty();
    if (late) barrier_.markActive(w.worker);  // waited for again from this step on
    replies.push_back(
        workersPlacement() && !late
            ? meanGradientReply(w.worker, wait_ms)
            : stepReplyMessage(w.worker, !late,
                               late ? w.late_reason + std::to_string(step_) : std::string(),
                               wait_ms));
    grantNextPush(w.worker, &replies.back());
  }
  return replies;
}

void GroupServer::stepReplicaAndSend(std::vector<float>& replica, std::span<float> sum, float scale,
                                     std::vector<OutMessage>& replies, bool apply) {
  // Part by part: step the optimizer with the mean (the sum times `scale`, taken inside
  // the optimizer's pass), and (a replica in parts) send the part to every member before
  // computing the next, so the replies are on the wire while the rest is computed. The
  // parts sent are final: later parts write elsewhere.
  const bool in_parts = optimizers_.size() > 1;
  for (std::size_t i = 0; i < optimizers_.size(); ++i) {
    const std::size_t off = i * part_elements_;
    const std::size_t n = std::min<std::size_t>(part_elements_, replica.size() - off);
    if (apply) {
      optimizers_[i].step(std::span<float>(replica).subspan(off, n), sum.subspan(off, n), scale);
      setBufferMean(std::span<float>(replica).subspan(off, n), sum.subspan(off, n), scale, off);
    }
    if (!in_parts) continue;
    for (std::size_t m = 0; m < replies.size(); ++m) {
      Status s =
          sendFrames(router_, replies[m].partFrames(static_cast<std::uint32_t>(i), part_elements_),
                     &waiting_[m].routing_id);
      if (!s) GSGD_WARN("could not answer a member: " << s.toString());
    }
  }
}

std::uint64_t GroupServer::runSamples() const {
  return central_run_samples_ + counters_.samples_pending + counters_.samples_in_flight;
}

void GroupServer::applySchedule() {
  if (!schedule_) return;
  const auto lr = static_cast<float>(learningRateAt(*schedule_, runSamples()));
  for (auto& o : optimizers_) o.setLearningRate(lr);
  counters_.learning_rate = lr;
}

void GroupServer::finishReplies(std::vector<OutMessage>&& replies) {
  // Then already sent, part by part (mean gradient replies go whole).
  const bool in_parts = optimizers_.size() > 1 && !workersPlacement();
  for (std::size_t m = 0; m < replies.size(); ++m) {
    if (!in_parts) {
      Status s = sendFrames(router_, std::move(replies[m]).toFrames(), &waiting_[m].routing_id);
      if (!s) GSGD_WARN("could not answer a member: " << s.toString());
    }
    retireIfLeaving(waiting_[m].worker);
  }
  waiting_.clear();
}

void GroupServer::onGroupConfig(const zmq::message_t& from, const InMessage& msg) {
  auto h = msg.header();
  auto gc = h.getBody().getGroupConfig();
  if (cfg_.adopt_group_id && !group_id_adopted_) {
    // A node daemon's group PS learns its cluster-wide id from its first configuration.
    cfg_.group_id = gc.getGroupId();
    group_id_adopted_ = true;
    log::setThreadTag("group-" + std::to_string(cfg_.group_id));
  }
  if (gc.getGroupId() != cfg_.group_id) {
    return refuse(from,
                  invalidArgument("configuration for group " + std::to_string(gc.getGroupId()) +
                                  " sent to group " + std::to_string(cfg_.group_id)));
  }
  if (gc.getExchangePeriod() == 0) return refuse(from, invalidArgument("exchange period 0"));
  std::optional<LrSchedule> schedule;  // none sent (baseLr 0): the lr stays as it is
  if (gc.hasLrSchedule() && gc.getLrSchedule().getBaseLr() > 0) {
    schedule = fromProto(gc.getLrSchedule());
    if (const std::string problem = lrScheduleProblem(*schedule); !problem.empty()) {
      return refuse(from, invalidArgument("learning-rate schedule: " + problem));
    }
  }
  std::vector<MemberInfo> members;
  for (auto m : gc.getMembers()) {
    if (quarantine_.isQuarantined(m.getWorkerId())) continue;  // until an operator clears it
    const Leaving leaving = fromProto(m.getLeaving());
    if (leaving != Leaving::kNo && departed_.count(m.getWorkerId()) != 0) continue;  // done
    if (leaving == Leaving::kNo) departed_.erase(m.getWorkerId());
    members.push_back(
        {m.getWorkerId(), m.getBatchSize(), m.getEpoch(), leaving, m.getPublicKey().cStr()});
    if (m.getPublicKey().size() > 0) member_keys_[m.getWorkerId()] = m.getPublicKey().cStr();
  }
  barrier_.configure(members);
  abortInboundOfNonMembers();
  epoch_ = std::max(epoch_, h.getEpoch());
  cfg_.exchange_period = gc.getExchangePeriod();
  if (gc.getStepDeadlineMs() > 0) cfg_.step_deadline_ms = gc.getStepDeadlineMs();
  cutoff_.configure(
      {.factor = gc.getStepCutoff(), .late_fraction = gc.getStepCutoffLateFraction()});
  if (schedule) {
    schedule_ = schedule;
    // Reported at once, before the next step: the lr the schedule gives at the position.
    counters_.learning_rate = static_cast<float>(learningRateAt(*schedule_, runSamples()));
  }
  std::vector<std::uint64_t> ids;
  ids.reserve(members.size());
  for (const auto& m : members) ids.push_back(m.worker_id);
  cutoff_.setMembers(std::move(ids));
  GSGD_INFO("group " << cfg_.group_id << " epoch " << epoch_ << ": " << members.size()
                     << " member(s), K=" << cfg_.exchange_period);
  OutMessage ack(cfg_.limits.job_id, cfg_.group_id);
  ack.header().setEpoch(epoch_);
  ack.header().getBody().setAck();
  (void)replyTo(router_, from, std::move(ack));
  if (gc.getFlush()) maybeExchange(true);  // regroup: hand the progress to the central PS
  maybeCloseStep(false);                   // a departed member may have been the one we waited for
  if (workersPlacement()) answerHeldIfNobodyAttaches();
}

void GroupServer::onFlush(const zmq::message_t& from) {
  flush_waiters_.emplace_back(from.data(), from.size());
  maybeExchange(true);
  answerFlushWaiters();
}

void GroupServer::sendStats(const zmq::message_t& to) {
  OutMessage out(cfg_.limits.job_id, cfg_.group_id);
  out.header().setStep(step_);
  out.header().setModelVersion(exchange_.base_version);
  GroupStats s = counters_;
  s.group_id = cfg_.group_id;
  s.step = step_;
  s.members = static_cast<std::uint32_t>(barrier_.memberCount());
  s.acknowledged.insert(acknowledged_.begin(), acknowledged_.end());
  s.quarantined.assign(quarantine_.quarantined().begin(), quarantine_.quarantined().end());
  s.run_samples = runSamples();
  toProto(s, out.header().getBody().initGroupStats());
  (void)replyTo(router_, to, std::move(out));
}

void GroupServer::answerFlushWaiters() {
  if (flush_waiters_.empty()) return;
  if (exchange_.in_flight != CentralRequest::kNone || counters_.samples_pending != 0 ||
      residualLeft()) {
    return;
  }
  for (const auto& to : flush_waiters_) sendStats(to);
  flush_waiters_.clear();
}

}  // namespace groupsgd::groupps
