#include "groupsgd/dataset/batch.h"

#include <doctest/doctest.h>

#include <vector>

using namespace groupsgd::dataset;

TEST_CASE("gatherBatch: copies the chosen rows scaled to [0,1] with their labels") {
  Dataset d;
  d.count = 3;
  d.rows = 1;
  d.cols = 2;
  d.images = {0, 255, 51, 102, 10, 20};
  d.labels = {7, 8, 9};
  const std::uint32_t idx[] = {2, 0, 2};
  std::vector<float> x(6, -1.0f);
  std::vector<std::int32_t> y(3, -1);
  gatherBatch(d, idx, x.data(), y.data());
  CHECK(x[0] == doctest::Approx(10 / 255.0));
  CHECK(x[1] == doctest::Approx(20 / 255.0));
  CHECK(x[2] == 0.0f);
  CHECK(x[3] == 1.0f);
  CHECK(x[4] == doctest::Approx(10 / 255.0));
  CHECK(y == std::vector<std::int32_t>{9, 7, 9});
}
