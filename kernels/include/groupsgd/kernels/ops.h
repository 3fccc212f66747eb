// Elementwise and reduction kernels on flat float32 buffers (the CPU reference).
// Thread rule: stateless and reentrant. Buffers over ~4M floats are split across
// std::threads internally; results do not depend on the thread count.
#pragma once

#include <cstddef>
#include <span>

namespace groupsgd::kernels {

// Unless said otherwise, an output may be the very same span as an input (in place)
// but must not partially overlap one. Sizes must match: a mismatch aborts with the
// contract named, in every build (docs/kernels.md, "Size contracts").

// x *= a
void scale(std::span<float> x, float a);

// y = a*x (y is only written: what axpy would give into a zero y)
void scaleInto(float a, std::span<const float> x, std::span<float> y);

// y += a*x
void axpy(float a, std::span<const float> x, std::span<float> y);

// out = sum_i weights[i]*inputs[i]; out is fully overwritten (zeros when there are no
// inputs). out must not overlap any input.
void weightedSum(std::span<const std::span<const float>> inputs, std::span<const float> weights,
                 std::span<float> out);

// dst = src
void copy(std::span<const float> src, std::span<float> dst);

// out = a - b
void subtract(std::span<const float> a, std::span<const float> b, std::span<float> out);

// replica = central + (replica - base - cut): a group's replica moved onto a new central
// model, keeping the local progress made since `base` (less `cut`, the delta already sent
// and now inside `central`). cut may be empty (nothing in flight). In one pass, element
// by element with the same float operations as subtract, then axpy(-1, cut), then
// central + that: bit for bit the three-call sequence, without its temporary.
void rebase(std::span<const float> central, std::span<const float> base, std::span<const float> cut,
            std::span<float> replica);

// Number of NaN, +Inf and -Inf entries.
std::size_t countNonFinite(std::span<const float> x);

// sum_i x[i]^2, accumulated in double in a fixed order.
double sumSquares(std::span<const float> x);

// y += a*x for a gradient that must be checked before it counts: in one pass over x
// (each block's squares taken, then the block added while it is still in cache), where
// a separate sumSquares and axpy read x from memory twice. A block holding a NaN or an
// infinity is not added, nor is anything after it. `squares` is sumSquares of the
// elements added (bit for bit sumSquares(x) when all are finite); `added` counts them
// from the front, so added < x.size() means x is not finite and y changed in
// [0, added) only. One thread: meant for message parts, which arrive one at a time.
struct FiniteAdd {
  double squares = 0.0;
  std::size_t added = 0;
};
FiniteAdd axpyIfFinite(float a, std::span<const float> x, std::span<float> y);
// The same storing y = a*x (y only written, never read): a sum's first contribution.
// Where added < x.size(), y[added, size) is left as it was. stream: store around the
// cache (no read for ownership), for a y in a buffer too large to stay cached until read.
FiniteAdd storeIfFinite(float a, std::span<const float> x, std::span<float> y, bool stream = false);

}  // namespace groupsgd::kernels
