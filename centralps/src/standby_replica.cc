#include "groupsgd/centralps/standby_replica.h"

namespace groupsgd::centralps {

Status StandbyReplica::checkTerm(std::uint64_t term) const {
  if (term < term_) {
    return failedPrecondition("replication from term " + std::to_string(term) +
                              " refused: this standby follows term " + std::to_string(term_));
  }
  return Status::ok();
}

Status StandbyReplica::applySnapshot(const ReplicationMessage& m) {
  if (m.kind != ReplicationKind::kSnapshot) return invalidArgument("not a snapshot");
  GSGD_RETURN_IF_ERROR(checkTerm(m.term));
  if (m.tensor.size() != m.param_count) {
    return invalidArgument("snapshot of " + std::to_string(m.tensor.size()) + " values for " +
                           std::to_string(m.param_count) + " parameters");
  }
  auto store = std::make_unique<CentralStore>(m.tensor, outer_, shards_, no_decay_);
  GSGD_RETURN_IF_ERROR(store->restore(m.tensor, m.version));
  if (m.optimizer.buffers > 0 || kernels::optimizerStateBuffers(outer_.kind) > 0) {
    if (Status s = store->restoreOptimizerState(m.optimizer); !s) {
      return invalidArgument("snapshot's outer optimizer state does not fit: " + s.message() +
                             " (are the standby's outer_optimizer flags the primary's?)");
    }
  }
  store_ = std::move(store);
  term_ = m.term;
  run_samples_ = m.run_samples;
  mean_samples_ = m.mean_samples;
  head_role_ = m.text;
  return Status::ok();
}

namespace {

TensorView viewOf(const std::vector<float>& v) {
  TensorView view;
  view.size = v.size();
  if (!v.empty()) view.parts.push_back(v);
  return view;
}

}  // namespace

Status StandbyReplica::applyUpdate(const ReplicationMessage& m) {
  return applyUpdate(m, viewOf(m.tensor));
}

Status StandbyReplica::checkUpdate(const ReplicationMessage& m) const {
  return checkUpdate(m, viewOf(m.tensor));
}

Status StandbyReplica::applyUpdate(const ReplicationMessage& m, const TensorView& delta) {
  GSGD_RETURN_IF_ERROR(checkUpdate(m, delta));
  GSGD_RETURN_IF_ERROR(store_->applyDelta(delta, m.weight));
  run_samples_ = m.run_samples;
  mean_samples_ = m.mean_samples;
  return Status::ok();
}

Status StandbyReplica::checkUpdate(const ReplicationMessage& m, const TensorView& delta) const {
  if (m.kind != ReplicationKind::kUpdate) return invalidArgument("not an update");
  if (!store_) return failedPrecondition("an update before any snapshot");
  if (m.term != term_) {
    return failedPrecondition("update of term " + std::to_string(m.term) +
                              " refused: the snapshot was of term " + std::to_string(term_));
  }
  if (m.version != store_->version() + 1) {
    return failedPrecondition("update to version " + std::to_string(m.version) +
                              " out of order: this standby is at version " +
                              std::to_string(store_->version()));
  }
  if (delta.size != store_->paramCount() || m.param_count != store_->paramCount()) {
    return invalidArgument("update of " + std::to_string(delta.size) + " values for " +
                           std::to_string(store_->paramCount()) + " parameters");
  }
  return Status::ok();
}

ReplicaState StandbyReplica::state() const {
  ReplicaState s;
  s.term = term_;
  s.run_samples = run_samples_;
  s.mean_samples = mean_samples_;
  s.head_role = head_role_;
  if (!store_) return s;
  s.version = store_->version();
  s.params.resize(store_->paramCount());
  store_->snapshotInto(s.params);
  s.optimizer = store_->optimizerState();
  return s;
}

}  // namespace groupsgd::centralps
