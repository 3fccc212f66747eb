// The group PS's side of a push sent in parts (docs/protocol.md, "Parts" and
// "Flow control"): each part is checked and summed into the open step as it
// arrives, so the sum is done when the last part is; the push counts as arrived
// once whole. A push is admitted while the gradients being received fit the
// memory budget; the others wait (their member has sent its first
// kPushWindowParts parts and sends the rest on credit).
#include <algorithm>
#include <cmath>

#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/groupps/group_server.h"

namespace groupsgd::groupps {

std::uint64_t GroupServer::inboundBudgetBytes() const {
  const double models = cfg_.inbound_budget_models > 0
                            ? cfg_.inbound_budget_models
                            : std::max(1.0, static_cast<double>(barrier_.memberCount()) - 4.0);
  return static_cast<std::uint64_t>(models * static_cast<double>(replica().size() * sizeof(float)));
}

void GroupServer::onPushPart(const zmq::message_t& from, InMessage&& msg) {
  auto h = msg.header();
  const std::uint64_t worker = h.getSenderId();
  const PartPosition part = *msg.part();
  if (part.index == 0) {
    if (inbound_.pushes.count(worker) != 0) {
      // A new push while the last one is unfinished: the sender gave up on that
      // one (its request timed out); its parts leave the sum.
      ++counters_.bad_parts;
      GSGD_WARN("worker " << worker << " started a push with "
                          << inbound_.pushes[worker].stream.received() << " of "
                          << inbound_.pushes[worker].stream.count()
                          << " parts of its last one missing; dropped");
      abortInbound(worker);
    }
    const PushCheck check = validatePush(from, msg, part.total_elements);
    if (check == PushCheck::kAnswered) return;  // any parts already sent are dropped
    InboundPush in;
    in.routing_id = zmq::message_t(from.data(), from.size());
    in.step = h.getStep();
    in.batch = h.getBody().getPush().getBatchSize();
    in.loss = h.getBody().getPush().getLoss();
    in.late = check == PushCheck::kLate;
    inbound_.pushes.emplace(worker, std::move(in));
    if (!step_opened_ && !inbound_.pushes[worker].late) step_opened_ = Clock::now();
  }
  auto it = inbound_.pushes.find(worker);
  if (it == inbound_.pushes.end()) {
    ++counters_.bad_parts;  // the rest of a push already answered (refused,
                            // late, moved)
    return;
  }
  InboundPush& in = it->second;
  Status s = in.stream.accept(part, msg.tensorElements(0));
  if (s && (h.getStep() != in.step || h.getBody().getPush().getBatchSize() != in.batch)) {
    s = invalidArgument("part " + std::to_string(part.index) + " belongs to another push");
  }
  if (s && !in.admitted && in.held.size() >= kPushWindowParts &&
      inbound_.granted.count(worker) == 0) {
    s = invalidArgument("part " + std::to_string(part.index) + " sent beyond the window of " +
                        std::to_string(kPushWindowParts) + " parts before credit");
  }
  if (!s) {
    ++counters_.bad_parts;
    abortInbound(worker);
    return refuseBadUpdate(from, worker, s);
  }
  if (part.index == 0) {
    in.held.push_back(std::move(msg));
    return admitOrQueue(worker);
  }
  if (!in.admitted) {
    in.held.push_back(std::move(msg));
    return;
  }
  takePart(worker, std::move(msg));
}

void GroupServer::grantNextPush(std::uint64_t worker, OutMessage* reply) {
  if (optimizers_.size() < 2 || inbound_.granted.count(worker) != 0) return;  // whole pushes: none
  const std::uint64_t bytes = replica().size() * sizeof(float);
  if (inbound_.admitted_bytes != 0 && inbound_.admitted_bytes + bytes > inboundBudgetBytes())
    return;
  inbound_.admitted_bytes += bytes;
  inbound_.granted[worker] = bytes;
  reply->header().getBody().getStepReply().setCreditBytes(bytes);
}

void GroupServer::releaseGrant(std::uint64_t worker) {
  auto it = inbound_.granted.find(worker);
  if (it == inbound_.granted.end()) return;
  inbound_.admitted_bytes -= it->second;
  inbound_.granted.erase(it);
  admitWaiting();
}

void GroupServer::admitOrQueue(std::uint64_t worker) {
  InboundPush& in = inbound_.pushes.at(worker);
  if (auto g = inbound_.granted.find(worker); g != inbound_.granted.end() && !in.late) {
    // Its room was reserved with its last reply: admitted at once (the credit still goes
    // out, for a sender that did not get the grant, e.g. a new client of the same worker).
    inbound_.admitted_bytes -= g->second;
    inbound_.granted.erase(g);
    return admit(worker);
  }
  const std::uint64_t bytes = in.late ? 0 : in.stream.totalElements() * sizeof(float);
  const bool waiting_before =
      std::find(inbound_.admission_queue.begin(), inbound_.admission_queue.end(), worker) !=
      inbound_.admission_queue.end();
  // A late push sums nothing: it never waits.
  if (bytes == 0 ||
      (!waiting_before && inbound_.admission_queue.empty() &&
       (inbound_.admitted_bytes == 0 || inbound_.admitted_bytes + bytes <= inboundBudgetBytes()))) {
    return admit(worker);
  }
  if (!waiting_before) {
    inbound_.admission_queue.push_back(worker);
    ++counters_.pushes_waited;
  }
}

void GroupServer::admit(std::uint64_t worker) {
  InboundPush& in = inbound_.pushes.at(worker);
  in.admitted = true;
  in.reserved = in.late ? 0 : in.stream.totalElements() * sizeof(float);
  inbound_.admitted_bytes += in.reserved;
  if (in.stream.count() > kPushWindowParts) {
    OutMessage credit(cfg_.limits.job_id, cfg_.group_id);
    credit.header().setStep(in.step);
    credit.header().getBody().initPushCredit().setParts(in.stream.count());
    Status s = replyTo(router_, in.routing_id, std::move(credit));
    if (!s) GSGD_WARN("could not send credit to worker " << worker << ": " << s.toString());
  }
  std::vector<InMessage> held = std::move(in.held);
  in.held.clear();
  for (auto& part : held) {
    if (inbound_.pushes.count(worker) == 0) break;  // refused or finished on the way
    takePart(worker, std::move(part));
  }
}

void GroupServer::admitWaiting(bool force) {
  while (!inbound_.admission_queue.empty()) {
    const std::uint64_t worker = inbound_.admission_queue.front();
    auto it = inbound_.pushes.find(worker);
    if (it == inbound_.pushes.end() || it->second.admitted) {
      inbound_.admission_queue.erase(inbound_.admission_queue.begin());
      continue;
    }
    const std::uint64_t bytes =
        it->second.late ? 0 : it->second.stream.totalElements() * sizeof(float);
    if (!force && bytes != 0 && inbound_.admitted_bytes != 0 &&
        inbound_.admitted_bytes + bytes > inboundBudgetBytes()) {
      return;
    }
    inbound_.admission_queue.erase(inbound_.admission_queue.begin());
    admit(worker);
  }
}

void GroupServer::takePart(std::uint64_t worker, InMessage&& msg) {
  InboundPush& in = inbound_.pushes.at(worker);
  if (!in.late) {
    const std::uint64_t elements = msg.tensorElements(0);
    auto view = msg.viewTensor(0, elements);  // a part: dense
    if (!view) {
      const zmq::message_t from(in.routing_id.data(), in.routing_id.size());
      abortInbound(worker);
      return refuseBadUpdate(from, worker, view.status());
    }
    // Checked and summed in one pass; a part found bad is taken out of the sum again
    // (what it added of itself) with the push's earlier parts.
    Status bad;
    const std::size_t first = msg.part()->offset;
    std::size_t off = first;
    for (const auto& p : view->parts) {
      const kernels::FiniteAdd r = barrier_.addPartIfFinite(in.batch, p, off);
      // Buffer values (batch-norm statistics) are not a gradient: not bounded.
      in.squares += r.squares - (r.added == p.size() ? bufferSquares(p, off) : 0.0);
      if (r.added < p.size()) {
        barrier_.removePart(in.batch, p.first(r.added), off);
        bad = invalidArgument(std::to_string(countNonFinite(*view)) +
                              " non-finite values in the gradient (part " +
                              std::to_string(msg.part()->index) + ")");
        break;
      }
      off += p.size();
    }
    if (bad && std::sqrt(std::max(0.0, in.squares)) > cfg_.max_grad_norm) {
      bad = invalidArgument("gradient norm over the bound " + std::to_string(cfg_.max_grad_norm) +
                            " by part " + std::to_string(msg.part()->index));
    }
    if (!bad) {
      // [first, off) of this part was added: take it out, then the earlier parts.
      std::size_t at = first;
      for (const auto& p : view->parts) {
        if (at >= off) break;
        barrier_.removePart(in.batch, p, at);
        at += p.size();
      }
      const zmq::message_t from(in.routing_id.data(), in.routing_id.size());
      abortInbound(worker);
      return refuseBadUpdate(from, worker, bad);
    }
    in.summed.push_back(std::move(msg));
  }
  if (in.stream.complete()) finishInbound(worker);
}

void GroupServer::finishInbound(std::uint64_t worker) {
  auto node = inbound_.pushes.extract(worker);
  InboundPush& in = node.mapped();
  inbound_.admitted_bytes -= in.reserved;
  if (in.late) {
    answerLate(in.routing_id, worker, in.step, in.batch);
  } else {
    // batch 0 passed validatePush only as a skipped step (its zero parts added nothing).
    Status added =
        in.batch == 0 ? barrier_.skip(worker) : barrier_.commit(worker, in.batch, in.loss);
    if (!added) {
      inbound_.pushes.insert(std::move(node));
      abortInbound(worker);
      refuse(in.routing_id, added);
    } else {
      in.summed.clear();  // whole and in the step: its parts' memory goes now
      last_step_[worker] = in.step;
      acknowledged_[worker] += in.batch;
      if (!step_opened_) step_opened_ = Clock::now();
      waiting_.push_back(
          {zmq::message_t(in.routing_id.data(), in.routing_id.size()), worker, Clock::now()});
      noteArrival();
      maybeCloseStep(false);
    }
  }
  admitWaiting();
}

void GroupServer::abortInbound(std::uint64_t worker) {
  auto it = inbound_.pushes.find(worker);
  if (it == inbound_.pushes.end()) return;
  InboundPush& in = it->second;
  if (!in.late) {
    for (const auto& msg : in.summed) {
      auto view = msg.viewTensor(0, msg.tensorElements(0));
      std::size_t off = msg.part()->offset;
      for (const auto& p : view->parts) {
        barrier_.removePart(in.batch, p, off);
        off += p.size();
      }
    }
  }
  inbound_.admitted_bytes -= in.reserved;
  inbound_.pushes.erase(it);
  admitWaiting();
}

void GroupServer::dropUnfinishedPushes() {
  for (auto& [worker, in] : inbound_.pushes) {
    if (in.late) continue;
    for (const auto& msg : in.summed) {
      auto view = msg.viewTensor(0, msg.tensorElements(0));
      std::size_t off = msg.part()->offset;
      for (const auto& p : view->parts) {
        barrier_.removePart(in.batch, p, off);
        off += p.size();
      }
    }
    in.summed.clear();
    in.late = true;  // answered late once its last part is in
    inbound_.admitted_bytes -= in.reserved;
    in.reserved = 0;
  }
}

void GroupServer::abortInboundOfNonMembers() {
  std::vector<std::uint64_t> gone;
  for (const auto& [worker, in] : inbound_.pushes) {
    if (barrier_.member(worker) == nullptr) gone.push_back(worker);
  }
  for (std::uint64_t worker : gone) abortInbound(worker);
  gone.clear();
  for (const auto& [worker, bytes] : inbound_.granted) {
    if (barrier_.member(worker) == nullptr) gone.push_back(worker);
  }
  for (std::uint64_t worker : gone) releaseGrant(worker);
}

}  // namespace groupsgd::groupps
