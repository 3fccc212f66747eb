#include "groupsgd/kernels/ops.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

using namespace groupsgd::kernels;
using groupsgd::kernels::testing::randomVector;

namespace {

// Odd sizes on purpose: remainders after 4/8/16-wide vector loops, and empty.
const std::size_t kSizes[] = {0, 1, 3, 7, 8, 9, 15, 17, 31, 65, 1000, 4099};
// Over the threading threshold (4M floats) and not a multiple of any chunk alignment.
constexpr std::size_t kBig = (std::size_t{1} << 22) + (std::size_t{1} << 20) + 13;

bool close(float got, double want) { return std::abs(got - want) <= 1e-5 * (1 + std::abs(want)); }

}  // namespace

TEST_CASE("ops: scale, axpy, copy, subtract match a naive loop at odd sizes") {
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    auto x = randomVector(n, 1 + n);
    auto y = randomVector(n, 100 + n);

    auto s = x;
    scale(s, -1.75f);
    for (std::size_t i = 0; i < n; ++i) CHECK(close(s[i], -1.75 * x[i]));

    auto a = y;
    axpy(0.3f, x, a);
    for (std::size_t i = 0; i < n; ++i) CHECK(close(a[i], y[i] + 0.3 * x[i]));

    std::vector<float> c(n, 42.0f);
    copy(x, c);
    CHECK(c == x);

    std::vector<float> d(n, 42.0f);
    subtract(x, y, d);
    for (std::size_t i = 0; i < n; ++i) CHECK(close(d[i], double(x[i]) - y[i]));
  }
}

TEST_CASE("ops: rebase matches a plain loop, with and without a cut, at odd sizes") {
  std::vector<std::size_t> sizes(std::begin(kSizes), std::end(kSizes));
  sizes.push_back(kBig);  // split across threads
  for (std::size_t n : sizes) {
    CAPTURE(n);
    const auto central = randomVector(n, 1 + n), base = randomVector(n, 2 + n),
               cut = randomVector(n, 3 + n), start = randomVector(n, 4 + n);
    auto plain = start, with_cut = start;
    rebase(central, base, {}, plain);
    rebase(central, base, cut, with_cut);
    std::size_t differ = 0;  // the same float operations in the same order: bit for bit
    for (std::size_t i = 0; i < n; ++i) {
      differ += plain[i] != central[i] + (start[i] - base[i]);
      differ += with_cut[i] != central[i] + ((start[i] - base[i]) - cut[i]);
    }
    CHECK(differ == 0);
  }
}

TEST_CASE("ops: subtract and axpy may run in place") {
  auto a = randomVector(37, 5);
  auto b = randomVector(37, 6);
  auto out = a;
  subtract(out, b, out);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(close(out[i], double(a[i]) - b[i]));
}

TEST_CASE("ops: weightedSum matches a naive loop and fully overwrites out") {
  for (std::size_t n : kSizes) {
    for (std::size_t k : {0, 1, 2, 5}) {
      CAPTURE(n);
      CAPTURE(k);
      std::vector<std::vector<float>> store;
      std::vector<std::span<const float>> inputs;
      for (std::size_t i = 0; i < k; ++i) store.push_back(randomVector(n, 10 * n + i));
      for (auto& v : store) inputs.emplace_back(v);
      auto w = randomVector(k, 7 + k);
      std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());  // must be ignored
      weightedSum(inputs, w, out);
      for (std::size_t j = 0; j < n; ++j) {
        double want = 0;
        for (std::size_t i = 0; i < k; ++i) want += double(w[i]) * store[i][j];
        CHECK(close(out[j], want));
      }
    }
  }
}

TEST_CASE("ops: weightedSum of many inputs equals the plain float loop bit for bit") {
  // 8 inputs are one register-held group, 9 and 17 need several; offsets misalign out and
  // the inputs; kBig takes the threaded, streaming-store path.
  for (std::size_t n : {std::size_t{4099}, std::size_t{70'001}, kBig}) {
    for (std::size_t k : {3, 8, 9, 17}) {
      for (std::size_t off : {0, 1}) {
        // Big buffers cost seconds: two combinations cover the threaded streaming path.
        if (n == kBig && !((k == 3 && off == 0) || (k == 9 && off == 1))) continue;
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(off);
        std::vector<std::vector<float>> store;
        std::vector<std::span<const float>> inputs;
        for (std::size_t i = 0; i < k; ++i) store.push_back(randomVector(n + 1, 3 * k + i));
        for (std::size_t i = 0; i < k; ++i)
          inputs.push_back(std::span<const float>(store[i]).subspan(i % 2 ? off : 0, n));
        auto w = randomVector(k, 5 + k);
        std::vector<float> out_store(n + 1, std::numeric_limits<float>::quiet_NaN());
        std::span<float> out(out_store.data() + off, n);
        weightedSum(inputs, w, out);
        std::size_t bad = 0;
        for (std::size_t j = 0; j < n; ++j) {
          float want = w[0] * inputs[0][j];
          for (std::size_t i = 1; i < k; ++i) want += w[i] * inputs[i][j];
          bad += out[j] != want;
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("ops: countNonFinite finds NaN, +Inf and -Inf and nothing else") {
  std::vector<float> x = randomVector(1000, 3);
  CHECK(countNonFinite(x) == 0);
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[499] = std::numeric_limits<float>::infinity();
  x[999] = -std::numeric_limits<float>::infinity();
  x[10] = std::numeric_limits<float>::max();         // finite
  x[11] = std::numeric_limits<float>::denorm_min();  // finite
  x[12] = -0.0f;
  CHECK(countNonFinite(x) == 3);
  CHECK(countNonFinite(std::span<const float>(x).subspan(1, 997)) == 1);
  CHECK(countNonFinite({}) == 0);
}

TEST_CASE("ops: sumSquares accumulates in double, empty is zero") {
  CHECK(sumSquares({}) == 0.0);
  for (std::size_t n : kSizes) {
    auto x = randomVector(n, 50 + n);
    double want = 0;
    for (float v : x) want += double(v) * v;
    CHECK(sumSquares(x) == doctest::Approx(want).epsilon(1e-12));
  }
  // 2^24 + 1 ones: a float accumulator would stall at 2^24.
  std::vector<float> ones((std::size_t{1} << 24) + 1, 1.0f);
  CHECK(sumSquares(ones) == double(ones.size()));
}

TEST_CASE(
    "ops: axpyIfFinite adds and measures like axpy + sumSquares, and stops at a non-finite block") {
  // Sizes on both sides of the 65,536-element block, odd tails included.
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{4099}, std::size_t{65536},
                        std::size_t{65537}, std::size_t{(1u << 20) + 3}}) {
    CAPTURE(n);
    auto x = randomVector(n, 70 + n);
    auto y = randomVector(n, 80 + n);
    auto want = y;
    axpy(3.0f, x, want);
    FiniteAdd r = axpyIfFinite(3.0f, x, y);
    CHECK(r.added == n);
    CHECK(r.squares == sumSquares(x));  // bit for bit: same blocks, same order
    CHECK(y == want);
  }
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (float v : bad) {
    CAPTURE(v);
    const std::size_t n = 3 * 65536 + 11;
    auto x = randomVector(n, 91);
    x[65536 + 5] = v;  // in the second block
    auto y = randomVector(n, 92);
    const auto before = y;
    FiniteAdd r = axpyIfFinite(2.0f, x, y);
    CHECK(r.added == 65536);  // the first block only
    CHECK(r.squares == sumSquares(std::span<const float>(x).first(65536)));
    auto first = before;
    axpy(2.0f, std::span<const float>(x).first(65536), std::span<float>(first).first(65536));
    CHECK(std::equal(y.begin(), y.begin() + 65536, first.begin()));
    CHECK(std::equal(y.begin() + 65536, y.end(), before.begin() + 65536));  // untouched
  }
}

TEST_CASE("ops: storeIfFinite and scaleInto give axpy into zeros without reading y") {
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{65537}, kBig + 5}) {
    CAPTURE(n);
    auto x = randomVector(n, 100 + n);
    std::vector<float> want(n, 0.0f);
    axpy(3.0f, x, want);
    std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());  // never read
    scaleInto(3.0f, x, y);
    CHECK(y == want);
    std::vector<float> z(n, std::numeric_limits<float>::quiet_NaN());
    FiniteAdd r = storeIfFinite(3.0f, x, z);
    CHECK(r.added == n);
    CHECK(r.squares == sumSquares(x));
    CHECK(z == want);
    std::vector<float> s(n + 1, std::numeric_limits<float>::quiet_NaN());  // odd alignment too
    r = storeIfFinite(3.0f, x, std::span<float>(s).subspan(1), /*stream=*/true);
    CHECK(r.added == n);
    CHECK(std::equal(want.begin(), want.end(), s.begin() + 1));
  }
  const std::size_t n = 2 * 65536 + 3;
  auto x = randomVector(n, 111);
  x[65536 + 1] = std::numeric_limits<float>::infinity();
  std::vector<float> y(n, -5.0f);
  FiniteAdd r = storeIfFinite(2.0f, x, y);
  CHECK(r.added == 65536);
  CHECK(y[0] == 2.0f * x[0]);
  CHECK(std::all_of(y.begin() + 65536, y.end(), [](float v) { return v == -5.0f; }));
}

TEST_CASE("ops: buffers over the threading threshold give the same results") {
  auto x = randomVector(kBig, 11);
  auto y = randomVector(kBig, 12);
  auto a = y;
  axpy(2.0f, x, a);
  std::vector<float> d(kBig);
  subtract(a, y, d);
  std::vector<float> c(kBig);
  copy(x, c);
  CHECK(c == x);
  const std::span<const float> ins[] = {x, y};
  const float w[] = {0.5f, -1.0f};
  std::vector<float> ws(kBig, std::numeric_limits<float>::quiet_NaN());
  weightedSum(ins, w, ws);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < kBig; ++i) {
    bad += !close(a[i], y[i] + 2.0 * x[i]) || !close(d[i], 2.0 * x[i]) ||
           !close(ws[i], 0.5 * x[i] - y[i]);
  }
  CHECK(bad == 0);
  scale(c, 0.5f);
  CHECK(c[kBig - 1] == x[kBig - 1] * 0.5f);

  double want = 0;
  for (float v : x) want += double(v) * v;  // sequential double sum: ~1e-10 rounding at 5M
  CHECK(sumSquares(x) == doctest::Approx(want).epsilon(1e-9));
  x[kBig - 1] = std::numeric_limits<float>::quiet_NaN();
  x[kBig / 2] = -std::numeric_limits<float>::infinity();
  CHECK(countNonFinite(x) == 2);
}
