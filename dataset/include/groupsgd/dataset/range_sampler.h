// Sampling from ranges of per-epoch permutations (daemon key data_allocation ranges,
// docs/protocol.md "Sample ranges"): the coordinator hands a trainer ranges of positions
// in epoch e's permutation of the training set; this turns them into sample indices and
// says which positions were trained, for the trainer's next claim to acknowledge.
// Thread rule: a RangeSampler is used by one thread at a time; epochPermutation is pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "groupsgd/common/sample_range.h"
#include "groupsgd/common/status.h"

namespace groupsgd::dataset {

using SampleRange = groupsgd::SampleRange;

// Epoch `epoch`'s permutation of [0, n): the same in every process for (n, seed, epoch).
// Requires n <= 2^32 (assert).
std::vector<std::uint32_t> epochPermutation(std::size_t n, std::uint64_t seed, std::uint64_t epoch);

class RangeSampler {
 public:
  RangeSampler(std::size_t dataset_size, std::uint64_t seed);

  // A granted range, drawn after those already held. Refuses an empty range or one past
  // the end of the training set.
  Status add(const SampleRange& r);
  // Samples held and not drawn yet: claim another range before a batch larger than this.
  std::uint64_t available() const;
  // Replaces *out with the next min(batch, available()) indices.
  void next(std::size_t batch, std::vector<std::uint32_t>* out);
  // Every sample drawn so far was trained (its push was answered).
  void pushed();
  // The samples drawn since the last pushed() were not trained: they are drawn again.
  void rewind();
  // Ranges trained in full, removed from those held: the next claim acknowledges them.
  std::vector<SampleRange> takeTrained();
  // Stopping: what was trained of every held range (whole ranges, and the trained prefix
  // of a partly trained one); nothing is held afterwards (the rest goes back untrained).
  std::vector<SampleRange> takeAllTrained();
  std::size_t datasetSize() const { return size_; }
  std::size_t heldRanges() const { return held_.size(); }

 private:
  struct Held {
    SampleRange range;
    std::uint64_t drawn;   // next position to draw
    std::uint64_t pushed;  // positions before this were trained
  };
  const std::vector<std::uint32_t>& permutation(std::uint64_t epoch);
  void forgetUnusedPermutations();

  std::size_t size_;
  std::uint64_t seed_;
  std::deque<Held> held_;
  std::map<std::uint64_t, std::vector<std::uint32_t>> perms_;  // epochs of held ranges
};

}  // namespace groupsgd::dataset
