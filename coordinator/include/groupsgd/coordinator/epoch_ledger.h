// The epoch ledger of data_allocation ranges (docs/protocol.md, "Sample ranges"): epoch
// e's permutation of the training set is cut into chunks that trainers claim as they go,
// so fast trainers take more chunks and every epoch visits every sample once whatever
// the speeds. A trainer's next claim acknowledges what it trained. What a trainer held
// when it died (or was quarantined, or left without saying) is issued again: at least
// once across failures, exactly once otherwise. Positions only: the ledger never sees a
// permutation. Thread rule: one thread (the coordinator's loop).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/sample_range.h"
#include "groupsgd/common/status.h"

namespace groupsgd::coordinator {

using LedgerRange = SampleRange;  // positions [begin, end) of one epoch's permutation

struct EpochCoverage {
  std::uint64_t epoch = 0;
  std::uint64_t acknowledged = 0;  // distinct positions trained and acknowledged
  std::uint64_t duplicates = 0;    // positions issued again after a holder vanished
                                   // without saying (it may have trained them)
  std::uint64_t returned = 0;      // positions handed back untrained and issued again
};

class EpochLedger {
 public:
  // chunk: positions per range handed out (> 0).
  explicit EpochLedger(std::uint64_t chunk);

  // acks: ranges `worker` trained, each starting where a range it holds starts and ending
  // at or before that range's end (others are ignored and counted: a worker declared dead
  // that comes back). done: the worker stops; what it holds beyond acks goes back
  // untrained and nothing is granted. Otherwise the next range for it. The first claim
  // fixes the training set size; a claim stating another size is refused.
  Result<std::optional<LedgerRange>> claim(std::uint64_t worker, std::uint64_t dataset_size,
                                           const std::vector<LedgerRange>& acks, bool done);
  // The worker vanished without saying what it trained (declared dead, quarantined, left
  // without a final claim): its ranges are issued again and count as duplicates. Returns
  // the positions released.
  std::uint64_t release(std::uint64_t worker);

  std::uint64_t datasetSize() const { return size_; }
  std::uint64_t chunk() const { return chunk_; }
  std::uint64_t heldBy(std::uint64_t worker) const;
  std::uint64_t staleAcks() const { return stale_acks_; }
  // Every epoch begun so far, oldest first.
  std::vector<EpochCoverage> epochs() const;
  // The run summary's "epochs": [{epoch, samples, acknowledged, coverage, duplicates,
  // returned, finished}] (finished: every position acknowledged).
  nlohmann::json summary() const;

  // What a checkpoint keeps (ledger_record.h): the training set size, where fresh ranges
  // are cut, the ranges to issue again, what is held, and each epoch's counts.
  nlohmann::json state() const;
  // A restarted head's ledger from state(): what the previous head's trainers held is
  // issued again first and counted as duplicates (they may have trained it). DataLoss when
  // the state is malformed. chunk as the constructor's.
  static Result<EpochLedger> fromState(const nlohmann::json& state, std::uint64_t chunk);

 private:
  std::optional<LedgerRange> next();
  void giveBack(const LedgerRange& r);

  std::uint64_t chunk_;
  std::uint64_t size_ = 0;                                  // 0 = no claim yet
  std::uint64_t cut_epoch_ = 0;                             // the epoch fresh ranges are cut from
  std::uint64_t cut_pos_ = 0;                               // its next uncut position
  std::set<LedgerRange> reissue_;                           // issued first, oldest epoch first
  std::map<std::uint64_t, std::vector<LedgerRange>> held_;  // by worker
  std::map<std::uint64_t, EpochCoverage> epochs_;
  std::uint64_t stale_acks_ = 0;
};

}  // namespace groupsgd::coordinator
