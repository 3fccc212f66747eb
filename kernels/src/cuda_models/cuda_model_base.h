// What the CUDA MLP and CNN share: the host side of the Model interface. Parameters,
// inputs and labels are copied to the device at every call and the gradient back (the
// interface keeps flat host vectors, so the rest of groupsgd does not change); a failed
// CUDA/cuBLAS/cuDNN call is kept as deviceStatus() and turns this and every later
// lossAndGrad into NaN loss + NaN gradient. init() is the CPU model's, so both start from
// the same parameters for a seed.
// Thread rule: one thread at a time per model (model.h); the model makes its device
// current at every call, so that thread may change between calls.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu_check.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::kernels::detail {

class CudaModelBase : public Model {
 public:
  ~CudaModelBase() override;

  std::size_t paramCount() const final { return cpu_->paramCount(); }
  std::size_t inputDim() const final { return cpu_->inputDim(); }
  std::size_t numClasses() const final { return cpu_->numClasses(); }
  void init(std::span<float> params, std::uint64_t seed) const final { cpu_->init(params, seed); }
  float lossAndGrad(std::span<const float> params, const float* x, const std::int32_t* labels,
                    std::size_t batch, std::span<float> grad) final;
  void predict(std::span<const float> params, const float* x, std::size_t batch,
               std::int32_t* out_labels) final;
  KernelStatus deviceStatus() const final { return error_; }

  // Makes the device current and creates the cuBLAS handle; then the subclass's setup().
  KernelStatus open(int ordinal);

 protected:
  explicit CudaModelBase(std::unique_ptr<Model> cpu_reference) : cpu_(std::move(cpu_reference)) {}

  // Called once by open() with the device current: create further handles/descriptors.
  virtual KernelStatus setup() { return KernelStatus::success(); }
  // The forward pass on the uploaded batch (p_, x_): returns the device logits (batch×C).
  virtual KernelStatus forward(std::size_t batch, float** logits) = 0;
  // After forward and the softmax: dz (batch×C) holds d(loss)/d(logits); fill g_.
  virtual KernelStatus backward(std::size_t batch, const float* dz) = 0;

  cublasHandle_t blas() const { return blas_; }
  const float* params() const { return p_.get(); }
  const float* input() const { return x_.get(); }
  float* grad() const { return g_.get(); }
  // At least `rows` ones, for bias gradients through gemv.
  const float* ones() const { return ones_.get(); }

 private:
  KernelStatus upload(std::span<const float> params, const float* x, std::size_t batch);
  KernelStatus step(std::span<const float> params, const float* x, const std::int32_t* labels,
                    std::size_t batch, std::span<float> grad, float* loss);
  KernelStatus logits(std::span<const float> params, const float* x, std::size_t batch,
                      std::int32_t* out_labels);
  void fail(KernelStatus st);

  std::unique_ptr<Model> cpu_;  // shapes, init, and nothing else
  int ordinal_ = -1;
  cublasHandle_t blas_ = nullptr;
  DeviceScratch p_, g_, x_, ones_, labels_, row_loss_;
  std::size_t ones_count_ = 0;
  std::vector<double> host_row_loss_;
  std::vector<float> host_logits_;
  KernelStatus error_;
};

// The concrete models (cuda_mlp_model.cc, cuda_cnn_model.cc); not yet opened.
std::unique_ptr<CudaModelBase> makeCudaMlp(std::size_t input_dim, std::size_t classes);
std::unique_ptr<CudaModelBase> makeCudaCnn(std::size_t input_dim, std::size_t classes);

}  // namespace groupsgd::kernels::detail
