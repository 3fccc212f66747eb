// The central PS's side of a consistent cut across shards (docs/shards.md, "Consistent
// cut"). The head asks every shard in turn to freeze: from then on a shard holds each
// group's delta instead of merging it and answers with its marks (the newest exchange it
// took from each group). Every group waits for all shards, so the marks differ by at most
// the one exchange per group in flight. The head sends each shard the highest mark per
// group; the shard takes its held deltas up to those marks (waiting for one still on the
// wire), snapshots model and outer optimizer, unfreezes (the rest of the held deltas are
// merged) and writes the snapshot as cut-N.gsgd off the serving thread; the answer comes
// once the file is durable. A freeze not committed within kCutHoldLimit is released (a
// head that died mid-cut must not stall the run).
#include <algorithm>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::centralps {
namespace {

constexpr auto kCutHoldLimit = std::chrono::seconds(5);

void putMarks(capnp::List<proto::ExchangeMark>::Builder list, const ExchangeMarks& marks) {
  std::size_t i = 0;
  for (const auto& [group, seq] : marks) {
    list[i].setGroupId(group);
    list[i].setSeq(seq);
    ++i;
  }
}

}  // namespace

void CentralServer::noteExchange(std::uint32_t group, std::uint64_t seq) {
  if (seq != 0) marks_[group] = seq;  // the newest taken (a restarted group PS goes on above)
}

OutMessage CentralServer::cutAnswer(const Status& s) const {
  OutMessage out(cfg_.limits.job_id, 0);
  out.header().setModelVersion(store_.version());
  auto d = out.header().getBody().initCheckpointDone();
  d.setOk(s.isOk());
  if (!s.isOk()) d.setError(s.toString());
  return out;
}

void CentralServer::onCutRequest(const zmq::message_t& from, const InMessage& msg) {
  auto req = msg.header().getBody().getCheckpointRequest();
  switch (req.getCutPhase()) {
    case 1: {  // freeze
      if (cfg_.checkpoint_dir.empty()) {
        return refuse(from, failedPrecondition("checkpoints are off (no checkpoint_dir)"));
      }
      if (cut_) return refuse(from, failedPrecondition("a cut is already under way"));
      cut_.emplace();
      cut_->frozen_at = std::chrono::steady_clock::now();
      OutMessage out = cutAnswer(Status::ok());
      auto d = out.header().getBody().getCheckpointDone();
      d.setVersion(store_.version());
      d.setNewestCut(newest_cut_);
      putMarks(d.initCutMarks(static_cast<unsigned>(marks_.size())), marks_);
      (void)replyTo(sock_, from, std::move(out));
      return;
    }
    case 2: {  // commit
      if (!cut_ || !cut_->frozen || cut_->committer) {
        return refuse(from, failedPrecondition("no frozen cut to commit (released after " +
                                               std::to_string(kCutHoldLimit.count()) +
                                               " s without a commit?)"));
      }
      cut_->committer.emplace(from.data(), from.size());
      for (auto m : req.getCutMarks()) cut_->target[m.getGroupId()] = m.getSeq();
      cut_->number = req.getCutNumber();
      cut_->keep = req.getCutKeep();
      return advanceCut();
    }
    case 3:  // release (the head gave the cut up)
      if (cut_ && cut_->frozen) {
        GSGD_WARN("cut released by the head before it was taken");
        unfreeze();
        if (!cut_->write) cut_.reset();
      }
      (void)replyTo(sock_, from, cutAnswer(Status::ok()));
      return;
    case 4:  // restore: a restarted head brings this shard back to the manifest's cut
      return onCutRestore(from, req.getCutNumber(), req.getCutMarks());
    default:
      return refuse(from, invalidArgument("unknown cut phase " +
                                          std::to_string(unsigned{req.getCutPhase()})));
  }
}

void CentralServer::onCutRestore(const zmq::message_t& from, std::uint64_t number,
                                 capnp::List<proto::ExchangeMark>::Reader marks) {
  if (cut_) return refuse(from, failedPrecondition("a cut is under way"));
  if (cfg_.checkpoint_dir.empty()) {
    return refuse(from, failedPrecondition("checkpoints are off (no checkpoint_dir)"));
  }
  const std::string path = cfg_.checkpoint_dir + "/" + cutFileName(number);
  auto loaded = readCheckpointFile(path, store_.paramCount());
  if (!loaded) {
    return refuse(from, Status(loaded.status().code(), "cannot return to shard cut " +
                                                           std::to_string(number) + ": " +
                                                           loaded.status().message()));
  }
  if (Status s = store_.restore(loaded->params, loaded->version); !s) return refuse(from, s);
  restoreOuterOptimizer(*loaded);
  sample_staleness_.restart(loaded->version);
  cached_.reset();  // a snapshot of the version given up must never be served for this one
  cached_version_ = ~0ull;
  inbound_.clear();
  checkpoint_version_ = loaded->version;
  marks_.clear();
  for (auto m : marks) marks_[m.getGroupId()] = m.getSeq();
  cut_keep_ = number;
  newest_cut_ = std::max(newest_cut_, number);
  resumed_from_ = path;
  GSGD_INFO("central PS returned to shard cut " << number << ": " << path << " at version "
                                                << loaded->version);
  OutMessage out = cutAnswer(Status::ok());
  auto d = out.header().getBody().getCheckpointDone();
  d.setVersion(loaded->version);
  d.setPath(path);
  (void)replyTo(sock_, from, std::move(out));
}

void CentralServer::holdDelta(const zmq::message_t& from, std::optional<InMessage> whole,
                              std::optional<PartAssembler> parts) {
  cut_->held.push_back(
      {zmq::message_t(from.data(), from.size()), std::move(whole), std::move(parts)});
  advanceCut();
}

void CentralServer::advanceCut() {
  if (!cut_ || !cut_->frozen || !cut_->committer) return;
  const auto seqOf = [](const HeldDelta& h) {
    const InMessage& m = h.whole ? *h.whole : h.parts->first();
    auto d = m.header().getBody().getDeltaPush();
    return std::pair<std::uint32_t, std::uint64_t>(d.getGroupId(), d.getExchangeSeq());
  };
  // Held deltas inside the cut are merged now, in arrival order; later ones stay held.
  for (auto it = cut_->held.begin(); it != cut_->held.end();) {
    const auto [group, seq] = seqOf(*it);
    const auto target = cut_->target.find(group);
    if (target == cut_->target.end() || seq == 0 || seq > target->second) {
      ++it;
      continue;
    }
    HeldDelta h = std::move(*it);
    it = cut_->held.erase(it);
    if (h.whole) {
      onDeltaPush(h.from, *h.whole);
    } else {
      const TensorView delta = h.parts->view();
      onDeltaPush(h.from, h.parts->first(), &delta, h.parts->sumSquares());
    }
  }
  for (const auto& [group, seq] : cut_->target) {
    const auto mine = marks_.find(group);
    if (mine == marks_.end() || mine->second < seq) return;  // still on the wire
  }
  // Every shard holds the same exchanges now: snapshot, let the deltas flow, write.
  Payload model = currentModel();
  auto optimizer = std::make_shared<const kernels::OptimizerSnapshot>(store_.optimizerState());
  cut_->version = store_.version();
  cut_->run_samples = resumed_samples_ + counters_.samples_applied;
  cut_->marks = marks_;
  cut_->path = cfg_.checkpoint_dir + "/" + cutFileName(cut_->number);
  unfreeze();
  cut_->write = std::async(std::launch::async,
                           [path = cut_->path, v = cut_->version, model, optimizer,
                            dir = cfg_.checkpoint_dir, n = cut_->number, keep = cut_->keep] {
                             Status s = writeCheckpointFile(path, v, *model, optimizer.get());
                             if (!s) return s;
                             // Older cut files go, except the one the manifest still names.
                             for (const auto& w : pruneCutFiles(dir, n, keep))
                               GSGD_WARN("cut: " << w);
                             return s;
                           });
}

void CentralServer::unfreeze() {
  cut_->frozen = false;
  cut_->pause_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - cut_->frozen_at)
          .count();
  std::deque<HeldDelta> held = std::move(cut_->held);
  cut_->held.clear();
  for (auto& h : held) {
    if (h.whole) {
      onDeltaPush(h.from, *h.whole);
    } else {
      const TensorView delta = h.parts->view();
      onDeltaPush(h.from, h.parts->first(), &delta, h.parts->sumSquares());
    }
  }
}

void CentralServer::pollCut(bool wait) {
  if (!cut_) return;
  if (cut_->frozen) {
    if (!wait && std::chrono::steady_clock::now() - cut_->frozen_at < kCutHoldLimit) return;
    GSGD_WARN("cut " << cut_->number << " not taken within " << kCutHoldLimit.count()
                     << " s of the freeze: released");
    unfreeze();
    if (cut_->committer) {
      refuse(*cut_->committer, unavailable("the cut's marks were not reached within " +
                                           std::to_string(kCutHoldLimit.count()) + " s"));
    }
    cut_.reset();
    return;
  }
  if (!cut_->write) return;
  if (!wait && cut_->write->wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  const Status s = cut_->write->get();
  if (s) {
    newest_cut_ = std::max(newest_cut_, cut_->number);
    GSGD_INFO("cut " << cut_->number << " written: " << cut_->path << " (version " << cut_->version
                     << ", deltas held " << cut_->pause_ms << " ms)");
  } else {
    GSGD_ERROR("cut " << cut_->number << " FAILED: " << s.toString());
  }
  OutMessage out = cutAnswer(s);
  auto d = out.header().getBody().getCheckpointDone();
  d.setVersion(cut_->version);
  d.setPath(cut_->path);
  d.setPauseMs(static_cast<float>(cut_->pause_ms));
  d.setRunSamples(cut_->run_samples);
  putMarks(d.initCutMarks(static_cast<unsigned>(cut_->marks.size())), cut_->marks);
  (void)replyTo(sock_, *cut_->committer, std::move(out));
  cut_.reset();
}

}  // namespace groupsgd::centralps
