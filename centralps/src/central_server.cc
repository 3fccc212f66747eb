#include "groupsgd/centralps/central_server.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/centralps/run_samples_record.h"
#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/allow_list.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::centralps {

Result<std::unique_ptr<CentralServer>> CentralServer::create(zmq::context_t& ctx, CentralConfig cfg,
                                                             const std::string& bind_endpoint) {
  std::vector<float> initial;
  if (cfg.replica) {
    initial = cfg.replica->params;  // a promoted standby: its replica, never a checkpoint
  } else if (!cfg.initial.empty()) {
    initial = std::move(cfg.initial);
  } else if (cfg.param_count != 0) {
    initial.assign(cfg.param_count, 0.0f);
  } else {
    auto model = kernels::makeModel(cfg.model);
    initial.resize(model->paramCount());
    model->init(initial, cfg.seed);
  }
  std::optional<LoadedCheckpoint> resume;
  if (!cfg.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cfg.checkpoint_dir, ec);
    if (ec) {
      return unavailable("cannot create checkpoint directory " + cfg.checkpoint_dir + ": " +
                         ec.message());
    }
    auto loaded = cfg.replica      ? Result<LoadedCheckpoint>(notFound("replica"))
                  : cfg.cut_resume ? readCheckpointFile(cfg.cut_resume->file, initial.size())
                                   : loadNewestCheckpoint(cfg.checkpoint_dir, initial.size());
    if (!loaded && cfg.cut_resume) {
      return Status(loaded.status().code(),
                    "cannot resume from the shard cut: " + loaded.status().message());
    }
    if (loaded) {
      resume = std::move(*loaded);
    } else if (loaded.status().code() != Code::kNotFound) {
      return Status(loaded.status().code(), "cannot resume: " + loaded.status().message());
    }
  }
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(cfg.curve));
  if (!sock) return sock.status();
  auto ep = bindSocket(*sock, bind_endpoint);
  if (!ep) return ep.status();
  std::unique_ptr<ReplicationLink> link;
  if (!cfg.replication.listen.empty()) {
    auto made = ReplicationLink::create(ctx, cfg.replication, cfg.curve);
    if (made) {
      link = std::move(*made);
    } else if (cfg.replica) {
      // A promoted head must serve: the run depends on it now. Without its link it runs
      // as a promoted head without replication_listen does (no new standby can join).
      GSGD_ERROR("promoted head: " << made.status().toString()
                                   << ": running WITHOUT a standby (none can follow this head)");
    } else {
      return made.status();
    }
  }
  std::optional<zmq::socket_t> fence;
  if (!cfg.fence_endpoint.empty()) {
    SocketOptions o = clientSocketOptions(cfg.curve);
    o.linger_ms = 0;
    auto made = makeSocket(ctx, zmq::socket_type::dealer, o);
    if (!made) return made.status();
    made->set(zmq::sockopt::immediate, 1);  // nothing queued for a primary that is gone
    GSGD_RETURN_IF_ERROR(connectSocket(*made, cfg.fence_endpoint));
    fence = std::move(*made);
  }
  std::unique_ptr<CentralServer> server(
      new CentralServer(std::move(*sock), *ep, cfg, std::move(initial)));
  server->link_ = std::move(link);
  server->fence_ = std::move(fence);
  if (server->cfg_.replica) server->startFromReplica(*server->cfg_.replica);
  if (resume) {
    GSGD_RETURN_IF_ERROR(server->store_.restore(resume->params, resume->version));
    server->restoreOuterOptimizer(*resume);
    server->sample_staleness_.restart(resume->version);
    server->resumed_from_ = resume->path;
    server->checkpoint_version_ = resume->version;
    server->skipped_checkpoints_ = resume->warnings;
    if (!resume->warnings.empty()) {
      GSGD_WARN("the newest checkpoint was unusable ("
                << resume->warnings.front() << "); " << resume->warnings.size()
                << " file(s) skipped: resuming from the previous "
                << "good one, " << resume->path << " (version " << resume->version << ")");
    }
    GSGD_INFO("central PS resumed from " << resume->path << " at version " << resume->version);
    if (server->cfg_.cut_resume) {
      // The cut's own record: the run's samples at the cut, the marks all shards share.
      server->resumed_samples_ = server->cfg_.cut_resume->run_samples;
      server->marks_ = server->cfg_.cut_resume->marks;
      server->cut_keep_ = server->cfg_.cut_resume->number;
      server->newest_cut_ = server->cfg_.cut_resume->number;
    } else {
      server->resumeRunSamples(resume->version);
    }
  }
  return server;
}

std::string CentralServer::replicationEndpoint() const {
  return link_ ? link_->endpoint() : std::string();
}

CentralServer::CentralServer(zmq::socket_t sock, std::string endpoint, CentralConfig cfg,
                             std::vector<float> initial)
    : sock_(std::move(sock)),
      endpoint_(std::move(endpoint)),
      cfg_(std::move(cfg)),
      store_(std::move(initial), cfg_.outer, cfg_.shards, cfg_.outer_no_decay),
      sample_staleness_(cfg_.staleness.max_staleness) {}

void CentralServer::startFromReplica(const ReplicaState& replica) {
  (void)store_.restore(replica.params, replica.version);  // sizes equal: built from it
  if (replica.optimizer.buffers > 0) {
    if (Status s = store_.restoreOptimizerState(replica.optimizer); !s) {
      GSGD_WARN("the replica's outer optimizer state does not fit: " << s.message());
    } else {
      outer_state_restored_ = true;
    }
  }
  sample_staleness_.restart(replica.version);
  resumed_samples_ = replica.run_samples;
  mean_samples_ = replica.mean_samples;
  checkpoint_version_ = 0;
  promoted_ = true;
  resumed_from_ = "standby replica of incarnation " + std::to_string(replica.term);
  cfg_.replica.reset();  // the copy is in the store now
  GSGD_INFO("central PS promoted from its standby replica at version "
            << replica.version << " (" << replica.run_samples << " samples behind it)");
}

void CentralServer::setTerm(std::uint64_t term) {
  term_ = term;
  if (link_) link_->setTerm(term);
}

ReplicationMessage CentralServer::replicationSnapshot() {
  ReplicationMessage m;
  m.kind = ReplicationKind::kSnapshot;
  m.term = term_;
  m.version = store_.version();
  m.run_samples = resumed_samples_ + counters_.samples_applied + pending_samples_;
  m.mean_samples = mean_samples_;
  m.param_count = store_.paramCount();
  m.tensor.resize(store_.paramCount());
  store_.snapshotInto(m.tensor);
  m.optimizer = store_.optimizerState();
  m.text = cfg_.head_role;
  return m;
}

Status CentralServer::replicateMerge(const TensorView& delta, float weight, std::uint64_t samples,
                                     std::uint64_t tau, bool in_parts, bool* applied) {
  *applied = false;
  ReplicationMessage m;
  m.kind = ReplicationKind::kUpdate;
  m.version = store_.version() + 1;
  m.run_samples = resumed_samples_ + counters_.samples_applied + samples;
  m.samples = samples;
  m.tau = tau;
  m.weight = weight;
  m.mean_samples = mean_samples_;
  m.param_count = store_.paramCount();
  const auto snapshot = [this] { return replicationSnapshot(); };
  GSGD_RETURN_IF_ERROR(link_->ship(std::move(m), &delta, snapshot));
  if (!link_->awaiting()) return Status::ok();  // asynchronous or alone: nothing to wait for
  // While the standby receives and acknowledges the update, apply it here, where an
  // apply can be undone cheaply: a stateless outer optimizer (a copy of the model undoes
  // it) and a reply in one message (sent only after the acknowledgement). Otherwise
  // wait first, then apply (the reply in parts goes out while the model is merged).
  if (in_parts || kernels::optimizerStateBuffers(cfg_.outer.kind) > 0) {
    return link_->awaitAck(snapshot);
  }
  undo_.resize(store_.paramCount());
  store_.snapshotInto(undo_);
  const kernels::OptimizerSnapshot steps = store_.optimizerState();  // no buffers: its step count
  GSGD_RETURN_IF_ERROR(store_.applyDelta(delta, weight, {}));
  pending_samples_ = samples;  // a snapshot taken during the wait includes this version
  Status acked = link_->awaitAck(snapshot);
  pending_samples_ = 0;
  if (!acked) {
    // Not committed: the model goes back to the version before (no standby has this one).
    if (Status s = store_.restore(undo_, store_.version() - 1); !s) return s;
    if (Status s = store_.restoreOptimizerState(steps); !s) return s;
    return acked;
  }
  *applied = true;
  return Status::ok();
}

void CentralServer::pollFence() {
  if (!fence_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_fence_ < std::chrono::milliseconds(500)) return;
  last_fence_ = now;
  ReplicationMessage m;
  m.kind = ReplicationKind::kSuperseded;
  m.term = term_;
  m.version = store_.version();
  m.text = "the head at " + endpoint_ + " took over";
  (void)sendFrames(*fence_, encodeReplication(m));  // not connected: dropped, tried again
  while (true) {                                    // answers (a refusal) are only drained
    zmq::pollitem_t item{fence_->handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(0));
    if ((item.revents & ZMQ_POLLIN) == 0) break;
    (void)recvFrames(*fence_);
  }
}

void CentralServer::restoreOuterOptimizer(const LoadedCheckpoint& resume) {
  const kernels::OptimizerSnapshot& saved = resume.optimizer;
  const char* configured = kernels::optimizerKindName(cfg_.outer.kind);
  if (saved.buffers == 0) {
    if (kernels::optimizerStateBuffers(cfg_.outer.kind) > 0) {
      GSGD_INFO("checkpoint " << resume.path << " holds no outer optimizer state (format "
                              << resume.format << "): the " << configured
                              << " state starts at zero");
    }
    return;
  }
  if (Status s = store_.restoreOptimizerState(saved); !s) {
    GSGD_WARN("checkpoint " << resume.path << ": not restoring the outer optimizer state ("
                            << s.message() << "); the " << configured << " state starts at zero");
    return;
  }
  outer_state_restored_ = true;
  GSGD_INFO("central PS restored the outer " << configured << " state at step " << saved.steps);
}

void CentralServer::resumeRunSamples(std::uint64_t version) {
  auto at = runSamplesAt(cfg_.checkpoint_dir, version);
  if (!at) {
    GSGD_WARN("no run-samples record for checkpoint version "
              << version << " (" << at.status().message()
              << "): learning-rate schedules start again from 0 samples");
    return;
  }
  resumed_samples_ = at->samples;
  if (at->version != version) {
    GSGD_WARN("no run-samples record for checkpoint version "
              << version << "; using version " << at->version << "'s (" << at->samples
              << " samples): learning-rate schedules repeat the samples in between");
  } else {
    GSGD_INFO("the run had applied " << at->samples << " samples at version " << version);
  }
}

void CentralServer::run(const std::atomic<bool>& stop) {
  log::setThreadTag("central");
  GSGD_INFO("central PS serving " << store_.paramCount() << " parameters on " << endpoint_);
  // The standby's heartbeats go out every quarter of its loss bound.
  const auto tick = std::chrono::milliseconds(
      link_ ? std::clamp<std::uint32_t>(cfg_.replication.loss_ms / 4, 5, 100) : 100);
  const auto snapshot = [this] { return replicationSnapshot(); };
  while (!stop.load()) {
    if (link_) link_->poll(store_.version(), snapshot);
    pollFence();
    auto readable = pollReadable(sock_, tick);
    if (!readable) {
      GSGD_ERROR(readable.status().message());
      break;
    }
    pollCheckpoint(false);
    pollBestWrite(false);
    pollCut(false);
    if (!*readable) continue;
    auto routed = recvRouted(sock_);
    if (!routed) {
      ++counters_.bad_messages;
      continue;
    }
    try {
      handle(routed->routing_id, std::move(routed->frames));
    } catch (const std::exception& e) {  // never let a bad message end the server
      refuse(routed->routing_id, internalError(std::string("request failed: ") + e.what()));
    }
  }
  pollCheckpoint(true);  // a periodic write may still be running: finish it...
  pollCheckpoint(true);  // ...then write the final version if it is newer
  while (!best_writes_.empty()) pollBestWrite(true);
  pollCut(true);
  if (link_) GSGD_INFO("standby link at the end: " << link_->json().dump());
  GSGD_INFO("central PS stopped at version " << store_.version());
}

void CentralServer::startCheckpoint(std::optional<zmq::message_t> requester) {
  if (checkpoint_) {  // one write at a time; a requester waits for the running one
    if (requester) checkpoint_->requesters.push_back(std::move(*requester));
    return;
  }
  if (cfg_.checkpoint_dir.empty()) {
    if (requester)
      refuse(*requester, failedPrecondition("checkpoints are off (no checkpoint_dir)"));
    return;
  }
  CheckpointJob job;
  job.version = store_.version();
  job.started = std::chrono::steady_clock::now();
  job.path = cfg_.checkpoint_dir + "/" + checkpointFileName(job.version);
  if (requester) job.requesters.push_back(std::move(*requester));
  // The write (fsyncs included) runs off the serving thread on an immutable snapshot of
  // the model and of the outer optimizer's state (copied here, between two deltas).
  Payload model = currentModel();
  auto optimizer = std::make_shared<const kernels::OptimizerSnapshot>(store_.optimizerState());
  job.done = std::async(std::launch::async, [dir = cfg_.checkpoint_dir, v = job.version, model,
                                             optimizer, keep = cfg_.checkpoint_keep,
                                             samples =
                                                 resumed_samples_ + counters_.samples_applied] {
    Status s = writeCheckpoint(dir, v, *model, keep, nullptr, optimizer.get());
    if (!s) return s;
    // The checkpoint is durable; a failed record only costs a resume its exact position.
    if (Status r = recordRunSamples(dir, v, samples, keep); !r) {
      GSGD_WARN("checkpoint version " << v << " written, its run samples not: " << r.toString());
    }
    return s;
  });
  checkpoint_ = std::move(job);
}

void CentralServer::pollCheckpoint(bool wait) {
  const auto now = std::chrono::steady_clock::now();
  if (!checkpoint_ && !cfg_.checkpoint_dir.empty() && store_.version() > checkpoint_version_) {
    const bool by_versions =
        cfg_.checkpoint_every_versions > 0 &&
        store_.version() - checkpoint_version_ >= cfg_.checkpoint_every_versions;
    const bool by_time =
        cfg_.checkpoint_interval_s > 0 &&
        std::chrono::duration<double>(now - last_checkpoint_).count() >= cfg_.checkpoint_interval_s;
    const bool backing_off = !wait && now < checkpoint_retry_at_;
    if ((by_versions || by_time || wait) && !backing_off)
      startCheckpoint(std::nullopt);  // wait: at shutdown
  }
  if (!checkpoint_) return;
  if (!wait && checkpoint_->done.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return;
  const Status s = checkpoint_->done.get();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              checkpoint_->started)
                        .count();
  last_checkpoint_ = std::chrono::steady_clock::now();
  if (s) {
    checkpoint_version_ = checkpoint_->version;
    checkpoint_retry_s_ = 0;
    GSGD_INFO("checkpoint " << checkpoint_->path << " written in " << ms << " ms");
  } else {
    ++checkpoint_failures_;
    checkpoint_retry_s_ = std::min(60.0, checkpoint_retry_s_ == 0 ? 1.0 : 2 * checkpoint_retry_s_);
    checkpoint_retry_at_ =
        last_checkpoint_ +
        std::chrono::milliseconds(static_cast<std::int64_t>(checkpoint_retry_s_ * 1000));
    // Loud and never retried silently: the old checkpoint stays the newest valid one.
    GSGD_ERROR("checkpoint of version " << checkpoint_->version << " FAILED: " << s.toString()
                                        << " (the newest good one is version "
                                        << checkpoint_version_ << "; next periodic attempt in "
                                        << checkpoint_retry_s_ << " s)");
  }
  for (const auto& to : checkpoint_->requesters) {
    OutMessage out(cfg_.limits.job_id, 0);
    out.header().setModelVersion(checkpoint_->version);
    auto d = out.header().getBody().initCheckpointDone();
    d.setOk(s.isOk());
    d.setError(s.isOk() ? "" : s.toString());
    d.setVersion(checkpoint_->version);
    d.setPath(checkpoint_->path);
    d.setBytes(s.isOk() ? kCheckpointHeaderBytes + store_.paramCount() * sizeof(float) : 0);
    d.setDurationMs(static_cast<float>(ms));
    (void)replyTo(sock_, to, std::move(out));
  }
  checkpoint_.reset();
}

void CentralServer::keepServed() {
  const std::uint64_t v = store_.version();
  if (!served_.empty() && served_.back().first == v) return;
  served_.emplace_back(v, currentModel());  // shares the reply's snapshot: no copy
  if (served_.size() > kServedKept) served_.pop_front();
}

void CentralServer::onBestRequest(const zmq::message_t& from, std::uint64_t version,
                                  const std::string& path) {
  if (!cfg_.keep_best) return refuse(from, failedPrecondition("keep_best is off"));
  if (path.empty()) return refuse(from, invalidArgument("a best-model request needs a path"));
  auto it = std::find_if(served_.begin(), served_.end(),
                         [version](const auto& s) { return s.first == version; });
  if (it == served_.end()) {
    return refuse(from, notFound("version " + std::to_string(version) +
                                 " is no longer held (evaluators were served " +
                                 std::to_string(kServedKept) + " newer ones since)"));
  }
  BestWrite w;
  w.version = version;
  w.path = path;
  w.model = it->second;
  w.requester = zmq::message_t(from.data(), from.size());
  best_writes_.push_back(std::move(w));
  if (best_writes_.size() == 1) pollBestWrite(false);  // starts it
}

void CentralServer::pollBestWrite(bool wait) {
  if (best_writes_.empty()) return;
  BestWrite& w = best_writes_.front();
  if (!w.done.valid()) {  // not started: the previous write of the same path is done
    w.started = std::chrono::steady_clock::now();
    w.done = std::async(std::launch::async, [path = w.path, v = w.version, model = w.model] {
      return writeCheckpointFile(path, v, *model);
    });
  }
  if (!wait && w.done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  const Status s = w.done.get();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w.started)
          .count();
  if (s) {
    GSGD_INFO("best model (version " << w.version << ") written to " << w.path);
  } else {
    GSGD_ERROR("best model (version " << w.version << ") not written: " << s.toString());
  }
  OutMessage out(cfg_.limits.job_id, 0);
  out.header().setModelVersion(w.version);
  auto d = out.header().getBody().initCheckpointDone();
  d.setOk(s.isOk());
  d.setError(s.isOk() ? "" : s.toString());
  d.setVersion(w.version);
  d.setPath(w.path);
  d.setBytes(s.isOk() ? kCheckpointHeaderBytes + w.model->size() * sizeof(float) : 0);
  d.setDurationMs(static_cast<float>(ms));
  (void)replyTo(sock_, w.requester, std::move(out));
  best_writes_.pop_front();
  if (!best_writes_.empty()) pollBestWrite(false);  // start the next
}

void CentralServer::refuse(const zmq::message_t& from, const Status& why) {
  ++counters_.bad_messages;
  GSGD_WARN("refused a request: " << why.toString());
  (void)replyTo(sock_, from, makeErrorReply(cfg_.limits.job_id, 0, why));
}

Payload CentralServer::currentModel() {
  if (cached_version_ != store_.version()) {
    cached_.reset();  // its buffer may be reused at once if no reply holds it
    auto buf = snapshot_pool_.acquire(store_.paramCount());
    store_.snapshotInto(*buf);
    cached_ = std::move(buf);
    cached_version_ = store_.version();
  }
  return cached_;
}

OutMessage CentralServer::modelReply(std::uint64_t version, bool applied, const std::string& reason,
                                     std::uint64_t tau, float weight, Payload model) const {
  OutMessage out(cfg_.limits.job_id, 0);
  out.header().setModelVersion(version);
  auto r = out.header().getBody().initModelReply();
  r.setApplied(applied);
  r.setReason(reason);
  r.setStaleness(tau);
  r.setWeight(weight);
  r.setRunSamples(resumed_samples_ + counters_.samples_applied);
  out.addTensor(std::move(model));
  return out;
}

void CentralServer::sendModel(const zmq::message_t& from, bool applied, const std::string& reason,
                              std::uint64_t tau, float weight) {
  Payload model = currentModel();
  Status s = replyInParts(
      sock_, from, modelReply(store_.version(), applied, reason, tau, weight, std::move(model)),
      cfg_.part_bytes);
  if (!s) GSGD_WARN("could not send the model: " << s.toString());
}

void CentralServer::handle(const zmq::message_t& from, std::vector<zmq::message_t>&& frames) {
  const std::string key = frames.empty() ? std::string() : peerKey(frames.front());
  if (Status allowed = checkPeerAllowed(cfg_.curve.allowed, key); !allowed) {
    return refuse(from, allowed);
  }
  auto msg = decodeMessage(std::move(frames), cfg_.limits);
  if (!msg) return refuse(from, msg.status());
  if (!key.empty() && !cfg_.curve.hasDaemonRights(key) && msg->kind() != BodyKind::FETCH) {
    return refuse(from, permissionDenied(std::string("only a groupsgd daemon may send '") +
                                         bodyKindName(msg->kind()) + "' (key " + key + ")"));
  }
  if (msg->part()) return onPart(from, std::move(*msg));
  switch (msg->kind()) {
    case BodyKind::DELTA_PUSH:
      if (holdingDeltas()) return holdDelta(from, std::move(*msg), std::nullopt);
      return onDeltaPush(from, *msg);
    case BodyKind::FETCH:
      if (cfg_.keep_best && msg->header().getBody().getFetch().getEvaluation()) keepServed();
      return sendModel(from, false, "", 0, 0.0f);
    case BodyKind::CHECKPOINT_REQUEST: {
      auto req = msg->header().getBody().getCheckpointRequest();
      if (req.getCutPhase() != 0) return onCutRequest(from, *msg);
      if (req.getBest()) {
        return onBestRequest(from, req.getBestVersion(), req.getBestPath().cStr());
      }
      return startCheckpoint(zmq::message_t(from.data(), from.size()));
    }
    case BodyKind::CENTRAL_STATS_QUERY: {
      OutMessage out(cfg_.limits.job_id, 0);
      out.header().setModelVersion(store_.version());
      CentralStats st = counters_;
      st.version = store_.version();
      st.checkpoint_version = checkpoint_version_;
      st.checkpoint_failures = checkpoint_failures_;
      if (link_) {
        st.standby_configured = true;
        st.standby_attached = link_->attached();
        st.standby_acked_version = link_->ackedVersion();
        st.standby_losses = link_->losses();
        st.standby_max_lag = link_->maxLag();
        st.standby_ack_wait_ms = static_cast<float>(link_->meanAckWaitMs());
        st.standby_alone = link_->alone();
        st.uncommitted_deltas = uncommitted_;
      }
      st.mean_staleness = counters_.updates_applied == 0
                              ? 0.0f
                              : static_cast<float>(counters_.staleness_sum /
                                                   static_cast<double>(counters_.updates_applied));
      toProto(st, out.header().getBody().initCentralStats());
      (void)replyTo(sock_, from, std::move(out));
      return;
    }
    default:
      return refuse(from, invalidArgument(std::string("the central PS does not serve '") +
                                          bodyKindName(msg->kind()) + "'"));
  }
}

void CentralServer::onPart(const zmq::message_t& from, InMessage&& msg) {
  const std::string sender(static_cast<const char*>(from.data()), from.size());
  if (msg.kind() != BodyKind::DELTA_PUSH) {
    return refuse(from, invalidArgument(std::string("'") + bodyKindName(msg.kind()) +
                                        "' is not sent in parts"));
  }
  auto it = inbound_.find(sender);
  if (msg.part()->index == 0) {
    if (it != inbound_.end()) {
      ++counters_.bad_messages;  // an unfinished delta from this connection: given up
      GSGD_WARN("a delta in parts was left unfinished; dropped");
      inbound_.erase(it);
    }
    it = inbound_.emplace(sender, PartAssembler()).first;
  } else if (it == inbound_.end()) {
    ++counters_.bad_messages;  // the rest of a delta already refused: dropped unanswered
    return;
  }
  // Each part is checked (order, size) and its squares summed as it arrives.
  Status s = it->second.add(std::move(msg));
  if (!s) {
    inbound_.erase(it);
    return refuse(from, s);
  }
  if (!it->second.complete()) return;
  PartAssembler whole = std::move(it->second);
  inbound_.erase(it);
  if (holdingDeltas()) return holdDelta(from, std::nullopt, std::move(whole));
  const TensorView delta = whole.view();
  onDeltaPush(from, whole.first(), &delta, whole.sumSquares());
}

void CentralServer::onDeltaPush(const zmq::message_t& from, const InMessage& msg,
                                const TensorView* assembled, double assembled_squares) {
  auto h = msg.header();
  auto body = h.getBody().getDeltaPush();
  noteExchange(body.getGroupId(), body.getExchangeSeq());
  // Checked and applied in place in the received frames: no model-sized copy.
  Result<TensorView> delta = checkDelta(msg, assembled);
  if (!delta) return refuse(from, delta.status());
  const std::uint64_t samples = body.getSamples();
  // Not finite iff an element is not; summed part by part on arrival when in parts.
  const double squares = assembled != nullptr ? assembled_squares : sumSquares(*delta);
  const std::uint64_t tau = store_.version() - h.getModelVersion();
  if (const std::string reason = whyNotMerge(*delta, squares, tau); !reason.empty()) {
    ++counters_.updates_refused;
    counters_.samples_refused += samples;
    GSGD_WARN("refused delta of group " << body.getGroupId() << ": " << reason);
    return sendModel(from, false, reason, tau, 0.0f);
  }
  const MergeWeight w = mergeWeight(h.getModelVersion(), tau, samples, body.getSteps());
  const bool in_parts =
      cfg_.part_bytes > 0 && store_.paramCount() * sizeof(float) > cfg_.part_bytes;
  bool applied_here = false;  // by replicateMerge, while the standby took the update
  if (link_) {
    // Synchronous: the standby has this version before anyone is told it is committed.
    if (Status s = replicateMerge(*delta, w.weight, samples, tau, in_parts, &applied_here); !s) {
      ++counters_.updates_refused;
      counters_.samples_refused += samples;
      // Once a second at most: groups retry every step while no standby is attached.
      ++uncommitted_;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_uncommitted_log_ >= std::chrono::seconds(1)) {
        GSGD_WARN("delta of group " << body.getGroupId() << " not applied: " << s.message() << " ("
                                    << uncommitted_ << " so far)");
        last_uncommitted_log_ = now;
      }
      return sendModel(from, false, s.message(), tau, 0.0f);
    }
  }
  Status applied = applied_here ? Status::ok()
                   : in_parts   ? mergeAndStreamReply(from, *delta, w.weight, tau)
                                : store_.applyDelta(*delta, w.weight, {});
  if (!applied) return refuse(from, applied);
  countMerged(samples, tau);
  GSGD_DEBUG("applied delta of group " << body.getGroupId() << " tau=" << tau << " (weighted as "
                                       << w.tau << ") weight=" << w.weight
                                       << " v=" << store_.version());
  if (promoted_ && !first_applied_logged_) {
    first_applied_logged_ = true;
    const double wall =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    char at[32];
    std::snprintf(at, sizeof at, "%.3f", wall);
    GSGD_INFO("takeover: first update applied on the promoted head at unix time "
              << at << " (version " << store_.version() << ")");
  }
  if (!in_parts) sendModel(from, true, "", tau, w.weight);
}

Result<TensorView> CentralServer::checkDelta(const InMessage& msg,
                                             const TensorView* assembled) const {
  auto h = msg.header();
  auto body = h.getBody().getDeltaPush();
  if (h.getSenderId() != body.getGroupId()) {
    return permissionDenied("sender " + std::to_string(h.getSenderId()) + " pushes for group " +
                            std::to_string(body.getGroupId()));
  }
  if (h.getModelVersion() > store_.version()) {
    return invalidArgument("delta based on version " + std::to_string(h.getModelVersion()) +
                           ", newer than the central version " + std::to_string(store_.version()));
  }
  if (msg.tensorCount() != 1) return invalidArgument("a delta carries one tensor");
  return viewReceivedTensor(msg, assembled, store_.paramCount());
}

std::string CentralServer::whyNotMerge(const TensorView& delta, double squares, std::uint64_t tau) {
  const double norm = std::sqrt(squares);
  if (!std::isfinite(squares)) {
    ++counters_.bad_messages;
    return std::to_string(countNonFinite(delta)) + " non-finite values in the delta";
  }
  if (norm > cfg_.max_delta_norm) {
    ++counters_.bad_messages;
    return "delta norm " + std::to_string(norm) + " over the bound " +
           std::to_string(cfg_.max_delta_norm);
  }
  if (tau > cfg_.staleness.max_staleness) {
    return "staleness " + std::to_string(tau) + " over the bound " +
           std::to_string(cfg_.staleness.max_staleness) + "; resynchronise";
  }
  return "";
}

CentralServer::MergeWeight CentralServer::mergeWeight(std::uint64_t base_version, std::uint64_t tau,
                                                      std::uint64_t samples, std::uint32_t steps) {
  // The weight's tau: versions, or (default) the samples merged since the delta's base in
  // units of a mean delta, so a small group's delta merged in between costs a big group
  // little (docs/architecture.md, "The central merge").
  MergeWeight w;
  w.tau = static_cast<double>(tau);
  if (cfg_.staleness.measure == StalenessMeasure::kSamples) {
    w.tau = sample_staleness_.tau(base_version).value_or(w.tau);
  }
  w.weight = stalenessWeight(cfg_.staleness, w.tau);
  if (cfg_.sample_weighting && samples > 0) {
    // Per group step, so a delta that covers several steps (an exchange was still in
    // flight, or K > 1) is not mistaken for a big group.
    const double n = static_cast<double>(samples) / std::max<std::uint32_t>(1, steps);
    mean_samples_ = mean_samples_ == 0 ? n : 0.9 * mean_samples_ + 0.1 * n;
    w.weight *= static_cast<float>(std::min(1.0, n / mean_samples_));
  }
  return w;
}

Status CentralServer::mergeAndStreamReply(const zmq::message_t& from, const TensorView& delta,
                                          float weight, std::uint64_t tau) {
  // Each reply part goes out as soon as its range of the new version is applied and
  // copied into the new snapshot, while the rest is still being applied.
  const std::size_t count = store_.paramCount();
  cached_.reset();  // its buffer may be reused at once if no reply holds it
  std::shared_ptr<std::vector<float>> next = snapshot_pool_.acquire(count);
  const std::size_t per = partElementsFor(count, cfg_.part_bytes);
  OutMessage reply = modelReply(store_.version() + 1, true, "", tau, weight, next);
  std::uint32_t sent = 0;
  auto on_applied = [&](std::size_t offset, std::size_t n) {
    store_.copyRange(offset, std::span<float>(*next).subspan(offset, n));
    const std::size_t copied = offset + n;
    while (sent < reply.partCount(per) &&
           std::min<std::size_t>(count, (sent + 1) * per) <= copied) {
      Status s = sendFrames(sock_, reply.partFrames(sent++, per), &from);
      if (!s) GSGD_WARN("could not send the model: " << s.toString());
    }
  };
  GSGD_RETURN_IF_ERROR(store_.applyDelta(delta, weight, on_applied));
  cached_ = std::move(next);  // the new version's snapshot, already made
  cached_version_ = store_.version();
  return Status::ok();
}

void CentralServer::countMerged(std::uint64_t samples, std::uint64_t tau) {
  ++counters_.updates_applied;
  counters_.samples_applied += samples;
  sample_staleness_.merged(store_.version(), samples);
  counters_.staleness_sum += static_cast<double>(tau);
  counters_.max_staleness = std::max(counters_.max_staleness, tau);
}

}  // namespace groupsgd::centralps
