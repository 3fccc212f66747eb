#include "groupsgd/dataset/range_sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using namespace groupsgd::dataset;

TEST_CASE("epochPermutation is a permutation, fixed by (n, seed, epoch), new each epoch") {
  const auto p0 = epochPermutation(1000, 7, 0);
  auto sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
  CHECK(epochPermutation(1000, 7, 0) == p0);
  CHECK(epochPermutation(1000, 7, 1) != p0);
  CHECK(epochPermutation(1000, 8, 0) != p0);
  CHECK(epochPermutation(0, 7, 0).empty());
}

TEST_CASE("RangeSampler draws the held ranges' samples in permutation order across ranges") {
  RangeSampler s(100, 3);
  const auto p0 = epochPermutation(100, 3, 0);
  const auto p1 = epochPermutation(100, 3, 1);
  REQUIRE(s.add({0, 90, 100}));
  REQUIRE(s.add({1, 0, 10}));
  CHECK(s.available() == 20);
  std::vector<std::uint32_t> out;
  s.next(15, &out);
  REQUIRE(out.size() == 15);
  for (int i = 0; i < 10; ++i) CHECK(out[i] == p0[90 + i]);
  for (int i = 0; i < 5; ++i) CHECK(out[10 + i] == p1[i]);
  CHECK(s.available() == 5);
  // Not pushed yet: nothing is trained.
  CHECK(s.takeTrained().empty());
  s.pushed();
  const auto trained = s.takeTrained();
  REQUIRE(trained.size() == 1);
  CHECK(trained[0] == SampleRange{0, 90, 100});
  s.next(15, &out);  // only 5 left: fewer than asked
  CHECK(out.size() == 5);
  CHECK(out[0] == p1[5]);
}

TEST_CASE("RangeSampler rewinds an untrained batch and acknowledges only what was pushed") {
  RangeSampler s(50, 1);
  REQUIRE(s.add({2, 0, 20}));
  std::vector<std::uint32_t> first, again;
  s.next(8, &first);
  s.pushed();
  s.next(8, &first);
  s.rewind();  // that push failed: the same samples come again
  s.next(8, &again);
  CHECK(again == first);
  // Stopping now: 8 trained of the range, the rest goes back.
  const auto all = s.takeAllTrained();
  REQUIRE(all.size() == 1);
  CHECK(all[0] == SampleRange{2, 0, 8});
  CHECK(s.heldRanges() == 0);
  CHECK(s.available() == 0);
}

TEST_CASE("RangeSampler refuses a range that does not fit the training set") {
  RangeSampler s(10, 0);
  CHECK_FALSE(s.add({0, 5, 11}));
  CHECK_FALSE(s.add({0, 5, 5}));
  CHECK(s.add({0, 0, 10}));
}
