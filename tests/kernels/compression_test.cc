#include "groupsgd/kernels/compression.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/ops.h"
#include "test_util.h"

using namespace groupsgd::kernels;
using groupsgd::kernels::testing::randomVector;

namespace {

using Code = KernelStatus::Code;
using Bytes = std::vector<std::uint8_t>;

constexpr Encoding kAllEncodings[] = {Encoding::kDense, Encoding::kFp16, Encoding::kTopK,
                                      Encoding::kSign};

void putU32(Bytes& b, std::size_t at, std::uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void putF32(Bytes& b, std::size_t at, float v) { std::memcpy(b.data() + at, &v, 4); }

// A top-k payload built by hand: count, indices, values.
Bytes topkPayload(const std::vector<std::uint32_t>& idx, const std::vector<float>& val) {
  Bytes b(4 + 8 * idx.size());
  putU32(b, 0, static_cast<std::uint32_t>(idx.size()));
  for (std::size_t j = 0; j < idx.size(); ++j) {
    putU32(b, 4 + 4 * j, idx[j]);
    putF32(b, 4 + 4 * idx.size() + 4 * j, val[j]);
  }
  return b;
}

}  // namespace

TEST_CASE("compression: encoding names round-trip and unknown names are refused") {
  testing::checkNamesRoundTrip<Encoding>(kAllEncodings, encodingName, parseEncoding, {"gzip", ""});
}

TEST_CASE("compression: payload sizes follow the documented layouts") {
  CHECK(encodedBytes(Encoding::kDense, 1000, 0.01f) == 4000);
  CHECK(encodedBytes(Encoding::kFp16, 1000, 0.01f) == 2000);
  CHECK(encodedBytes(Encoding::kTopK, 1000, 0.01f) == 4 + 8 * 10);
  CHECK(encodedBytes(Encoding::kSign, 1000, 0.01f) == 4 + 125);
  CHECK(encodedBytes(Encoding::kSign, 1001, 0.01f) == 4 + 126);
  CHECK(topKCount(0, 0.01f) == 0);
  CHECK(topKCount(10, 0.01f) == 1);  // at least one
  CHECK(topKCount(10, 5.0f) == 10);  // at most n
  CHECK(topKCount(100000, 0.01f) == 1000);
  CHECK(topKCount(10, 0.1f) == 1);  // 0.1f*10 is a hair above 1: rounded, not ceiled
  for (Encoding e : kAllEncodings) {
    Compressor c(e, 777, 0.05f);
    Bytes out;
    c.encode(randomVector(777, 1), &out);
    CHECK(out.size() == encodedBytes(e, 777, 0.05f));
    CHECK(out.size() == c.payloadBytes());
  }
}

TEST_CASE("compression: fp16 conversion matches the bit-exact reference values") {
  CHECK(floatToHalf(0.0f) == 0x0000);
  CHECK(floatToHalf(-0.0f) == 0x8000);
  CHECK(floatToHalf(1.0f) == 0x3c00);
  CHECK(floatToHalf(-2.0f) == 0xc000);
  CHECK(floatToHalf(65504.0f) == 0x7bff);   // largest finite
  CHECK(floatToHalf(65519.99f) == 0x7bff);  // below the tie: stays finite
  CHECK(floatToHalf(65520.0f) == 0x7c00);   // the tie rounds to even = Inf
  CHECK(floatToHalf(1e6f) == 0x7c00);
  CHECK(floatToHalf(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(floatToHalf(0x1p-14f) == 0x0400);         // smallest normal
  CHECK(floatToHalf(0x1p-24f) == 0x0001);         // smallest subnormal
  CHECK(floatToHalf(0x1p-25f) == 0x0000);         // tie between 0 and 2^-24: even
  CHECK(floatToHalf(0x1.8p-25f) == 0x0001);       // above the tie
  CHECK(floatToHalf(0x3p-25f) == 0x0002);         // 1.5 * 2^-24: tie -> even (2)
  CHECK(floatToHalf(0x1.ffcp-15f) == 0x0400);     // subnormal rounding into normal
  CHECK(floatToHalf(1.0f + 0x1p-11f) == 0x3c00);  // tie -> even (down)
  CHECK(floatToHalf(1.0f + 0x3p-11f) == 0x3c02);  // tie -> even (up)
  CHECK(floatToHalf(1e-10f) == 0x0000);
  const std::uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  const std::uint16_t snan = floatToHalf(std::bit_cast<float>(0xff800001u));  // payload only
  CHECK((snan & 0xfe00) == 0xfe00);  // negative, quietened: still a NaN
  CHECK(std::isnan(halfToFloat(0x7e00)));
  CHECK(halfToFloat(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(halfToFloat(0x0001) == 0x1p-24f);
  CHECK(halfToFloat(0x03ff) == 0x3ffp-24f);
  CHECK(std::signbit(halfToFloat(0x8000)));
}

TEST_CASE("compression: every half value survives half -> float -> half") {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = halfToFloat(static_cast<std::uint16_t>(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      REQUIRE(std::isnan(f));
      REQUIRE((floatToHalf(f) | 0x0200) == (h | 0x0200));  // payload kept, made quiet
    } else {
      REQUIRE(floatToHalf(f) == h);
    }
  }
}

TEST_CASE("compression: the bulk fp16 codec is bit-identical to floatToHalf/halfToFloat") {
  // Decode: every half.
  Bytes all(2 * 65536);
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    all[2 * h] = static_cast<std::uint8_t>(h);
    all[2 * h + 1] = static_cast<std::uint8_t>(h >> 8);
  }
  std::vector<float> decoded(65536);
  REQUIRE(decode(Encoding::kFp16, all, decoded).ok());
  std::size_t bad = 0;
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    bad += std::bit_cast<std::uint32_t>(decoded[h]) !=
           std::bit_cast<std::uint32_t>(halfToFloat(static_cast<std::uint16_t>(h)));
  }
  CHECK(bad == 0);
  // Encode: every half value, its float neighbours and the rounding midpoints around it, plus
  // random bit patterns (all exponents, NaN payloads included).
  std::vector<float> x;
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const std::uint32_t f =
        std::bit_cast<std::uint32_t>(halfToFloat(static_cast<std::uint16_t>(h)));
    for (std::uint32_t d : {0u, 1u, 2u, 0xfffu, 0x1000u, 0x1001u}) {
      x.push_back(std::bit_cast<float>(f + d));
      x.push_back(std::bit_cast<float>(f - d));
    }
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 1'000'000; ++i) x.push_back(std::bit_cast<float>(std::uint32_t(rng())));
  Compressor c(Encoding::kFp16, x.size());
  Bytes payload;
  c.encode(x, &payload);
  bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint16_t got;
    std::memcpy(&got, payload.data() + 2 * i, 2);
    bad += got != floatToHalf(x[i]);
  }
  CHECK(bad == 0);
}

#if defined(__FLT16_MAX__)
TEST_CASE("compression: fp16 conversion agrees with the compiler's _Float16 rounding") {
  std::mt19937 rng(11);
  for (int i = 0; i < 2'000'000; ++i) {
    // Random bit patterns cover every exponent, including subnormals and overflow.
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const auto want = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    CAPTURE(f);
    REQUIRE(floatToHalf(f) == want);
  }
}
#endif

TEST_CASE("compression: fp16 round trip is within 2^-11 relative in the normal range") {
  std::vector<float> x = randomVector(10'001, 3, -60000.0f, 60000.0f);
  auto small = randomVector(1000, 4, -1e-3f, 1e-3f);
  x.insert(x.end(), small.begin(), small.end());
  Compressor c(Encoding::kFp16, x.size());
  Bytes payload;
  c.encode(x, &payload);
  std::vector<float> y(x.size());
  REQUIRE(decode(Encoding::kFp16, payload, y).ok());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) < 0x1p-14f) {
      CHECK(std::fabs(y[i] - x[i]) <= 0x1p-25f);  // subnormal: half an ulp of 2^-24
    } else {
      const double rel = std::fabs(double(y[i]) - x[i]) / std::fabs(x[i]);
      worst = std::max(worst, rel);
    }
  }
  CHECK(worst <= 0x1p-11);
  MESSAGE("fp16 worst relative error ", worst);
}

TEST_CASE("compression: dense is exact and carries NaN through") {
  std::vector<float> x = randomVector(33, 5);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  Compressor c(Encoding::kDense, x.size());
  Bytes payload;
  c.encode(x, &payload);
  std::vector<float> y(x.size());
  REQUIRE(decode(Encoding::kDense, payload, y).ok());
  CHECK(std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
}

TEST_CASE("compression: top-k sends exactly the k largest magnitudes, indices ascending") {
  const std::size_t n = 10'000;
  std::vector<float> x = randomVector(n, 6, -1.0f, 1.0f);
  Compressor c(Encoding::kTopK, n, 0.01f);
  Bytes payload;
  c.encode(x, &payload);
  std::uint32_t k;
  std::memcpy(&k, payload.data(), 4);
  REQUIRE(k == 100);
  std::vector<float> mags(n);
  for (std::size_t i = 0; i < n; ++i) mags[i] = std::fabs(x[i]);
  std::vector<float> sorted = mags;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const float kth = sorted[k - 1];
  std::vector<float> y(n, 123.0f);
  REQUIRE(decode(Encoding::kTopK, payload, y).ok());
  std::size_t sent = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (mags[i] >= kth) {
      CHECK(y[i] == x[i]);
      CHECK(c.residual()[i] == 0.0f);
      ++sent;
    } else {
      CHECK(y[i] == 0.0f);
      CHECK(c.residual()[i] == x[i]);
    }
  }
  CHECK(sent == k);
  std::uint32_t prev = 0;
  for (std::uint32_t j = 0; j < k; ++j) {
    std::uint32_t i;
    std::memcpy(&i, payload.data() + 4 + 4 * j, 4);
    if (j > 0) CHECK(i > prev);
    prev = i;
  }
}

namespace {

// Decodes a top-k payload of x and checks it holds exactly the k largest magnitudes (ties
// at the k-th broken towards lower indices).
void checkExactTopK(const std::vector<float>& x, float ratio) {
  const std::size_t n = x.size(), k = topKCount(n, ratio);
  Compressor c(Encoding::kTopK, n, ratio);
  Bytes payload;
  c.encode(x, &payload);
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  std::vector<float> want(n, 0.0f), got(n);
  for (std::size_t j = 0; j < k; ++j) want[order[j]] = x[order[j]];
  REQUIRE(decode(Encoding::kTopK, payload, got).ok());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += got[i] != want[i];
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("compression: top-k is exact on large tensors, whatever the sample guesses") {
  const std::size_t n = 200'003;
  SUBCASE("random values") { checkExactTopK(randomVector(n, 41), 0.01f); }
  SUBCASE("large values only where the strided sample never looks") {
    // The sample reads every (n/4096)-th element; make exactly those the largest, so for
    // k = 10% too few values reach the bound guessed from them and the exact fallback must
    // take over (for k = 1% the guess still holds).
    std::vector<float> x = randomVector(n, 42, 0.5f, 1.0f);
    for (std::size_t i = 0; i < n; i += n / 4096) x[i] = 2.0f + static_cast<float>(i) * 1e-6f;
    checkExactTopK(x, 0.01f);
    checkExactTopK(x, 0.1f);
  }
  SUBCASE("all equal: the first k indices") {
    checkExactTopK(std::vector<float>(n, -0.25f), 0.01f);
  }
  SUBCASE("mostly zeros") {
    std::vector<float> x(n, 0.0f);
    for (std::size_t i = 7; i < n; i += 1001) x[i] = static_cast<float>(i % 13) - 6.0f;
    checkExactTopK(x, 0.01f);
  }
}

TEST_CASE("compression: top-k with ties sends exactly k entries, lowest indices first") {
  std::vector<float> x = {1, -3, 3, 0, 3, -3, 2};
  Compressor c(Encoding::kTopK, x.size(), 3.0f / 7.0f);
  Bytes payload;
  c.encode(x, &payload);
  std::vector<float> y(x.size());
  REQUIRE(decode(Encoding::kTopK, payload, y).ok());
  CHECK(y == std::vector<float>{0, -3, 3, 0, 3, 0, 0});
}

TEST_CASE("compression: sign sends mean |v| with the signs of v") {
  std::vector<float> x = {1, -2, 3, -4, 0, 6, -7, 8, 9, -10, 11};
  Compressor c(Encoding::kSign, x.size());
  Bytes payload;
  c.encode(x, &payload);
  REQUIRE(payload.size() == 4 + 2);
  float scale;
  std::memcpy(&scale, payload.data(), 4);
  CHECK(scale == doctest::Approx(61.0 / 11));
  CHECK(payload[4] == 0b01001010);  // elements 1, 3, 6 negative
  CHECK(payload[5] == 0b00000010);  // element 9 negative; padding zero
  std::vector<float> y(x.size());
  REQUIRE(decode(Encoding::kSign, payload, y).ok());
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(y[i] == (x[i] < 0 ? -scale : scale));
    CHECK(c.residual()[i] == doctest::Approx(x[i] - y[i]));
  }
}

TEST_CASE("compression: error feedback conserves the sum of the inputs (topk and sign)") {
  for (Encoding e : {Encoding::kTopK, Encoding::kSign}) {
    CAPTURE(std::string(encodingName(e)));
    const std::size_t n = 2049, steps = 50;
    Compressor c(e, n, 0.01f);
    std::vector<double> sent(n, 0.0), input(n, 0.0);
    std::vector<float> y(n);
    Bytes payload;
    for (std::size_t s = 0; s < steps; ++s) {
      std::vector<float> x = randomVector(n, 100 + s, -1.0f, 1.0f);
      c.encode(x, &payload);
      REQUIRE(decode(e, payload, y).ok());
      for (std::size_t i = 0; i < n; ++i) {
        input[i] += x[i];
        sent[i] += y[i];
      }
    }
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(sent[i] + c.residual()[i] - input[i]));
    }
    MESSAGE(std::string(encodingName(e)),
            ": worst |sum decoded + residual - sum inputs| = ", worst);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("compression: a non-finite input is sent, rejected by decode, and clears the residual") {
  for (Encoding e : {Encoding::kTopK, Encoding::kSign}) {
    CAPTURE(std::string(encodingName(e)));
    const std::size_t n = 300;
    Compressor c(e, n, 0.01f);
    Bytes payload;
    c.encode(randomVector(n, 1), &payload);
    std::vector<float> bad = randomVector(n, 2);
    bad[17] = std::numeric_limits<float>::quiet_NaN();
    c.encode(bad, &payload);
    std::vector<float> y(n, 5.0f);
    const KernelStatus st = decode(e, payload, y);
    CHECK(st.code == Code::kDataLoss);
    CHECK(std::count(y.begin(), y.end(), 5.0f) == static_cast<long>(n));  // untouched
    CHECK(countNonFinite(c.residual()) == 0);
    CHECK(sumSquares(c.residual()) == 0.0);
  }
}

TEST_CASE("compression: decode rejects malformed top-k payloads") {
  std::vector<float> out(10, 7.0f);
  auto expect = [&](const Bytes& payload, Code code, const char* fragment) {
    const KernelStatus st = decode(Encoding::kTopK, payload, out);
    CAPTURE(st.message);
    CHECK(st.code == code);
    CHECK(st.message.find(fragment) != std::string::npos);
    CHECK(std::count(out.begin(), out.end(), 7.0f) == 10);  // untouched
  };
  expect(topkPayload({1, 10}, {1, 2}), Code::kDataLoss, "out of range");
  expect(topkPayload({3, 2}, {1, 2}), Code::kDataLoss, "strictly increasing");
  expect(topkPayload({3, 3}, {1, 2}), Code::kDataLoss, "strictly increasing");
  expect(topkPayload({1, 2}, {1, std::numeric_limits<float>::quiet_NaN()}), Code::kDataLoss,
         "not finite");
  expect(topkPayload({1, 2}, {std::numeric_limits<float>::infinity(), 1}), Code::kDataLoss,
         "not finite");
  Bytes too_many = topkPayload({0}, {1});
  putU32(too_many, 0, 11);
  expect(too_many, Code::kDataLoss, "exceeds");
  Bytes short_payload = topkPayload({1, 2}, {1, 2});
  short_payload.pop_back();
  expect(short_payload, Code::kInvalidArgument, "must be");
  Bytes long_payload = topkPayload({1, 2}, {1, 2});
  long_payload.push_back(0);
  expect(long_payload, Code::kInvalidArgument, "must be");
  expect(Bytes{1, 0}, Code::kInvalidArgument, "must be");
  // A well-formed one decodes, zero elsewhere; k = 0 is legal.
  REQUIRE(decode(Encoding::kTopK, topkPayload({0, 9}, {1.5f, -2}), out).ok());
  CHECK(out == std::vector<float>{1.5f, 0, 0, 0, 0, 0, 0, 0, 0, -2});
  REQUIRE(decode(Encoding::kTopK, topkPayload({}, {}), out).ok());
  CHECK(sumSquares(out) == 0.0);
}

TEST_CASE("compression: decode rejects payloads of the wrong length for every encoding") {
  std::vector<float> out(13);
  for (Encoding e : kAllEncodings) {
    CAPTURE(std::string(encodingName(e)));
    Bytes good(encodedBytes(e, out.size(), 0.1f), 0);
    if (e == Encoding::kTopK) good = topkPayload({4}, {1});
    CHECK(decode(e, good, out).ok());
    Bytes shorter(good.begin(), good.end() - 1), longer = good;
    longer.push_back(0);
    CHECK(decode(e, shorter, out).code == Code::kInvalidArgument);
    CHECK(decode(e, longer, out).code == Code::kInvalidArgument);
    CHECK(decode(e, {}, out).code == Code::kInvalidArgument);
  }
  std::vector<float> empty;
  CHECK(decode(Encoding::kDense, {}, empty).ok());
}

TEST_CASE("compression: decode rejects a bad sign scale and set padding bits") {
  std::vector<float> out(13, 7.0f);
  Bytes p(4 + 2, 0);
  putF32(p, 0, 0.5f);
  CHECK(decode(Encoding::kSign, p, out).ok());
  for (float bad : {-0.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    putF32(p, 0, bad);
    CHECK(decode(Encoding::kSign, p, out).code == Code::kDataLoss);
  }
  putF32(p, 0, 0.5f);
  p[5] = 0x20;  // bit 13: past the last element
  const KernelStatus st = decode(Encoding::kSign, p, out);
  CHECK(st.code == Code::kDataLoss);
  CHECK(st.message.find("padding") != std::string::npos);
}

namespace {

// Ten classes in [0,1]^100: class c is bright on features j % 10 == c, plus noise.
struct Separable : testing::LabelledPoints {
  static constexpr std::size_t kDim = 100, kClasses = 10, kCount = 400;
};

// Plain SGD on the softmax model; the gradient goes through encode/decode first.
float trainSoftmax(const Separable& prob, Encoding e, float ratio, std::size_t steps) {
  auto m = makeModel(ModelKind::kSoftmax, Separable::kDim, Separable::kClasses);
  std::vector<float> params(m->paramCount()), grad(params.size()), sent(params.size());
  m->init(params, 5);
  Compressor c(e, params.size(), ratio);
  Bytes payload;
  constexpr std::size_t kBatch = 20;
  constexpr float kLr = 0.5f;
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t off = (s * kBatch) % Separable::kCount;
    m->lossAndGrad(params, prob.x.data() + off * Separable::kDim, prob.y.data() + off, kBatch,
                   grad);
    c.encode(grad, &payload);
    REQUIRE(decode(e, payload, sent).ok());
    axpy(-kLr, sent, params);
  }
  return m->lossAndGrad(params, prob.x.data(), prob.y.data(), Separable::kCount, grad);
}

}  // namespace

TEST_CASE("compression: top-k 1% with error feedback trains softmax close to uncompressed") {
  const Separable prob =
      testing::separablePoints<Separable>(23, 0.15f, 0.7f, 0.3f, /*draw_class=*/true);
  constexpr std::size_t kSteps = 400;
  const float dense = trainSoftmax(prob, Encoding::kDense, 1.0f, kSteps);
  const float topk = trainSoftmax(prob, Encoding::kTopK, 0.01f, kSteps);
  const float sign = trainSoftmax(prob, Encoding::kSign, 1.0f, kSteps);
  const float fp16 = trainSoftmax(prob, Encoding::kFp16, 1.0f, kSteps);
  MESSAGE("final loss after ", kSteps, " steps: dense ", dense, ", topk 1% ", topk, ", sign ", sign,
          ", fp16 ", fp16, " (initial ~", std::log(10.0), ")");
  CHECK(dense < 0.2f);
  CHECK(topk < dense + 0.1f);
  CHECK(sign < dense + 0.1f);
  CHECK(fp16 == doctest::Approx(dense).epsilon(0.01));
}
