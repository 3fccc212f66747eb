// The standby's copy of the central PS: built from the primary's snapshot, then advanced
// by each update in version order with the same outer optimizer step the primary took,
// so its model and optimizer state equal the primary's at every acknowledged version.
// An update that does not fit (wrong term, not the next version, wrong size) is refused
// with a clear error and leaves the replica untouched.
// Thread rule: one owning thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "groupsgd/centralps/central_store.h"
#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/status.h"
#include "groupsgd/kernels/optimizer.h"

namespace groupsgd::centralps {

// What a promoted standby's central PS starts from (CentralConfig::replica).
struct ReplicaState {
  std::uint64_t term = 0;  // the primary's incarnation
  std::uint64_t version = 0;
  std::uint64_t run_samples = 0;
  double mean_samples = 0;
  std::vector<float> params;
  kernels::OptimizerSnapshot optimizer;
  std::string head_role;  // the primary's role: all | coordinator
  // The primary coordinator's last state received (kCoordinatorState's JSON text; empty:
  // none): the promoted coordinator starts from it (CoordinatorDeps::followed_state).
  std::string coordinator_state;
  std::uint64_t coordinator_state_age_ms = 0;  // received this long before the takeover
};

class StandbyReplica {
 public:
  // outer, no_decay and shards as the primary's central PS has them (same flags).
  StandbyReplica(kernels::OptimizerConfig outer, std::vector<kernels::ElementRange> no_decay,
                 std::size_t shards)
      : outer_(outer), no_decay_(std::move(no_decay)), shards_(shards) {}

  // Replaces everything with the snapshot. Refused: a snapshot of an older term than the
  // one followed, or an optimizer state that does not fit the outer optimizer.
  Status applySnapshot(const ReplicationMessage& m);
  // The next version. Refused (nothing changed): no snapshot yet, a term other than the
  // snapshot's, a version other than version() + 1, a delta of the wrong size.
  Status applyUpdate(const ReplicationMessage& m);
  // applyUpdate's checks alone: once they pass, applyUpdate(m) cannot fail, so a standby
  // may acknowledge m before its optimizer step (it holds the update either way).
  Status checkUpdate(const ReplicationMessage& m) const;
  // The same with the delta seen in place in its frame (decodeReplication's in_place),
  // not in m.tensor: no copy of it.
  Status applyUpdate(const ReplicationMessage& m, const TensorView& delta);
  Status checkUpdate(const ReplicationMessage& m, const TensorView& delta) const;
  // A heartbeat's term check (older terms are refused).
  Status checkTerm(std::uint64_t term) const;

  bool ready() const { return store_ != nullptr; }
  std::uint64_t term() const { return term_; }
  std::uint64_t version() const { return store_ ? store_->version() : 0; }
  std::uint64_t runSamples() const { return run_samples_; }
  // The state to promote from (copies the model and the optimizer's state).
  ReplicaState state() const;

 private:
  kernels::OptimizerConfig outer_;
  std::vector<kernels::ElementRange> no_decay_;
  std::size_t shards_;
  std::unique_ptr<CentralStore> store_;
  std::uint64_t term_ = 0;
  std::uint64_t run_samples_ = 0;
  double mean_samples_ = 0;
  std::string head_role_;
};

}  // namespace groupsgd::centralps
