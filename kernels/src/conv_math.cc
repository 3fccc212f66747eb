#include "conv_math.h"

#include <algorithm>
#include <cassert>

namespace groupsgd::kernels::detail {

void im2col(const float* in, MapShape s, std::size_t k, float* col) {
  const std::size_t ho = s.height - k + 1, wo = s.width - k + 1, c = s.channels;
  const std::size_t row_len = k * k * c;
  for (std::size_t b = 0; b < s.batch; ++b) {
    for (std::size_t oy = 0; oy < ho; ++oy) {
      for (std::size_t ox = 0; ox < wo; ++ox) {
        float* row = col + ((b * ho + oy) * wo + ox) * row_len;
        for (std::size_t ky = 0; ky < k; ++ky) {
          // The k pixels of one patch row are contiguous in NHWC: copy k*C floats at once.
          const float* src = in + ((b * s.height + oy + ky) * s.width + ox) * c;
          std::copy_n(src, k * c, row + ky * k * c);
        }
      }
    }
  }
}

void col2im(const float* col_grad, MapShape s, std::size_t k, float* in_grad) {
  const std::size_t ho = s.height - k + 1, wo = s.width - k + 1, c = s.channels;
  const std::size_t row_len = k * k * c;
  std::fill_n(in_grad, s.size(), 0.0f);
  for (std::size_t b = 0; b < s.batch; ++b) {
    for (std::size_t oy = 0; oy < ho; ++oy) {
      for (std::size_t ox = 0; ox < wo; ++ox) {
        const float* row = col_grad + ((b * ho + oy) * wo + ox) * row_len;
        for (std::size_t ky = 0; ky < k; ++ky) {
          float* dst = in_grad + ((b * s.height + oy + ky) * s.width + ox) * c;
          const float* src = row + ky * k * c;
          for (std::size_t j = 0; j < k * c; ++j) dst[j] += src[j];
        }
      }
    }
  }
}

void maxPool2(const float* in, MapShape s, float* out, std::uint32_t* argmax) {
  const std::size_t ho = s.height / 2, wo = s.width / 2, c = s.channels;
  assert(s.size() <= 0xffffffffu);
  for (std::size_t b = 0; b < s.batch; ++b) {
    for (std::size_t oy = 0; oy < ho; ++oy) {
      for (std::size_t ox = 0; ox < wo; ++ox) {
        const std::size_t o = ((b * ho + oy) * wo + ox) * c;
        const std::size_t i00 = ((b * s.height + 2 * oy) * s.width + 2 * ox) * c;
        const std::size_t corners[4] = {i00, i00 + c, i00 + s.width * c, i00 + s.width * c + c};
        for (std::size_t ch = 0; ch < c; ++ch) {
          std::size_t best = corners[0] + ch;
          for (std::size_t q = 1; q < 4; ++q) {
            if (in[corners[q] + ch] > in[best]) best = corners[q] + ch;
          }
          out[o + ch] = in[best];
          argmax[o + ch] = static_cast<std::uint32_t>(best);
        }
      }
    }
  }
}

void maxPool2Backward(const float* out_grad, const std::uint32_t* argmax, std::size_t out_size,
                      float* in_grad, std::size_t in_size) {
  std::fill_n(in_grad, in_size, 0.0f);
  for (std::size_t j = 0; j < out_size; ++j) in_grad[argmax[j]] += out_grad[j];
}

}  // namespace groupsgd::kernels::detail
