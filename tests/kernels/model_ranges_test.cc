// oneDimParamRanges against the models themselves: a model's biases start at zero (init)
// and each range is exactly where a zero-initialised 1-D block sits.
#include <doctest/doctest.h>

#include <vector>

#include "groupsgd/kernels/model.h"

using namespace groupsgd::kernels;

TEST_CASE("model: oneDimParamRanges are the biases, inside the parameter vector") {
  struct Case {
    ModelKind kind;
    std::size_t bias_elements;  // sum of the 1-D tensor sizes
  };
  for (const Case& c : {Case{ModelKind::kSoftmax, 10}, Case{ModelKind::kMlp, 256 + 128 + 10},
                        Case{ModelKind::kCnn, 8 + 16 + 10}}) {
    CAPTURE(modelKindName(c.kind));
    auto model = makeModel(c.kind, 784, 10);
    const auto ranges = oneDimParamRanges(c.kind, 784, 10);
    REQUIRE(!ranges.empty());
    std::vector<float> params(model->paramCount());
    model->init(params, 7);
    std::size_t total = 0, prev_end = 0;
    for (const ElementRange& r : ranges) {
      CHECK(r.begin >= prev_end);
      CHECK(r.end <= params.size());
      for (std::size_t i = r.begin; i < r.end; ++i) CHECK(params[i] == 0.0f);  // zero biases
      // The element before a bias belongs to a weight matrix (He/normal init: not zero).
      CHECK(params[r.begin - 1] != 0.0f);
      total += r.end - r.begin;
      prev_end = r.end;
    }
    CHECK(total == c.bias_elements);
    CHECK(ranges.back().end == params.size());  // every layout ends with the last bias
  }
  CHECK(oneDimParamRanges(ModelKind::kCnn, 100, 10).empty());  // 10x10: too small a CNN
}
