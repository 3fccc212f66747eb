// The group PS's exchange with a sharded central PS (docs/shards.md): the same request as
// with one central PS (a fetch, or the delta) goes to every shard at once, the delta cut
// by shard range, each shard's range carrying that shard's own base version. The answers
// are kept until every shard has answered, then taken range by range: a range with a
// model is rebased on it; a range whose shard gave no model has its part of the delta
// rolled out of the replica (the shard may not have applied it). Shard 0 speaks for the
// run's accounting (samples applied, the run's sample total), so samples count once.
#include <algorithm>
#include <span>

#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/groupps/group_server.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::groupps {

Status GroupServer::ensureShards() {
  for (auto& shard : shards_) {
    if (shard.sock) continue;
    auto s = makeSocket(ctx_, zmq::socket_type::dealer, clientSocketOptions(cfg_.curve));
    if (!s) return s.status();
    GSGD_RETURN_IF_ERROR(connectSocket(*s, shard.where.alternatives()[shard.at]));
    shard.sock.emplace(std::move(*s));
  }
  return Status::ok();
}

void GroupServer::resetShards() {
  // A late answer must never be taken for the next request's.
  for (auto& shard : shards_) {
    shard.sock.reset();
    shard.parts.clear();
    shard.answer.reset();
    shard.failure = Status::ok();
    shard.answered = false;
  }
}

Status GroupServer::sendToShards(bool fetch, const std::vector<float>* delta) {
  GSGD_RETURN_IF_ERROR(ensureShards());
  for (auto& shard : shards_) {
    shard.parts.clear();
    shard.answer.reset();
    shard.failure = Status::ok();
    shard.answered = false;
    OutMessage out(cfg_.limits.job_id, cfg_.group_id);
    if (fetch) {
      out.header().getBody().initFetch();
      GSGD_RETURN_IF_ERROR(sendFrames(*shard.sock, std::move(out).toFrames()));
      continue;
    }
    out = deltaPushMessage(shard.base_version);
    auto slice = send_pool_.acquire(shard.where.size());
    kernels::copy(std::span<const float>(*delta).subspan(shard.where.begin, shard.where.size()),
                  *slice);
    out.addTensor(std::move(slice));
    GSGD_RETURN_IF_ERROR(sendSequence(*shard.sock, std::move(out).toParts(cfg_.part_bytes)));
  }
  return Status::ok();
}

void GroupServer::handleShard(std::size_t k, std::vector<zmq::message_t>&& frames) {
  ShardLink& shard = shards_[k];
  auto msg = decodeMessage(std::move(frames), cfg_.limits);
  if (exchange_.in_flight == CentralRequest::kNone || shard.answered) {
    if (msg && msg->part()) ++counters_.bad_parts;  // the rest of an answer given up on
    return;
  }
  if (!msg) {
    shard.failure = msg.status();
    shard.answered = true;
  } else if (!msg->part()) {
    shard.answer.emplace(std::move(*msg));
    shard.answered = true;
  } else {
    Status s = msg->kind() == BodyKind::MODEL_REPLY
                   ? shard.parts.add(std::move(*msg))
                   : invalidArgument("only a model reply comes in parts");
    if (!s) {
      ++counters_.bad_parts;
      shard.parts.clear();
      shard.failure = s;
      shard.answered = true;
    } else if (shard.parts.complete()) {
      shard.answered = true;
    }
  }
  if (std::all_of(shards_.begin(), shards_.end(), [](const ShardLink& l) { return l.answered; })) {
    onShardAnswers();
  }
}

void GroupServer::timeOutShards() {
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    ShardLink& shard = shards_[k];
    if (shard.answered) continue;
    const auto alternatives = shard.where.alternatives();
    GSGD_WARN("no answer from central shard " << k << " (" << alternatives[shard.at] << ") within "
                                              << cfg_.exchange_timeout_ms << " ms");
    if (alternatives.size() > 1) {
      // Its standby may have taken over: the next request goes to the next in its list.
      shard.at = (shard.at + 1) % alternatives.size();
      GSGD_WARN("central shard " << k << ": moving to " << alternatives[shard.at]);
    }
    shard.parts.clear();
    shard.failure =
        unavailable("no answer within " + std::to_string(cfg_.exchange_timeout_ms) + " ms");
    shard.answered = true;
  }
  onShardAnswers();
}

void GroupServer::onShardAnswers() {
  const CentralRequest was = exchange_.in_flight;
  exchange_.in_flight = CentralRequest::kNone;
  // Each shard's model range, or why it has none.
  std::vector<std::optional<TensorView>> models(shards_.size());
  std::vector<TensorView> assembled(shards_.size());
  std::vector<std::string> why(shards_.size());
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    ShardLink& shard = shards_[k];
    const InMessage* msg = shard.answer             ? &*shard.answer
                           : shard.parts.complete() ? &shard.parts.first()
                                                    : nullptr;
    if (msg == nullptr) {
      why[k] = shard.failure.toString();
    } else if (msg->kind() != BodyKind::MODEL_REPLY) {
      const Status err = statusFromError(*msg);
      why[k] = err.isOk() ? "unexpected answer" : err.toString();
    } else {
      if (shard.parts.complete()) assembled[k] = shard.parts.view();
      auto view = viewReceivedTensor(*msg, shard.parts.complete() ? &assembled[k] : nullptr,
                                     shard.where.size());
      if (view) {
        models[k] = *view;
      } else {
        why[k] = "model unreadable: " + view.status().toString();
      }
    }
    if (!why[k].empty()) {
      why[k] = "central shard " + std::to_string(k) + " (" + shard.where.endpoint + "): " + why[k];
    }
  }
  // Shard 0 speaks for the accounting: the exchange is applied iff shard 0 applied it (its
  // samples are counted there, once); another shard's refusal or silence costs only its
  // range's part of the delta, and is logged.
  CentralOutcome outcome{true, ""};
  const auto missing =
      std::find_if(why.begin(), why.end(), [](const auto& w) { return !w.empty(); });
  if (!have_model_ && missing != why.end()) {
    outcome = {false, *missing};  // a first model needs every range
  } else {
    const bool had_model = have_model_;
    const std::vector<float>* cut =
        was == CentralRequest::kExchange ? exchange_.cut_delta.get() : nullptr;
    for (std::size_t k = 0; k < shards_.size(); ++k) {
      ShardLink& shard = shards_[k];
      std::string lost = why[k];
      if (!models[k]) {
        // No model: this range's part of the delta leaves the replica (maybe not applied).
        if (cut != nullptr) {
          std::vector<float>& target = workersPlacement() ? pendingCorrection() : writableReplica();
          kernels::axpy(-1.0f,
                        std::span<const float>(*cut).subspan(shard.where.begin, shard.where.size()),
                        std::span<float>(target).subspan(shard.where.begin, shard.where.size()));
        }
      } else {
        rebaseRange(*models[k], cut, shard.where.begin, had_model);
        const InMessage& msg = shard.answer ? *shard.answer : shard.parts.first();
        shard.base_version = msg.header().getModelVersion();
        if (shard.base_version < shard.answered_version) {
          // A shard back at an older version (restarted from a checkpoint, no standby):
          // what it had answered us since is gone.
          GSGD_WARN("central shard "
                    << k << " (" << shard.where.alternatives()[shard.at] << ") is back at version "
                    << shard.base_version << ", below the " << shard.answered_version
                    << " it answered: " << shard.answered_version - shard.base_version
                    << " acknowledged versions lost");
        }
        shard.answered_version = shard.base_version;
        auto r = msg.header().getBody().getModelReply();
        if (k == 0) central_run_samples_ = r.getRunSamples();
        if (!r.getApplied()) lost = r.getReason().cStr();
      }
      if (lost.empty() || was != CentralRequest::kExchange) continue;
      if (k == 0) {
        outcome = {false, lost};
      } else {
        GSGD_WARN("central shard " << k << " did not apply its range of our delta: " << lost);
      }
    }
    have_model_ = true;
    replica_payload_.reset();
    exchange_.base_version = shards_[0].base_version;
  }
  for (auto& shard : shards_) {
    shard.parts.clear();
    shard.answer.reset();
    shard.answered = false;
    if (!shard.failure.isOk()) shard.sock.reset();  // reconnect: its stream is unknown
    shard.failure = Status::ok();
  }
  if (was == CentralRequest::kExchange) {
    finishExchange(outcome);
  } else if (!have_model_) {
    GSGD_WARN("could not get the model from the central shards: " << outcome.reason);
  }
  // A shard without a model (down, restarted at another version, refusing our base) is
  // resynchronised first: every range fetched anew before the next delta goes out.
  if (have_model_ && missing != why.end()) requestModel();
  afterCentralAnswer();
}

}  // namespace groupsgd::groupps
