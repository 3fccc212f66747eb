#include "groupsgd/client/client.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "groupsgd/codec/parts.h"
#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/host_name.h"
#include "groupsgd/common/log.h"

namespace groupsgd::client {
namespace {

MessageLimits limitsFor(std::uint64_t job_id) {
  MessageLimits l;
  l.job_id = job_id;
  return l;
}

// leave() to a job coordinator that fell silent: long enough for the message to reach a
// coordinator that is alive but busy, short for one that is gone.
constexpr std::chrono::milliseconds kLeaveAfterFallbackTimeout{500};

}  // namespace

CoordinatorClient::CoordinatorClient(zmq::context_t& ctx, const std::string& endpoint,
                                     std::uint64_t job_id, std::chrono::milliseconds timeout,
                                     const CurveKeys& curve)
    : ctx_(ctx), curve_(curve), job_id_(job_id), timeout_(timeout) {
  auto list = EndpointList::parse(endpoint);
  endpoints_ = list ? list->all() : std::vector<std::string>{endpoint};
  rpc_ = std::make_unique<RpcClient>(ctx_, endpoints_[0], limitsFor(job_id_),
                                     clientSocketOptions(curve_));
}

Result<InMessage> CoordinatorClient::call(OutMessage&& out) {
  auto reply = rpc_->call(std::move(out), timeout_);
  const bool silent = !reply && reply.status().code() == Code::kUnavailable &&
                      reply.status().message().rfind("no answer from ", 0) == 0;
  // A job's coordinator fell silent (its daemon restarted: the job's port is new): back
  // to the daemon's front, which redirects the next registration.
  if (silent && redirected_) {
    GSGD_INFO("job coordinator " << rpc_->endpoint() << " silent; back to " << endpoints_[at_]);
    fell_back_from_ = rpc_->endpoint();
    redirected_ = false;
    rpc_ = std::make_unique<RpcClient>(ctx_, endpoints_[at_], limitsFor(job_id_),
                                       clientSocketOptions(curve_));
    return reply;
  }
  // Silence (not a refusal): the head may have moved; try the next endpoint next time.
  if (silent && endpoints_.size() > 1) {
    at_ = (at_ + 1) % endpoints_.size();
    GSGD_INFO("coordinator " << rpc_->endpoint() << " silent; trying " << endpoints_[at_]);
    rpc_ = std::make_unique<RpcClient>(ctx_, endpoints_[at_], limitsFor(job_id_),
                                       clientSocketOptions(curve_));
  }
  return reply;
}

Status CoordinatorClient::checkIncarnation(std::uint64_t epoch) {
  // Epochs carry the head's incarnation in their high 32 bits. Only a single run's head
  // list: a --serve daemon's jobs each count their own.
  if (endpoints_.size() < 2 || redirected_) return Status::ok();
  const std::uint64_t incarnation = epoch >> 32;
  if (incarnation >= newest_incarnation_) {
    newest_incarnation_ = incarnation;
    return Status::ok();
  }
  const std::string from = rpc_->endpoint();
  at_ = (at_ + 1) % endpoints_.size();
  rpc_ = std::make_unique<RpcClient>(ctx_, endpoints_[at_], limitsFor(job_id_),
                                     clientSocketOptions(curve_));
  GSGD_WARN("the head at " << from << " is of incarnation " << incarnation
                           << ", older than incarnation " << newest_incarnation_
                           << " this client followed: a superseded head, refused; trying "
                           << endpoints_[at_]);
  return unavailable("superseded head at " + from + " (incarnation " + std::to_string(incarnation) +
                     " < " + std::to_string(newest_incarnation_) + ")");
}

OutMessage CoordinatorClient::registration(Role role, const std::string& name,
                                           std::uint64_t worker_id,
                                           const std::vector<std::string>& endpoints,
                                           std::uint64_t epoch) const {
  OutMessage out(job_id_, 0);
  out.header().setEpoch(epoch);
  auto r = out.header().getBody().initRegister();
  r.setRole(role == Role::kTrainer     ? proto::Role::TRAINER
            : role == Role::kEvaluator ? proto::Role::EVALUATOR
            : role == Role::kNode      ? proto::Role::NODE
                                       : proto::Role::TOOL);
  auto eps = r.initEndpoints(static_cast<unsigned>(endpoints.size()));
  for (unsigned i = 0; i < endpoints.size(); ++i) eps.set(i, endpoints[i]);
  r.setHost(hostName());
  r.setPid(static_cast<std::uint32_t>(::getpid()));
  r.setName(name);
  r.setWorkerId(worker_id);
  r.setJob(job_);
  r.setGroupSlots(group_slots_);
  if (central_shard_.index != 0) {
    auto offer = r.initCentralShard();
    offer.setIndex(central_shard_.index);
    offer.setCount(central_shard_.count);
    offer.setBegin(central_shard_.begin);
    offer.setEnd(central_shard_.end);
    offer.setEndpoint(central_shard_.endpoint);
    offer.setModel(central_shard_.model);
    offer.setSeed(central_shard_.seed);
  }
  if (model_) {
    r.setParamCount(model_->param_count);
    r.setModelFingerprint(model_->fingerprint);
    r.setModelLayout(model_->layout);
    if (worker_id == 0 && model_->initial) out.addTensor(model_->initial);
  }
  return out;
}

Status CoordinatorClient::followRedirect(const InMessage& reply) {
  auto r = reply.header().getBody().getJobRedirect();
  if (r.getCoordinator().size() == 0) return invalidArgument("job redirect without an endpoint");
  job_id_ = r.getJobId();
  // Back at the front later (the job's coordinator silent), it registers for this job
  // again by name, and hears that the job has ended rather than being sent elsewhere.
  if (job_.empty()) job_ = r.getJob().cStr();
  GSGD_INFO("job '" << r.getJob().cStr() << "' (id " << job_id_ << ") at "
                    << r.getCoordinator().cStr());
  rpc_ = std::make_unique<RpcClient>(ctx_, r.getCoordinator().cStr(), limitsFor(job_id_),
                                     clientSocketOptions(curve_));
  redirected_ = true;
  fell_back_from_.clear();
  return Status::ok();
}

void CoordinatorClient::useJobCoordinator(const std::string& endpoint, std::uint64_t job_id) {
  if (redirected_ && job_id == job_id_ && rpc_->endpoint() == endpoint) return;
  job_id_ = job_id;
  rpc_ =
      std::make_unique<RpcClient>(ctx_, endpoint, limitsFor(job_id_), clientSocketOptions(curve_));
  redirected_ = true;
  fell_back_from_.clear();
}

Result<Assignment> CoordinatorClient::registerAs(Role role, const std::string& name,
                                                 std::uint64_t worker_id,
                                                 const std::vector<std::string>& endpoints,
                                                 std::uint64_t epoch) {
  auto reply = call(registration(role, name, worker_id, endpoints, epoch));
  if (reply && reply->kind() == BodyKind::JOB_REDIRECT && !redirected_) {
    GSGD_RETURN_IF_ERROR(followRedirect(*reply));
    reply = call(registration(role, name, worker_id, endpoints, epoch));
  }
  if (!reply) return reply.status();
  if (reply->kind() != BodyKind::ASSIGNMENT) {
    return invalidArgument(std::string("coordinator answered '") + bodyKindName(reply->kind()) +
                           "' to a registration");
  }
  GSGD_RETURN_IF_ERROR(checkIncarnation(reply->header().getEpoch()));
  auto a = reply->header().getBody().getAssignment();
  Assignment out_a;
  out_a.worker_id = a.getWorkerId();
  out_a.epoch = reply->header().getEpoch();
  out_a.group_id = a.getGroupId();
  out_a.group_endpoint = a.getGroupEndpoint().cStr();
  out_a.central_endpoint = a.getCentralEndpoint().cStr();
  out_a.batch_size = a.getBatchSize();
  out_a.exchange_period = a.getExchangePeriod();
  out_a.shard_index = a.getShardIndex();
  out_a.shard_count = std::max<std::uint32_t>(1, a.getShardCount());
  out_a.model = a.getModel().cStr();
  out_a.param_count = a.getParamCount();
  out_a.seed = a.getSeed();
  out_a.heartbeat_ms = std::max<std::uint32_t>(50, a.getHeartbeatMs());
  if (a.hasCompression() && a.getCompression().size() > 0)
    out_a.compression = a.getCompression().cStr();
  out_a.group_server_key = a.getGroupServerKey().cStr();
  out_a.node_pool = a.getNodePool();
  out_a.optimizer_on_workers = a.getOptimizerPlacement() == proto::OptimizerPlacement::WORKERS;
  out_a.data_ranges = a.getDataRanges();
  return out_a;
}

Result<HeartbeatAnswer> CoordinatorClient::heartbeat(const Assignment& a,
                                                     const HeartbeatStats& stats) {
  OutMessage out(job_id_, a.worker_id);
  out.header().setEpoch(a.epoch);
  auto hb = out.header().getBody().initHeartbeat();
  hb.setSamplesTrained(stats.samples_trained);
  hb.setSteps(stats.steps);
  hb.setLastLoss(stats.last_loss);
  hb.setComputeMs(stats.compute_ms);
  hb.setCommMs(stats.comm_ms);
  hb.setTestAccuracy(stats.test_accuracy);
  hb.setEvaluatedVersion(stats.evaluated_version);
  hb.setBatchSize(stats.batch_size);
  hb.setWaitMs(stats.wait_ms);
  hb.setSpeedChanged(stats.speed_changed);
  hb.setGroupSlots(stats.group_slots);
  hb.setTestLoss(stats.test_loss);
  auto steps = hb.initRecentSteps(static_cast<unsigned>(stats.recent.size()));
  for (unsigned i = 0; i < stats.recent.size(); ++i) {
    const StepTiming& t = stats.recent[i];
    steps[i].setStep(t.step);
    steps[i].setBatch(t.batch);
    steps[i].setComputeMs(t.compute_ms);
    steps[i].setCommMs(t.comm_ms);
    steps[i].setWaitMs(t.wait_ms);
  }
  auto reply = call(std::move(out));
  if (!reply) return reply.status();
  if (reply->kind() != BodyKind::HEARTBEAT_REPLY) {
    return invalidArgument("coordinator answered a heartbeat with something else");
  }
  auto r = reply->header().getBody().getHeartbeatReply();
  HeartbeatAnswer answer{
      r.getStop(), r.getReregister(), {}, r.getMeasureNow(), r.getCompression().cStr()};
  for (auto p : r.getPlacements()) {
    answer.placements.push_back(NodePlacement{p.getJob().cStr(), p.getJobId(),
                                              p.getCoordinator().cStr(), p.getSlots(),
                                              p.getSettings().cStr()});
  }
  return answer;
}

Status CoordinatorClient::leave(const Assignment& a, std::uint64_t samples_trained,
                                std::uint64_t steps, std::uint64_t samples_unconfirmed) {
  OutMessage out(job_id_, a.worker_id);
  out.header().setEpoch(a.epoch);
  auto l = out.header().getBody().initLeave();
  l.setSamplesTrained(samples_trained);
  l.setSteps(steps);
  l.setSamplesUnconfirmed(samples_unconfirmed);
  if (!redirected_ && !fell_back_from_.empty()) {
    // Back at the front after the job's coordinator fell silent: the registration being
    // closed is that coordinator's. It may only have been busy (the message is queued
    // there and read later) or gone with its daemon (then nobody waits long for it).
    RpcClient job(ctx_, fell_back_from_, limitsFor(job_id_), clientSocketOptions(curve_));
    auto reply = job.call(std::move(out), std::min(timeout_, kLeaveAfterFallbackTimeout));
    return reply ? Status::ok() : reply.status();
  }
  auto reply = call(std::move(out));
  return reply ? Status::ok() : reply.status();
}

Result<std::vector<DataRange>> CoordinatorClient::claimData(const Assignment& a,
                                                            std::uint64_t dataset_size,
                                                            const std::vector<DataRange>& acks,
                                                            bool done) {
  OutMessage out(job_id_, a.worker_id);
  out.header().setEpoch(a.epoch);
  auto c = out.header().getBody().initDataClaim();
  c.setDatasetSize(dataset_size);
  c.setDone(done);
  auto list = c.initAcks(static_cast<unsigned>(acks.size()));
  for (unsigned i = 0; i < acks.size(); ++i) {
    list[i].setEpoch(acks[i].epoch);
    list[i].setBegin(acks[i].begin);
    list[i].setEnd(acks[i].end);
  }
  auto reply = call(std::move(out));
  if (!reply) return reply.status();
  if (reply->kind() != BodyKind::DATA_GRANT) {
    return invalidArgument("coordinator answered a data claim with something else");
  }
  std::vector<DataRange> granted;
  for (auto r : reply->header().getBody().getDataGrant().getRanges()) {
    granted.push_back({r.getEpoch(), r.getBegin(), r.getEnd()});
  }
  return granted;
}

namespace {

// A group PS on a node daemon with its own key pair is authenticated by that key.
CurveKeys groupServerKeys(const CurveKeys& curve, const Assignment& a) {
  CurveKeys k = curve;
  if (k.enabled() && !a.group_server_key.empty()) k.server_public_key = a.group_server_key;
  return k;
}

}  // namespace

GroupClient::GroupClient(zmq::context_t& ctx, const Assignment& a, std::uint64_t job_id,
                         std::chrono::milliseconds timeout, CompressionSpec compression,
                         const CurveKeys& curve)
    : rpc_(ctx, a.group_endpoint, limitsFor(job_id),
           clientSocketOptions(groupServerKeys(curve, a))),
      assignment_(a),
      job_id_(job_id),
      timeout_(timeout) {
  setCompression(compression);
}

void GroupClient::setCompression(CompressionSpec compression) {
  compressor_.reset();
  if (compression.encoding != kernels::Encoding::kDense) {
    compressor_.emplace(compression.encoding, assignment_.param_count, compression.ratio);
  }
}

Result<StepAnswer> GroupClient::readAnswer(const InMessage& reply, std::span<float> params,
                                           std::chrono::steady_clock::time_point deadline) {
  if (reply.kind() != BodyKind::STEP_REPLY) {
    rpc_.reset();
    return invalidArgument(std::string("group PS answered '") + bodyKindName(reply.kind()) + "'");
  }
  auto r = reply.header().getBody().getStepReply();
  StepAnswer a;
  if (r.getContent() == proto::ReplyContent::MEAN_GRADIENT) {
    if (mean_target_.empty()) {
      rpc_.reset();
      return failedPrecondition(
          "the group PS answered with the group's mean gradient (optimizer.placement "
          "workers): this trainer has no optimizer to step with it");
    }
    GSGD_RETURN_IF_ERROR(receiveTensorInto(rpc_, reply, mean_target_, deadline));
    a.mean_gradient = true;
    if (reply.tensorCount() > 1) {
      GSGD_RETURN_IF_ERROR(reply.readTensor(1, correction_target_));
      a.correction = true;
    }
  } else {
    GSGD_RETURN_IF_ERROR(receiveTensorInto(rpc_, reply, params, deadline));
  }
  a.reset_optimizer = r.getResetOptimizer();
  a.attach_parameters = r.getAttachParameters();
  a.step = reply.header().getStep();
  a.model_version = reply.header().getModelVersion();
  a.accepted = r.getAccepted();
  a.reason = r.getReason().cStr();
  a.wait_ms = r.getWaitMs();
  a.batch_size = r.getBatchSize();
  credit_bytes_ = r.getCreditBytes();
  a.directive = r.getDirective() == proto::Directive::REASSIGN ? Directive::kReassign
                : r.getDirective() == proto::Directive::STOP   ? Directive::kStop
                                                               : Directive::kContinue;
  return a;
}

Result<StepAnswer> GroupClient::exchange(std::vector<std::vector<zmq::message_t>>&& request,
                                         std::span<float> params) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::size_t sent = 0;
  auto sendUpTo = [&](std::size_t limit) -> Status {
    for (; sent < std::min(limit, request.size()); ++sent) {
      GSGD_RETURN_IF_ERROR(rpc_.send(std::move(request[sent])));
    }
    return Status::ok();
  };
  // A push in parts: its window, or all of it when the last reply granted room for it.
  std::uint64_t request_bytes = 0;
  for (const auto& frames : request) {
    for (std::size_t f = 1; f < frames.size(); ++f) request_bytes += frames[f].size();
  }
  const bool granted = request.size() > 1 && credit_bytes_ >= request_bytes;
  credit_bytes_ = 0;  // for one push
  GSGD_RETURN_IF_ERROR(
      sendUpTo(request.size() == 1 || granted ? request.size() : kPushWindowParts));
  while (true) {
    auto reply = rpc_.receive(deadline);
    if (!reply) return reply.status();
    if (reply->kind() == BodyKind::PUSH_CREDIT) {  // admitted: send the parts allowed
      GSGD_RETURN_IF_ERROR(sendUpTo(reply->header().getBody().getPushCredit().getParts()));
      continue;
    }
    // The answer (a refusal may come before every part was sent: the rest stays unsent).
    GSGD_RETURN_IF_ERROR(statusFromError(*reply));
    return readAnswer(*reply, params, deadline);
  }
}

Result<StepAnswer> GroupClient::pull(std::span<float> params) {
  OutMessage out(job_id_, assignment_.worker_id);
  out.header().setEpoch(assignment_.epoch);
  out.header().getBody().initPull();
  std::vector<std::vector<zmq::message_t>> request;
  request.push_back(std::move(out).toFrames());
  return exchange(std::move(request), params);
}

OutMessage GroupClient::pushMessage(std::uint64_t step, std::uint32_t batch, float loss,
                                    float compute_ms) const {
  OutMessage out(job_id_, assignment_.worker_id);
  out.header().setEpoch(assignment_.epoch);
  out.header().setStep(step);
  auto p = out.header().getBody().initPush();
  p.setBatchSize(batch);
  p.setLoss(loss);
  p.setComputeMs(compute_ms);
  p.setBufferCount(buffer_count_);
  return out;
}

void GroupClient::attachParameters(OutMessage& out, std::span<const float> attach) {
  if (attach.empty()) return;
  auto buf = pool_.acquire(attach.size());
  std::memcpy(buf->data(), attach.data(), attach.size_bytes());
  out.addTensor(std::move(buf));
}

Result<StepAnswer> GroupClient::push(std::uint64_t step, std::span<const float> grad,
                                     std::uint32_t batch, float loss, float compute_ms,
                                     std::span<float> params, std::span<const float> attach) {
  OutMessage out = pushMessage(step, batch, loss, compute_ms);
  if (compressor_ && grad.size() == compressor_->size()) {
    // Reuse an encode buffer no message in flight still holds.
    std::shared_ptr<std::vector<std::uint8_t>> bytes;
    for (auto& e : encoded_) {
      if (e.use_count() == 1) bytes = e;
    }
    if (!bytes) bytes = encoded_.emplace_back(std::make_shared<std::vector<std::uint8_t>>());
    compressor_->encode(grad, bytes.get());
    out.addEncodedTensor(bytes, toWire(compressor_->encoding()), grad.size());
  } else if (next_grad_ && grad.data() == next_grad_->data() && grad.size() == next_grad_->size()) {
    out.addTensor(std::move(next_grad_));  // computed in place: sent without a copy
    next_grad_.reset();
  } else {
    auto buf = pool_.acquire(grad.size());
    std::memcpy(buf->data(), grad.data(), grad.size_bytes());
    out.addTensor(std::move(buf));
  }
  attachParameters(out, attach);
  return exchange(std::move(out).toParts(part_bytes_), params);
}

Result<StepAnswer> GroupClient::push(std::uint64_t step, const Payload& grad, std::uint32_t batch,
                                     float loss, float compute_ms, std::span<float> params,
                                     std::span<const float> attach) {
  if (compressor_ || !grad) {
    return push(step, grad ? std::span<const float>(*grad) : std::span<const float>(), batch, loss,
                compute_ms, params, attach);
  }
  OutMessage out = pushMessage(step, batch, loss, compute_ms);
  out.addTensor(grad);
  attachParameters(out, attach);
  return exchange(std::move(out).toParts(part_bytes_), params);
}

Result<StepAnswer> GroupClient::pushSkipped(std::uint64_t step, float compute_ms,
                                            std::span<float> params) {
  OutMessage out = pushMessage(step, 0, 0.0f, compute_ms);
  out.header().getBody().getPush().setSkipped(true);
  // Sent dense and uncompressed: encoding zeros would spend the error-feedback residual.
  auto zeros = pool_.acquire(assignment_.param_count);
  std::fill(zeros->begin(), zeros->end(), 0.0f);
  out.addTensor(std::move(zeros));
  return exchange(std::move(out).toParts(part_bytes_), params);
}

std::span<float> GroupClient::gradientBuffer() {
  if (!next_grad_) next_grad_ = pool_.acquire(assignment_.param_count);
  return *next_grad_;
}

Result<std::uint64_t> fetchCentralModel(RpcClient& central, std::uint64_t job_id,
                                        std::span<float> params,
                                        std::chrono::milliseconds timeout) {
  OutMessage out(job_id, 0);
  out.header().getBody().initFetch().setEvaluation(true);  // kept for keep_best
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto reply = central.call(std::move(out), timeout);
  if (!reply) return reply.status();
  if (reply->kind() != BodyKind::MODEL_REPLY) {
    central.reset();
    return invalidArgument("central PS answered a fetch with something else");
  }
  GSGD_RETURN_IF_ERROR(receiveTensorInto(central, *reply, params, deadline));
  return reply->header().getModelVersion();
}

}  // namespace groupsgd::client
