// optimizer.placement workers (docs/protocol.md, "Optimizer on the workers"): the group
// PS sums the members' gradients as always but answers with the batch-weighted mean
// gradient; every member steps its own optimizer with it, so the members stay identical.
// The group PS knows the members' parameters only when a push brings them (asked with
// the step reply before: when an exchange is due or a member waits to (re)join), and hands
// the central PS's rebase to the members as a correction they all add at their next step.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/groupps/group_server.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::groupps {

Status GroupServer::checkAttachedParameters(const InMessage& msg) const {
  if (msg.tensorElements(1) != replica().size()) {
    return invalidArgument("attached parameters have " + std::to_string(msg.tensorElements(1)) +
                           " elements, expected " + std::to_string(replica().size()));
  }
  if (msg.tensorEncoding(1) != proto::Encoding::DENSE) {
    return invalidArgument("attached parameters must be dense float32");
  }
  return Status::ok();
}

void GroupServer::takeAttachedParameters(std::uint64_t worker, const InMessage& msg) {
  auto params = msg.viewTensor(1, replica().size());
  if (!params) {
    GSGD_WARN("worker " << worker << ": unreadable parameters: " << params.status().toString());
    return;
  }
  for (const auto& part : params->parts) {
    if (kernels::countNonFinite(part) != 0) {
      GSGD_WARN("worker " << worker << " attached non-finite parameters; ignored");
      return;
    }
  }
  if (replicaCurrent()) {
    // Another member's copy: they must all be the same (the same steps from the same
    // start). A difference means a member changed its parameters behind the group's back.
    std::size_t off = 0;
    for (const auto& part : params->parts) {
      if (std::memcmp(part.data(), replica().data() + off, part.size_bytes()) != 0) {
        GSGD_WARN("worker " << worker << "'s parameters differ from the group's at step " << step_
                            << " (changed outside the group's steps?)");
        break;
      }
      off += part.size();
    }
    return;
  }
  std::vector<float>& replica = writableReplica();
  std::size_t off = 0;
  for (const auto& part : params->parts) {
    std::memcpy(replica.data() + off, part.data(), part.size_bytes());
    off += part.size();
  }
  workers_.synced_step = step_;
  maybeExchange(false);
  answerHeld();
}

void GroupServer::holdForParameters(const zmq::message_t& from, std::uint64_t worker,
                                    std::string late_reason) {
  for (auto it = workers_.held.begin(); it != workers_.held.end(); ++it) {
    if (it->worker == worker) {  // asked again (a retry): answer the newest request only
      workers_.held.erase(it);
      break;
    }
  }
  workers_.held.push_back(
      {zmq::message_t(from.data(), from.size()), worker, Clock::now(), std::move(late_reason)});
  // Not waited for until it has the parameters (then it is marked active again).
  barrier_.excuse(worker);
  answerHeldIfNobodyAttaches();
  maybeCloseStep(false);
}

void GroupServer::answerHeldIfNobodyAttaches() {
  if (workers_.held.empty() || barrier_.activeCount() > 0) return;
  // Nobody left to send the parameters: the last ones known are the group's from now on.
  workers_.synced_step = step_;
  answerHeld();
}

void GroupServer::answerHeld() {
  if (workers_.held.empty()) return;
  for (const auto& h : workers_.held) {
    barrier_.markActive(h.worker);
    const bool late = !h.late_reason.empty();
    sendStepReply(h.routing_id, h.worker, !late,
                  late ? h.late_reason + std::to_string(step_) : std::string());
    retireIfLeaving(h.worker);
  }
  GSGD_DEBUG("step " << step_ << ": " << workers_.held.size()
                     << " member(s) took the group's parameters; optimizers restart");
  workers_.held.clear();
  workers_.reset_optimizer = true;  // the newcomers start with a fresh state: all do
}

void GroupServer::computeMeanGradient(std::span<const float> sum, float scale) {
  // A fresh buffer when a reply still being sent holds the last one.
  if (!workers_.mean || workers_.mean.use_count() > 1) {
    workers_.mean = std::make_shared<std::vector<float>>(sum.size());
  }
  std::atomic_thread_fence(std::memory_order_acquire);  // as writableReplica()
  std::vector<float>& mean = *workers_.mean;
  for (std::size_t i = 0; i < sum.size(); ++i) mean[i] = sum[i] * scale;
}

OutMessage GroupServer::meanGradientReply(std::uint64_t worker, double wait_ms) {
  OutMessage out = stepReplyHeader(worker, true, "", wait_ms);
  addMeanGradient(out, workers_.reset_optimizer, workers_.correction);
  return out;
}

void GroupServer::addMeanGradient(OutMessage& out, bool reset_optimizer,
                                  const std::shared_ptr<std::vector<float>>& correction) {
  auto r = out.header().getBody().getStepReply();
  r.setContent(proto::ReplyContent::MEAN_GRADIENT);
  // The parameters are wanted at the next step's start: an exchange is due, or members
  // wait to (re)join.
  r.setAttachParameters(exchange_.steps_since_cut >= cfg_.exchange_period ||
                        !workers_.held.empty());
  r.setResetOptimizer(reset_optimizer);
  out.addTensor(workers_.mean);
  if (correction) out.addTensor(correction);
}

void GroupServer::afterWorkersStep() {
  // Delivered to every member of the step; a member that missed it gets the same reply
  // late (answerLateWithLastMean) or the parameters.
  workers_.last_correction = std::move(workers_.correction);
  workers_.last_reset = workers_.reset_optimizer;
  workers_.correction.reset();
  workers_.reset_optimizer = false;
}

void GroupServer::answerLateWithLastMean(const zmq::message_t& from, std::uint64_t worker,
                                         const std::string& reason) {
  barrier_.markActive(worker);  // waited for again from the open step on
  OutMessage out = stepReplyHeader(worker, false, reason + std::to_string(step_), 0);
  addMeanGradient(out, workers_.last_reset, workers_.last_correction);
  if (Status s = sendFrames(router_, std::move(out).toFrames(), &from); !s) {
    GSGD_WARN("could not answer a member: " << s.toString());
  }
  retireIfLeaving(worker);
  maybeCloseStep(false);
}

std::vector<float>& GroupServer::pendingCorrection() {
  if (!workers_.correction) {
    workers_.correction = std::make_shared<std::vector<float>>(replica().size(), 0.0f);
  }
  return *workers_.correction;
}

}  // namespace groupsgd::groupps
