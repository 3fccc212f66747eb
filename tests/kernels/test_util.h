// Shared helpers for the kernels tests: seeded random buffers, separable toy problems, and
// the round trip of an enum's names.
// Thread rule: plain functions.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

namespace groupsgd::kernels::testing {

inline std::vector<float> randomVector(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A labelled toy data set: P below derives from it and names kDim, kClasses and kCount.
struct LabelledPoints {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

// P::kCount points in [0,1]^P::kDim over P::kClasses classes: class c is
// `bright` on the features j % kClasses == c and `dark` on the rest, plus uniform noise in
// [-noise, noise]. Point i is of class i % kClasses, or of one drawn from the generator when
// draw_class.
template <typename P>
P separablePoints(std::uint64_t seed, float noise, float bright, float dark, bool draw_class) {
  P p;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> jitter(-noise, noise);
  for (std::size_t i = 0; i < P::kCount; ++i) {
    const auto c = static_cast<std::int32_t>((draw_class ? rng() : i) % P::kClasses);
    p.y.push_back(c);
    for (std::size_t j = 0; j < P::kDim; ++j) {
      p.x.push_back((j % P::kClasses == static_cast<std::size_t>(c) ? bright : dark) + jitter(rng));
    }
  }
  return p;
}

// Every value in `all` parses back from its name; each of `unknown` is refused.
template <typename E, typename All, typename Name, typename Parse>
void checkNamesRoundTrip(const All& all, Name name, Parse parse,
                         std::initializer_list<const char*> unknown) {
  for (E e : all) {
    E parsed{};
    REQUIRE(parse(name(e), &parsed));
    CHECK(parsed == e);
  }
  for (const char* text : unknown) {
    E unused{};
    CHECK_FALSE(parse(text, &unused));
  }
}

}  // namespace groupsgd::kernels::testing
