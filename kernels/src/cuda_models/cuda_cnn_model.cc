// The LeNet-like CNN on a GPU (same layers, parameter layout and NHWC activations as
// cnn_model.cc): cuDNN does the convolutions (cross-correlation, KRSC filters = the CPU's
// [out][ky][kx][in]), the 2×2 max pooling and the ReLUs; cuBLAS the dense layer and the
// bias gradients; model_kernels.cu the bias adds and the softmax. Convolution algorithms
// are picked per batch size from cuDNN's heuristics: FP32 arithmetic (no TF32), and
// deterministic ones where cuDNN offers them.
#include <algorithm>
#include <cmath>
#include <memory>

#include "cuda_model_base.h"
#include "model_kernels.h"

namespace groupsgd::kernels::detail {
namespace {

constexpr std::size_t kK = kCnnKernel;
constexpr std::size_t kC1 = kCnnChannels1;
constexpr std::size_t kC2 = kCnnChannels2;
constexpr Transpose kNo = Transpose::kNo, kYes = Transpose::kYes;

// The algorithm choice for one convolution direction: the first heuristic result that
// succeeded, is not a tensor-op (TF32) one and is deterministic; failing that, the first
// non-tensor-op one.
template <typename Perf>
KernelStatus pick(const Perf* perf, int count, const char* what, Perf* out) {
  const Perf* fallback = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.mathType == CUDNN_TENSOR_OP_MATH ||
        p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
      continue;
    }
    if (p.determinism == CUDNN_DETERMINISTIC) {
      *out = p;
      return KernelStatus::success();
    }
    if (fallback == nullptr) fallback = &p;
  }
  if (fallback == nullptr) {
    return KernelStatus::error(KernelStatus::Code::kInternal,
                               std::string("cuDNN offers no FP32 algorithm for ") + what);
  }
  *out = *fallback;
  return KernelStatus::success();
}

// One valid 5×5 convolution layer's cuDNN objects.
struct ConvLayer {
  cudnnTensorDescriptor_t in = nullptr, out = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  std::size_t workspace = 0;  // bytes, the largest of the directions used

  KernelStatus create(std::size_t c_in, std::size_t c_out) {
    GSGD_DNN_TRY(cudnnCreateTensorDescriptor(&in));
    GSGD_DNN_TRY(cudnnCreateTensorDescriptor(&out));
    GSGD_DNN_TRY(cudnnCreateFilterDescriptor(&filter));
    GSGD_DNN_TRY(cudnnCreateConvolutionDescriptor(&conv));
    GSGD_DNN_TRY(cudnnSetFilter4dDescriptor(filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, int(c_out),
                                            int(c_in), int(kK), int(kK)));
    GSGD_DNN_TRY(cudnnSetConvolution2dDescriptor(conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
    GSGD_DNN_TRY(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
    return KernelStatus::success();
  }

  // Shapes for this batch and the algorithms for them; need_data: conv 2 also propagates
  // to its input.
  KernelStatus configure(cudnnHandle_t h, std::size_t batch, std::size_t side, std::size_t c_in,
                         std::size_t c_out, bool need_data) {
    const std::size_t o = side - kK + 1;
    GSGD_DNN_TRY(cudnnSetTensor4dDescriptor(in, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, int(batch),
                                            int(c_in), int(side), int(side)));
    GSGD_DNN_TRY(cudnnSetTensor4dDescriptor(out, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, int(batch),
                                            int(c_out), int(o), int(o)));
    constexpr int kMax = 16;
    int n = 0;
    workspace = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[kMax], f{};
    GSGD_DNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, in, filter, conv, out, kMax, &n, fp));
    GSGD_GPU_TRY(pick(fp, n, "the forward convolution", &f));
    fwd = f.algo;
    std::size_t bytes = 0;
    GSGD_DNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(h, in, filter, conv, out, fwd, &bytes));
    workspace = std::max(workspace, bytes);
    cudnnConvolutionBwdFilterAlgoPerf_t bp[kMax], b{};
    GSGD_DNN_TRY(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, in, out, conv, filter, kMax, &n, bp));
    GSGD_GPU_TRY(pick(bp, n, "the filter gradient", &b));
    bwd_filter = b.algo;
    GSGD_DNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, in, out, conv, filter,
                                                                bwd_filter, &bytes));
    workspace = std::max(workspace, bytes);
    if (need_data) {
      cudnnConvolutionBwdDataAlgoPerf_t dp[kMax], d{};
      GSGD_DNN_TRY(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(h, filter, out, conv, in, kMax, &n, dp));
      GSGD_GPU_TRY(pick(dp, n, "the input gradient", &d));
      bwd_data = d.algo;
      GSGD_DNN_TRY(
          cudnnGetConvolutionBackwardDataWorkspaceSize(h, filter, out, conv, in, bwd_data, &bytes));
      workspace = std::max(workspace, bytes);
    }
    return KernelStatus::success();
  }

  // Not const although it could be: it ends the descriptors' lives (through their handles).
  void destroy() {  // NOLINT(readability-make-member-function-const)
    if (in) cudnnDestroyTensorDescriptor(in);
    if (out) cudnnDestroyTensorDescriptor(out);
    if (filter) cudnnDestroyFilterDescriptor(filter);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

class CudaCnnModel final : public CudaModelBase {
 public:
  CudaCnnModel(std::size_t input_dim, std::size_t classes)
      : CudaModelBase(makeModel(ModelKind::kCnn, input_dim, classes)),
        c_(classes),
        l_(CnnLayout::of(input_dim, classes)) {}

  ~CudaCnnModel() override {
    l1_.destroy();
    l2_.destroy();
    if (pool_) cudnnDestroyPoolingDescriptor(pool_);
    if (relu_) cudnnDestroyActivationDescriptor(relu_);
    for (auto* d : {a1_desc_, a2_desc_}) {
      if (d) cudnnDestroyTensorDescriptor(d);
    }
    if (dnn_) cudnnDestroy(dnn_);
  }

 private:
  KernelStatus setup() override {
    GSGD_DNN_TRY(cudnnCreate(&dnn_));
    GSGD_GPU_TRY(l1_.create(1, kC1));
    GSGD_GPU_TRY(l2_.create(kC1, kC2));
    GSGD_DNN_TRY(cudnnCreatePoolingDescriptor(&pool_));
    // Deterministic max pooling: the gradient goes to one maximum of each window.
    GSGD_DNN_TRY(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_MAX_DETERMINISTIC,
                                             CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
    GSGD_DNN_TRY(cudnnCreateActivationDescriptor(&relu_));
    GSGD_DNN_TRY(
        cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    GSGD_DNN_TRY(cudnnCreateTensorDescriptor(&a1_desc_));
    GSGD_DNN_TRY(cudnnCreateTensorDescriptor(&a2_desc_));
    return KernelStatus::success();
  }

  // Descriptors, algorithms and buffers for this batch size (redone when it changes).
  KernelStatus configure(std::size_t batch) {
    if (batch == batch_) return KernelStatus::success();
    batch_ = 0;
    GSGD_GPU_TRY(l1_.configure(dnn_, batch, l_.side, 1, kC1, /*need_data=*/false));
    GSGD_GPU_TRY(l2_.configure(dnn_, batch, l_.pool1, kC1, kC2, /*need_data=*/true));
    GSGD_DNN_TRY(cudnnSetTensor4dDescriptor(a1_desc_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                            int(batch), int(kC1), int(l_.pool1), int(l_.pool1)));
    GSGD_DNN_TRY(cudnnSetTensor4dDescriptor(a2_desc_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                            int(batch), int(kC2), int(l_.pool2), int(l_.pool2)));
    const std::size_t m1 = batch * l_.conv1 * l_.conv1 * kC1,
                      m2 = batch * l_.conv2 * l_.conv2 * kC2;
    const std::size_t p1 = batch * l_.pool1 * l_.pool1 * kC1, p2 = batch * l_.flat;
    for (auto [buf, n] : {std::pair{&h1_, m1},
                          {&dh1_, m1},
                          {&t1_, m1},
                          {&a1_, p1},
                          {&da1_, p1},
                          {&h2_, m2},
                          {&dh2_, m2},
                          {&t2_, m2},
                          {&a2_, p2},
                          {&da2_, p2},
                          {&z_, batch * c_}}) {
      GSGD_GPU_TRY(buf->reserve(n));
    }
    GSGD_GPU_TRY(workspace_.reserve((std::max(l1_.workspace, l2_.workspace) + 3) / 4));
    batch_ = batch;
    return KernelStatus::success();
  }

  // out = ReLU(conv(in) + bias), the pre-activation kept in out too (cuDNN's ReLU runs in
  // place; its backward needs only the output).
  KernelStatus convRelu(const ConvLayer& l, const float* in, const float* kernel, const float* bias,
                        std::size_t rows, std::size_t c_out, float* out) {
    const float one = 1.0f, zero = 0.0f;
    GSGD_DNN_TRY(cudnnConvolutionForward(dnn_, &one, l.in, in, l.filter, kernel, l.conv, l.fwd,
                                         workspace_.get(), workspaceBytes(), &zero, l.out, out));
    GSGD_GPU_TRY(gpu::addRowBias(out, bias, rows, c_out));
    return dnnStatus(cudnnActivationForward(dnn_, relu_, &one, l.out, out, &zero, l.out, out),
                     "cudnnActivationForward");
  }

  KernelStatus forward(std::size_t batch, float** logits) override {
    GSGD_GPU_TRY(configure(batch));
    const float* p = params();
    const float one = 1.0f, zero = 0.0f;
    GSGD_GPU_TRY(convRelu(l1_, input(), p, p + l_.c1, batch * l_.conv1 * l_.conv1, kC1, h1_.get()));
    GSGD_DNN_TRY(
        cudnnPoolingForward(dnn_, pool_, &one, l1_.out, h1_.get(), &zero, a1_desc_, a1_.get()));
    GSGD_GPU_TRY(convRelu(l2_, a1_.get(), p + l_.k2, p + l_.c2, batch * l_.conv2 * l_.conv2, kC2,
                          h2_.get()));
    GSGD_DNN_TRY(
        cudnnPoolingForward(dnn_, pool_, &one, l2_.out, h2_.get(), &zero, a2_desc_, a2_.get()));
    // Dense: z = b + a2 W^T, a2 being batch × F in (y, x, channel) order (NHWC).
    GSGD_GPU_TRY(gpu::broadcastRows(p + l_.b, batch, c_, z_.get()));
    GSGD_GPU_TRY(gpu::gemm(blas(), kNo, kYes, batch, c_, l_.flat, 1.0f, a2_.get(), l_.flat,
                           p + l_.w, l_.flat, 1.0f, z_.get(), c_));
    *logits = z_.get();
    return KernelStatus::success();
  }

  KernelStatus backward(std::size_t batch, const float* dz) override {
    const float* p = params();
    float* g = grad();
    const float one = 1.0f, zero = 0.0f;
    const std::size_t m1 = batch * l_.conv1 * l_.conv1, m2 = batch * l_.conv2 * l_.conv2;
    // Dense: dW = dZ^T a2, db = colsum dZ, da2 = dZ W.
    GSGD_GPU_TRY(gpu::gemm(blas(), kYes, kNo, c_, l_.flat, batch, 1.0f, dz, c_, a2_.get(), l_.flat,
                           0.0f, g + l_.w, l_.flat));
    GSGD_GPU_TRY(gpu::sumRows(blas(), dz, batch, c_, ones(), g + l_.b));
    GSGD_GPU_TRY(gpu::gemm(blas(), kNo, kNo, batch, l_.flat, c_, 1.0f, dz, c_, p + l_.w, l_.flat,
                           0.0f, da2_.get(), l_.flat));
    // Pool 2, then ReLU 2 (t2 holds the gradient after the pool, dh2 after the ReLU).
    GSGD_DNN_TRY(cudnnPoolingBackward(dnn_, pool_, &one, a2_desc_, a2_.get(), a2_desc_, da2_.get(),
                                      l2_.out, h2_.get(), &zero, l2_.out, t2_.get()));
    GSGD_DNN_TRY(cudnnActivationBackward(dnn_, relu_, &one, l2_.out, h2_.get(), l2_.out, t2_.get(),
                                         l2_.out, h2_.get(), &zero, l2_.out, dh2_.get()));
    // Conv 2: filter and bias gradients, and the gradient of its input a1.
    GSGD_DNN_TRY(cudnnConvolutionBackwardFilter(dnn_, &one, l2_.in, a1_.get(), l2_.out, dh2_.get(),
                                                l2_.conv, l2_.bwd_filter, workspace_.get(),
                                                workspaceBytes(), &zero, l2_.filter, g + l_.k2));
    GSGD_GPU_TRY(gpu::sumRows(blas(), dh2_.get(), m2, kC2, ones(), g + l_.c2));
    GSGD_DNN_TRY(cudnnConvolutionBackwardData(dnn_, &one, l2_.filter, p + l_.k2, l2_.out,
                                              dh2_.get(), l2_.conv, l2_.bwd_data, workspace_.get(),
                                              workspaceBytes(), &zero, l2_.in, da1_.get()));
    // Pool 1, ReLU 1.
    GSGD_DNN_TRY(cudnnPoolingBackward(dnn_, pool_, &one, a1_desc_, a1_.get(), a1_desc_, da1_.get(),
                                      l1_.out, h1_.get(), &zero, l1_.out, t1_.get()));
    GSGD_DNN_TRY(cudnnActivationBackward(dnn_, relu_, &one, l1_.out, h1_.get(), l1_.out, t1_.get(),
                                         l1_.out, h1_.get(), &zero, l1_.out, dh1_.get()));
    // Conv 1: no gradient w.r.t. the input is needed.
    GSGD_DNN_TRY(cudnnConvolutionBackwardFilter(dnn_, &one, l1_.in, input(), l1_.out, dh1_.get(),
                                                l1_.conv, l1_.bwd_filter, workspace_.get(),
                                                workspaceBytes(), &zero, l1_.filter, g));
    return gpu::sumRows(blas(), dh1_.get(), m1, kC1, ones(), g + l_.c1);
  }

  std::size_t workspaceBytes() const { return std::max(l1_.workspace, l2_.workspace); }

  std::size_t c_;
  CnnLayout l_;
  cudnnHandle_t dnn_ = nullptr;
  ConvLayer l1_, l2_;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  cudnnTensorDescriptor_t a1_desc_ = nullptr, a2_desc_ = nullptr;  // pooled maps
  std::size_t batch_ = 0;                                          // configured for
  DeviceScratch h1_, t1_, dh1_, a1_, da1_, h2_, t2_, dh2_, a2_, da2_, z_, workspace_;
};

}  // namespace

std::unique_ptr<CudaModelBase> makeCudaCnn(std::size_t input_dim, std::size_t classes) {
  if (cnnPooledSide(input_dim) == 0) return nullptr;
  return std::make_unique<CudaCnnModel>(input_dim, classes);
}

}  // namespace groupsgd::kernels::detail
