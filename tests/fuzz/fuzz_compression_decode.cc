// Fuzz target: the compressed-tensor decoders (dense, fp16, top-k, sign) on any payload for
// several tensor sizes, and the encoders' round trip.
//   byte 0: bits 0-1 the encoding, bit 2 round-trip mode, bits 3-5 a size adjustment
//   bytes 1-2: u16 little-endian tensor size n (decode) or top-k ratio (round trip)
//   the rest: the payload (decode) or float32 values to encode (round trip)
// Oracles: a refused payload leaves the output untouched (the documented contract);
// an accepted dense payload is copied bit for bit, fp16 matches the scalar reference,
// top-k and sign produce finite values; a finite tensor of moderate size always
// round-trips, dense exactly and fp16 as the scalar conversion.
#include <cmath>
#include <cstring>

#include "fuzz_check.h"
#include "groupsgd/kernels/compression.h"

using namespace groupsgd::kernels;

namespace {

constexpr float kSentinel = 12345.0f;

void checkDecode(Encoding e, std::span<const std::uint8_t> payload, std::size_t n) {
  std::vector<float> out(n, kSentinel);
  const KernelStatus s = decode(e, payload, out);
  if (!s.ok()) {
    for (float v : out) FUZZ_CHECK(std::memcmp(&v, &kSentinel, sizeof v) == 0);
    return;
  }
  switch (e) {
    case Encoding::kDense:
      FUZZ_CHECK(payload.size() == 4 * n);
      FUZZ_CHECK(n == 0 || std::memcmp(out.data(), payload.data(), 4 * n) == 0);
      break;
    case Encoding::kFp16:
      FUZZ_CHECK(payload.size() == 2 * n);
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, payload.data() + 2 * i, 2);
        const float want = halfToFloat(h);
        FUZZ_CHECK(std::memcmp(&want, &out[i], sizeof want) == 0);
      }
      break;
    case Encoding::kTopK:
    case Encoding::kSign:
      for (float v : out) FUZZ_CHECK(std::isfinite(v));
      break;
  }
}

void checkRoundTrip(Encoding e, float ratio, std::span<const std::uint8_t> bytes) {
  const std::size_t n = bytes.size() / 4;
  std::vector<float> x(n);
  if (n > 0) std::memcpy(x.data(), bytes.data(), 4 * n);
  bool moderate = true;
  for (float v : x) moderate &= std::isfinite(v) && std::fabs(v) < 1e30f;
  Compressor c(e, n, ratio);
  std::vector<std::uint8_t> payload;
  std::vector<float> out(n);
  for (int round = 0; round < 2; ++round) {  // the second round carries the residual
    c.encode(x, &payload);
    FUZZ_CHECK(payload.size() == c.payloadBytes());
    const KernelStatus s = decode(e, payload, out);
    if (moderate) FUZZ_CHECK(s.ok());
    if (!s.ok()) continue;
    for (std::size_t i = 0; i < n; ++i) {
      float want = x[i];
      if (e == Encoding::kFp16) want = halfToFloat(floatToHalf(x[i]));
      if (e == Encoding::kDense || e == Encoding::kFp16) {
        FUZZ_CHECK(std::memcmp(&want, &out[i], sizeof want) == 0);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const Encoding e = static_cast<Encoding>(data[0] & 3);
  const bool round_trip = (data[0] & 4) != 0;
  const std::size_t adjust = (data[0] >> 3) & 7;
  const std::uint16_t word = static_cast<std::uint16_t>(data[1] | (data[2] << 8));
  std::span<const std::uint8_t> rest(data + 3, size - 3);
  if (round_trip) {
    checkRoundTrip(e, static_cast<float>(word) / 65535.0f, rest);
    return 0;
  }
  // The size the input names, and the size the payload's length implies for each layout
  // (nudged by `adjust`, so near-misses are tried too).
  checkDecode(e, rest, word);
  std::size_t natural = 0;
  switch (e) {
    case Encoding::kDense:
      natural = rest.size() / 4;
      break;
    case Encoding::kFp16:
      natural = rest.size() / 2;
      break;
    case Encoding::kSign:
      natural = rest.size() >= 4 ? (rest.size() - 4) * 8 : 0;
      break;
    case Encoding::kTopK:
      natural = rest.size() >= 4 ? (rest.size() - 4) / 8 + word % 64 : 0;
      break;
  }
  natural = natural >= adjust ? natural - adjust : 0;
  if (natural != word) checkDecode(e, rest, natural);
  return 0;
}
