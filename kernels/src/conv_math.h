// Convolution helpers for the CNN on [batch][y][x][channel] (NHWC) float maps: im2col and
// its adjoint col2im for a valid k×k convolution with stride 1, and 2×2 max pooling.
// Thread rule: stateless.
#pragma once

#include <cstddef>
#include <cstdint>

namespace groupsgd::kernels::detail {

struct MapShape {
  std::size_t batch, height, width, channels;
  std::size_t size() const { return batch * height * width * channels; }
};

// col gets one row per output pixel (b, oy, ox) with Ho = H-k+1, Wo = W-k+1, and k*k*C
// columns in (ky, kx, c) order: row r holds the input patch that output pixel r sees.
void im2col(const float* in, MapShape shape, std::size_t k, float* col);

// The adjoint: in_grad (zeroed here first) += every patch row of col_grad, scattered back
// to the input pixels it came from.
void col2im(const float* col_grad, MapShape shape, std::size_t k, float* in_grad);

// 2×2 stride-2 max pooling to floor(H/2) × floor(W/2). argmax gets, per output value, the
// index into `in` of the maximum (the first one on ties).
void maxPool2(const float* in, MapShape shape, float* out, std::uint32_t* argmax);

// in_grad (in_size floats, zeroed here first) gets out_grad[j] at argmax[j].
void maxPool2Backward(const float* out_grad, const std::uint32_t* argmax, std::size_t out_size,
                      float* in_grad, std::size_t in_size);

}  // namespace groupsgd::kernels::detail
