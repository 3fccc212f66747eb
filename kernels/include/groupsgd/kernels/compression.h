// Gradient compression codecs: dense float32, fp16, top-k sparsification and scaled sign,
// the latter two with error feedback. The byte layouts are written up in docs/kernels.md;
// all multi-byte fields are little-endian (the only byte order this code builds for).
// Thread rule: encodedBytes/decode are stateless and reentrant. A Compressor owns the
// residual of one sender for one tensor; one thread at a time per instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "groupsgd/kernels/kernel_status.h"

namespace groupsgd::kernels {

enum class Encoding { kDense, kFp16, kTopK, kSign };

// Names are "dense", "fp16", "topk", "sign"; parse returns false on anything else.
bool parseEncoding(std::string_view text, Encoding* out);
const char* encodingName(Encoding encoding);

// Number of entries top-k sends for n values: round(ratio*n), at least 1 and at most n
// (0 when n is 0). ratio is clamped to [0, 1].
std::size_t topKCount(std::size_t n, float ratio);

// Exact payload size of an n-value tensor:
//   dense 4n, fp16 2n, topk 4 + 8*topKCount(n, ratio), sign 4 + ceil(n/8).
// ratio matters for topk only.
std::size_t encodedBytes(Encoding encoding, std::size_t n, float ratio);

// Decodes payload into out (out.size() is the tensor size, agreed out of band).
// Validates everything: the length must be exactly what the encoding implies for out.size()
// (kInvalidArgument otherwise); top-k count <= n, indices in range and strictly increasing,
// top-k values finite, the sign scale finite and >= 0, sign padding bits zero (kDataLoss
// otherwise). On failure out is left untouched. Dense and fp16 carry NaN/Inf through as
// they are (as a NaN in an uncompressed tensor would be): callers check countNonFinite.
// Top-k writes zeros at the entries it does not carry.
KernelStatus decode(Encoding encoding, std::span<const std::uint8_t> payload, std::span<float> out);

// Encodes successive values of one n-float tensor for one sender.
// dense and fp16 are stateless. topk and sign use error feedback: with the residual r,
//   v = x + r;  payload = C(v);  r = v - decode(C(v))
// so what compression drops in one step is sent in later ones. If v holds a NaN or Inf the
// payload carries it (decode then rejects topk and sign payloads) and r is reset to zero,
// so one bad step does not poison the following ones.
class Compressor {
 public:
  // ratio is the top-k fraction (e.g. 0.01); ignored by the other encodings.
  Compressor(Encoding encoding, std::size_t n, float ratio = 0.01f);

  // x.size() must be n (assert). out is resized to exactly encodedBytes(...) and reused
  // across calls, so passing the same vector each step does not allocate.
  void encode(std::span<const float> x, std::vector<std::uint8_t>* out);

  // Zeroes the residual.
  void reset();

  Encoding encoding() const { return encoding_; }
  std::size_t size() const { return n_; }
  float ratio() const { return ratio_; }
  std::size_t payloadBytes() const { return encodedBytes(encoding_, n_, ratio_); }
  // The error-feedback residual: n values for top-k and sign, empty for dense and fp16
  // (they keep none).
  std::span<const float> residual() const { return residual_; }

 private:
  void encodeTopK(std::vector<std::uint8_t>* out);
  void encodeSign(std::vector<std::uint8_t>* out);

  Encoding encoding_;
  std::size_t n_;
  float ratio_;
  std::vector<float> residual_;        // topk and sign only; holds v during encode
  std::vector<float> magnitude_;       // topk scratch: |v| with NaN as +Inf
  std::vector<float> select_;          // topk scratch: magnitudes reordered by nth_element
  std::vector<std::uint32_t> picked_;  // topk scratch: chosen indices
};

// IEEE 754 binary16 conversions, round to nearest even; subnormals exact; Inf kept; a NaN
// stays a NaN with its sign and (top) payload bits, made quiet in both directions.
std::uint16_t floatToHalf(float value);
float halfToFloat(std::uint16_t bits);

}  // namespace groupsgd::kernels
