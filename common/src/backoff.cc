#include "groupsgd/common/backoff.h"

#include <algorithm>

namespace groupsgd {

std::chrono::milliseconds backoffDelay(const BackoffPolicy& p, std::uint32_t attempt,
                                       double unit_random) {
  const double initial = static_cast<double>(std::max<std::int64_t>(1, p.initial.count()));
  const double cap = static_cast<double>(std::max(p.max, p.initial).count());
  // Doubling stops at the cap long before 2^attempt could overflow a double.
  double nominal = initial;
  for (std::uint32_t i = 0; i < attempt && nominal < cap; ++i) nominal *= 2;
  nominal = std::min(nominal, cap);
  const double jitter = std::clamp(p.jitter, 0.0, 1.0) * std::clamp(unit_random, 0.0, 1.0);
  return std::chrono::milliseconds(
      std::max<std::int64_t>(1, static_cast<std::int64_t>(nominal * (1.0 - jitter))));
}

Backoff::Backoff(BackoffPolicy p, std::uint64_t seed) : policy_(p), rng_(seed) {}

std::chrono::milliseconds Backoff::next() {
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return backoffDelay(policy_, attempt_++, u);
}

}  // namespace groupsgd
