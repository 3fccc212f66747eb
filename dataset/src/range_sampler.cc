#include "groupsgd/dataset/range_sampler.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <random>
#include <utility>

#include "shuffle.h"

namespace groupsgd::dataset {

std::vector<std::uint32_t> epochPermutation(std::size_t n, std::uint64_t seed,
                                            std::uint64_t epoch) {
  assert(n <= std::size_t{std::numeric_limits<std::uint32_t>::max()} + 1);
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  // The salt keeps these apart from the shard shuffles (salted by shard index).
  std::mt19937_64 rng(detail::mixSeed(seed, 0x5eed0000'00000000ull + epoch));
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[detail::uniformBelow(rng, i)]);
  return order;
}

RangeSampler::RangeSampler(std::size_t dataset_size, std::uint64_t seed)
    : size_(dataset_size), seed_(seed) {}

Status RangeSampler::add(const SampleRange& r) {
  if (r.begin >= r.end || r.end > size_) {
    return invalidArgument("sample range [" + std::to_string(r.begin) + ", " +
                           std::to_string(r.end) + ") of epoch " + std::to_string(r.epoch) +
                           " does not fit a training set of " + std::to_string(size_));
  }
  held_.push_back({r, r.begin, r.begin});
  return Status::ok();
}

std::uint64_t RangeSampler::available() const {
  std::uint64_t n = 0;
  for (const Held& h : held_) n += h.range.end - h.drawn;
  return n;
}

const std::vector<std::uint32_t>& RangeSampler::permutation(std::uint64_t epoch) {
  auto it = perms_.find(epoch);
  if (it == perms_.end()) it = perms_.emplace(epoch, epochPermutation(size_, seed_, epoch)).first;
  return it->second;
}

void RangeSampler::next(std::size_t batch, std::vector<std::uint32_t>* out) {
  out->clear();
  for (Held& h : held_) {
    if (out->size() == batch) break;
    if (h.drawn == h.range.end) continue;
    const auto& perm = permutation(h.range.epoch);
    const std::uint64_t take = std::min<std::uint64_t>(batch - out->size(), h.range.end - h.drawn);
    out->insert(out->end(), perm.begin() + static_cast<std::ptrdiff_t>(h.drawn),
                perm.begin() + static_cast<std::ptrdiff_t>(h.drawn + take));
    h.drawn += take;
  }
}

void RangeSampler::pushed() {
  for (Held& h : held_) h.pushed = h.drawn;
}

void RangeSampler::rewind() {
  for (Held& h : held_) h.drawn = h.pushed;
}

std::vector<SampleRange> RangeSampler::takeTrained() {
  std::vector<SampleRange> done;
  while (!held_.empty() && held_.front().pushed == held_.front().range.end) {
    done.push_back(held_.front().range);
    held_.pop_front();
  }
  forgetUnusedPermutations();
  return done;
}

std::vector<SampleRange> RangeSampler::takeAllTrained() {
  std::vector<SampleRange> done;
  for (const Held& h : held_) {
    if (h.pushed > h.range.begin) done.push_back({h.range.epoch, h.range.begin, h.pushed});
  }
  held_.clear();
  perms_.clear();
  return done;
}

void RangeSampler::forgetUnusedPermutations() {
  for (auto it = perms_.begin(); it != perms_.end();) {
    const std::uint64_t e = it->first;
    const bool used =
        std::any_of(held_.begin(), held_.end(), [e](const Held& h) { return h.range.epoch == e; });
    it = used ? std::next(it) : perms_.erase(it);
  }
}

}  // namespace groupsgd::dataset
