// The MLP D-256-128-C on a GPU: the same layers, layout and order of operations as the CPU
// model (mlp_model.cc), with every GEMM through cuBLAS and the elementwise parts in
// model_kernels.cu.
#include <memory>

#include "cuda_model_base.h"
#include "model_kernels.h"

namespace groupsgd::kernels::detail {
namespace {

constexpr std::size_t kH1 = kMlpHidden1;
constexpr std::size_t kH2 = kMlpHidden2;
using gpu::gemm;
constexpr Transpose kNo = Transpose::kNo, kYes = Transpose::kYes;

class CudaMlpModel final : public CudaModelBase {
 public:
  CudaMlpModel(std::size_t input_dim, std::size_t classes)
      : CudaModelBase(makeModel(ModelKind::kMlp, input_dim, classes)),
        d_(input_dim),
        c_(classes),
        o_b1_(kH1 * d_),
        o_w2_(o_b1_ + kH1),
        o_b2_(o_w2_ + kH2 * kH1),
        o_w3_(o_b2_ + kH2),
        o_b3_(o_w3_ + c_ * kH2) {}

 private:
  KernelStatus forward(std::size_t batch, float** logits) override {
    GSGD_GPU_TRY(h1_.reserve(batch * kH1));
    GSGD_GPU_TRY(h2_.reserve(batch * kH2));
    GSGD_GPU_TRY(z_.reserve(batch * c_));
    const float* p = params();
    float *h1 = h1_.get(), *h2 = h2_.get(), *z = z_.get();
    GSGD_GPU_TRY(gpu::broadcastRows(p + o_b1_, batch, kH1, h1));
    GSGD_GPU_TRY(gemm(blas(), kNo, kYes, batch, kH1, d_, 1.0f, input(), d_, p, d_, 1.0f, h1, kH1));
    GSGD_GPU_TRY(gpu::reluInPlace(h1, batch * kH1));
    GSGD_GPU_TRY(gpu::broadcastRows(p + o_b2_, batch, kH2, h2));
    GSGD_GPU_TRY(
        gemm(blas(), kNo, kYes, batch, kH2, kH1, 1.0f, h1, kH1, p + o_w2_, kH1, 1.0f, h2, kH2));
    GSGD_GPU_TRY(gpu::reluInPlace(h2, batch * kH2));
    GSGD_GPU_TRY(gpu::broadcastRows(p + o_b3_, batch, c_, z));
    GSGD_GPU_TRY(
        gemm(blas(), kNo, kYes, batch, c_, kH2, 1.0f, h2, kH2, p + o_w3_, kH2, 1.0f, z, c_));
    *logits = z;
    return KernelStatus::success();
  }

  KernelStatus backward(std::size_t batch, const float* dz) override {
    GSGD_GPU_TRY(dh1_.reserve(batch * kH1));
    GSGD_GPU_TRY(dh2_.reserve(batch * kH2));
    const float* p = params();
    float* g = grad();
    const float *h1 = h1_.get(), *h2 = h2_.get();
    float *dh1 = dh1_.get(), *dh2 = dh2_.get();
    GSGD_GPU_TRY(hiddenBackward(p, g, batch, dz, c_, h2, kH2, o_w3_, o_b3_, dh2));    // layer 3
    GSGD_GPU_TRY(hiddenBackward(p, g, batch, dh2, kH2, h1, kH1, o_w2_, o_b2_, dh1));  // layer 2
    // Layer 1: no gradient w.r.t. x is needed.
    GSGD_GPU_TRY(gemm(blas(), kYes, kNo, kH1, d_, batch, 1.0f, dh1, kH1, input(), d_, 0.0f, g, d_));
    return gpu::sumRows(blas(), dh1, batch, kH1, ones(), g + o_b1_);
  }

  // The backward pass of a dense layer over a ReLU hidden layer h (batch×in): dW = dZ^T h,
  // db = colsum dZ (into g at w_off, b_off) and dh = dZ W masked by ReLU (as mlp_model.cc).
  KernelStatus hiddenBackward(const float* p, float* g, std::size_t batch, const float* dz,
                              std::size_t out, const float* h, std::size_t in, std::size_t w_off,
                              std::size_t b_off, float* dh) {
    GSGD_GPU_TRY(
        gemm(blas(), kYes, kNo, out, in, batch, 1.0f, dz, out, h, in, 0.0f, g + w_off, in));
    GSGD_GPU_TRY(gpu::sumRows(blas(), dz, batch, out, ones(), g + b_off));
    GSGD_GPU_TRY(
        gemm(blas(), kNo, kNo, batch, in, out, 1.0f, dz, out, p + w_off, in, 0.0f, dh, in));
    return gpu::reluBackward(h, dh, batch * in);
  }

  std::size_t d_, c_;
  std::size_t o_b1_, o_w2_, o_b2_, o_w3_, o_b3_;  // offsets into the flat vector
  DeviceScratch h1_, h2_, z_, dh1_, dh2_;
};

}  // namespace

std::unique_ptr<CudaModelBase> makeCudaMlp(std::size_t input_dim, std::size_t classes) {
  return std::make_unique<CudaMlpModel>(input_dim, classes);
}

}  // namespace groupsgd::kernels::detail
