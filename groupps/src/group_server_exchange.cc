// The group PS's side of the exchange with the central PS (docs/architecture.md, "The
// exchange"): every K steps the group's delta is cut and sent off the step path, the
// answer's central model is taken as the new base and the replica rebased on it (with
// the local steps taken since the cut kept), and a lost answer or a timeout rolls the
// delta back into the next one instead of losing it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/deadline.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/groupps/group_server.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::groupps {

Status GroupServer::ensureCentral() {
  if (central_) return Status::ok();
  auto s = makeSocket(ctx_, zmq::socket_type::dealer, clientSocketOptions(cfg_.curve));
  if (!s) return s.status();
  GSGD_RETURN_IF_ERROR(connectSocket(*s, cfg_.central_endpoint));
  central_.emplace(std::move(*s));
  return Status::ok();
}

void GroupServer::requestModel() {
  if (exchange_.in_flight != CentralRequest::kNone) return;
  if (sharded()) {
    if (Status s = sendToShards(true, nullptr); !s) {
      GSGD_WARN("cannot ask the central shards for the model: " << s.toString());
      resetShards();
      return;
    }
    exchange_.in_flight = CentralRequest::kFetch;
    exchange_.in_flight_since = Clock::now();
    return;
  }
  Status s = ensureCentral();
  if (s) {
    OutMessage out(cfg_.limits.job_id, cfg_.group_id);
    out.header().getBody().initFetch();
    s = sendFrames(*central_, std::move(out).toFrames());
  }
  if (!s) {
    GSGD_WARN("cannot ask the central PS for the model: " << s.toString());
    central_.reset();
    return;
  }
  exchange_.in_flight = CentralRequest::kFetch;
  exchange_.in_flight_since = Clock::now();
}

bool GroupServer::residualLeft() const {
  return exchange_.compressor && kernels::sumSquares(exchange_.compressor->residual()) > 0;
}

void GroupServer::maybeExchange(bool force) {
  if (exchange_.in_flight != CentralRequest::kNone) {
    // The answer on its way may hold a model older than this request (a fetch or delta the
    // central PS served before another group's merge): exchange again once it is in.
    if (force) exchange_.force_after_answer = true;
    return;
  }
  if (!have_model_) return;
  if (counters_.samples_pending == 0 && !(force && residualLeft())) {
    // Nothing to hand over; a forced exchange (regroup, flush) still resynchronises the
    // replica with the newest central model, so a group never starts from a stale base.
    if (force) requestModel();
    return;
  }
  if (!force && exchange_.steps_since_cut < cfg_.exchange_period) return;
  // Optimizers on the workers: cut when a push brought the members' parameters (a forced
  // exchange takes the last ones; the progress since then goes with the next delta).
  if (!force && workersPlacement() && !replicaCurrent()) return;
  OutgoingDelta delta = cutDelta(force);
  std::shared_ptr<const std::vector<float>> cut = delta.cut;
  if (Status s = sendDelta(std::move(delta)); !s) {
    GSGD_WARN("cannot send the delta to the central PS: " << s.toString());
    central_.reset();
    resetShards();
    return;  // stays pending; tried again after the next step
  }
  exchange_.cut_delta = std::move(cut);
  counters_.samples_in_flight = counters_.samples_pending;
  counters_.samples_pending = 0;
  exchange_.steps_since_cut = 0;
  exchange_.in_flight = CentralRequest::kExchange;
  exchange_.in_flight_since = Clock::now();
}

GroupServer::OutgoingDelta GroupServer::cutDelta(bool force) {
  // delta = replica - base. The replica at the cut is base + delta: the rebase needs only
  // the delta, kept until the answer (no model-sized copy of the replica).
  auto delta = send_pool_.acquire(replica().size());
  kernels::subtract(replica(), exchange_.base, *delta);
  // Workers placement: a correction not yet delivered is part of the members' progress.
  if (workersPlacement() && workers_.correction) kernels::axpy(1.0f, *workers_.correction, *delta);
  OutgoingDelta out;
  out.cut = delta;
  if (exchange_.compressor && !force) {
    // Compressed with error feedback: what is not sent now stays in the compressor's
    // residual and rides in a later delta; the rebase (replica = central + progress since
    // the cut) leaves it out of the replica meanwhile, so each bit of progress reaches the
    // central PS exactly once.
    out.encoded = std::make_shared<std::vector<std::uint8_t>>();
    exchange_.compressor->encode(*delta, out.encoded.get());
  } else if (exchange_.compressor && !exchange_.compressor->residual().empty()) {
    // A forced exchange (flush, regroup, shutdown) sends everything, residual included,
    // dense, so nothing stays behind in this group.
    // fp16 keeps no residual (an empty span, null data): its delta goes as it is; adding
    // it read a model's length from address 0 (test_cluster's flush cases).
    auto all = send_pool_.acquire(delta->size());
    kernels::copy(*delta, *all);
    kernels::axpy(1.0f, exchange_.compressor->residual(), *all);
    exchange_.compressor->reset();
    delta = std::move(all);  // the cut stays base + delta: the residual was not in the replica
  }
  out.dense = std::move(delta);
  return out;
}

OutMessage GroupServer::deltaPushMessage(std::uint64_t base_version) const {
  OutMessage out(cfg_.limits.job_id, cfg_.group_id);
  out.header().setModelVersion(base_version);
  out.header().setStep(step_);
  out.header().setEpoch(epoch_);
  auto d = out.header().getBody().initDeltaPush();
  d.setGroupId(cfg_.group_id);
  d.setSamples(counters_.samples_pending);
  d.setSteps(exchange_.steps_since_cut);
  d.setExchangeSeq(exchange_.seq);
  return out;
}

Status GroupServer::sendDelta(OutgoingDelta&& delta) {
  ++exchange_.seq;  // one number per delta, the same to every shard
  if (sharded()) return sendToShards(false, delta.dense.get());  // dense only (config)
  GSGD_RETURN_IF_ERROR(ensureCentral());
  OutMessage out = deltaPushMessage(exchange_.base_version);
  if (delta.encoded) {
    out.addEncodedTensor(std::move(delta.encoded), toWire(exchange_.compressor->encoding()),
                         replica().size());
  } else {
    out.addTensor(std::move(delta.dense));
  }
  return sendSequence(*central_, std::move(out).toParts(cfg_.part_bytes));
}

void GroupServer::handleCentral(std::vector<zmq::message_t>&& frames) {
  auto msg = decodeMessage(std::move(frames), cfg_.limits);
  if (!msg) return onCentralAnswer(nullptr, msg.status(), nullptr);
  if (!msg->part()) return onCentralAnswer(&*msg, Status::ok(), nullptr);
  // A model in parts: kept until whole, checked part by part as it arrives.
  if (exchange_.in_flight == CentralRequest::kNone) {
    ++counters_.bad_parts;  // the rest of an answer already given up on
    return;
  }
  Status s = msg->kind() == BodyKind::MODEL_REPLY
                 ? exchange_.central_parts.add(std::move(*msg))
                 : invalidArgument("only a model reply comes in parts");
  if (!s) {
    ++counters_.bad_parts;
    exchange_.central_parts.clear();
    central_.reset();  // the rest of this answer must never be read as the next one's
    return onCentralAnswer(nullptr, s, nullptr);
  }
  if (!exchange_.central_parts.complete()) return;
  const TensorView whole = exchange_.central_parts.view();
  onCentralAnswer(&exchange_.central_parts.first(), Status::ok(), &whole);
  exchange_.central_parts.clear();
}

namespace {

// Why an answer carries no model: the transport's failure, the central PS's error, or an
// answer of another kind (a status that is ok).
std::string whyNoModel(const InMessage* msg, const Status& failure) {
  const Status why = msg != nullptr ? statusFromError(*msg) : failure;
  return why.isOk() ? "unexpected answer from the central PS" : why.toString();
}

}  // namespace

void GroupServer::onCentralAnswer(const InMessage* msg, const Status& failure,
                                  const TensorView* assembled) {
  const CentralRequest was = exchange_.in_flight;
  exchange_.in_flight = CentralRequest::kNone;
  const CentralOutcome outcome = takeCentralModel(msg, failure, assembled, was);
  if (was == CentralRequest::kExchange) {
    finishExchange(outcome);
  } else if (!have_model_) {
    GSGD_WARN("could not get the model from the central PS: " << outcome.reason);
  }
  afterCentralAnswer();
}

void GroupServer::afterCentralAnswer() {
  // Forced only to hand over pending samples or, for a flush, the residual; with neither,
  // a flush is complete now (a forced exchange with nothing to hand over would fetch the
  // model again, answer after answer).
  const bool flushing = !flush_waiters_.empty();
  const bool forced = std::exchange(exchange_.force_after_answer, false);
  if (forced || counters_.samples_pending > 0 || (flushing && residualLeft())) {
    maybeExchange(flushing || forced);
  }
  answerFlushWaiters();
}

GroupServer::CentralOutcome GroupServer::takeCentralModel(const InMessage* msg,
                                                          const Status& failure,
                                                          const TensorView* assembled,
                                                          CentralRequest was) {
  if (msg == nullptr || msg->kind() != BodyKind::MODEL_REPLY) {
    return loseAnswer(was, whyNoModel(msg, failure));
  }
  // In place in the frames (one message) or in the parts' frames (assembled).
  auto central = viewReceivedTensor(*msg, assembled, replica().size());
  if (!central) return loseAnswer(was, "central model unreadable: " + central.status().toString());
  rebaseOn(*central, was == CentralRequest::kExchange ? exchange_.cut_delta.get() : nullptr);
  exchange_.base_version = msg->header().getModelVersion();
  auto r = msg->header().getBody().getModelReply();
  // Our delta's samples, when applied, are in the total now: no longer in flight (the
  // caller clears them) and not pending, so runSamples() counts them once.
  central_run_samples_ = r.getRunSamples();
  if (r.getApplied()) return {true, ""};
  return {false, r.getReason().cStr()};
}

GroupServer::CentralOutcome GroupServer::loseAnswer(CentralRequest was, std::string reason) {
  if (was == CentralRequest::kExchange) rollOutLostDelta();
  return {false, std::move(reason)};
}

void GroupServer::rebaseOn(const TensorView& central, const std::vector<float>* cut_delta) {
  rebaseRange(central, cut_delta, 0, have_model_);
  have_model_ = true;
  replica_payload_.reset();
}

void GroupServer::rebaseRange(const TensorView& central, const std::vector<float>* cut_delta,
                              std::size_t offset, bool had_model) {
  // replica = central + (replica - since), since = the cut = base + delta (exchange) or
  // the base (resync): the local steps taken meanwhile are kept. Part by part, in place.
  // Workers placement: the members hold the replica, so the rebase goes into the
  // correction they add at their next step (correction = central + (correction - since)).
  const bool into_correction = workersPlacement() && had_model;
  std::vector<float>& replica = into_correction ? pendingCorrection() : writableReplica();
  std::size_t off = offset;
  for (const auto& part : central.parts) {
    auto rep = std::span<float>(replica).subspan(off, part.size());
    auto base = std::span<float>(exchange_.base).subspan(off, part.size());
    if (had_model) {
      const auto cut = cut_delta != nullptr
                           ? std::span<const float>(*cut_delta).subspan(off, part.size())
                           : std::span<const float>();
      kernels::rebase(part, base, cut, rep);
    } else {
      kernels::copy(part, rep);
    }
    kernels::copy(part, base);
    off += part.size();
  }
}

void GroupServer::finishExchange(const CentralOutcome& outcome) {
  exchange_.cut_delta.reset();  // its buffer goes back to the pool
  if (outcome.applied) {
    ++counters_.exchanges;
  } else {
    ++counters_.refused_exchanges;
    counters_.samples_dropped += counters_.samples_in_flight;
    GSGD_WARN("central PS refused our delta (" << counters_.samples_in_flight
                                               << " samples dropped): " << outcome.reason);
  }
  counters_.samples_in_flight = 0;
}

void GroupServer::rollOutLostDelta() {
  // replica -= cut - base (= the delta): the delta's progress leaves the replica with its
  // samples, which the caller counts as dropped; so does any error-feedback residual.
  if (exchange_.cut_delta) {
    kernels::axpy(-1.0f, *exchange_.cut_delta,
                  workersPlacement() ? pendingCorrection() : writableReplica());
  }
  exchange_.cut_delta.reset();
  if (exchange_.compressor) exchange_.compressor->reset();
  replica_payload_.reset();
}

void GroupServer::checkExchangeTimeout() {
  if (exchange_.in_flight == CentralRequest::kNone) return;
  if (Clock::now() - exchange_.in_flight_since <
      std::chrono::milliseconds(cfg_.exchange_timeout_ms))
    return;
  if (sharded()) return timeOutShards();
  GSGD_WARN("no answer from the central PS within " << cfg_.exchange_timeout_ms
                                                    << " ms; reconnecting");
  if (exchange_.in_flight == CentralRequest::kExchange) {
    // We cannot know whether it was applied; count it as lost and take it out of the
    // replica, so it is never sent (and claimed) a second time.
    rollOutLostDelta();
    ++counters_.refused_exchanges;
    counters_.samples_dropped += counters_.samples_in_flight;
    counters_.samples_in_flight = 0;
  }
  exchange_.in_flight = CentralRequest::kNone;
  central_.reset();  // a late answer must not be taken for the next request's
  resetShards();
  exchange_.central_parts.clear();
  requestModel();
}

}  // namespace groupsgd::groupps
