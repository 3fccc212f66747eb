// Classification models over a flat float32 parameter vector: forward, mean softmax
// cross-entropy and its gradient. Thread rule: a Model keeps reusable scratch buffers, so
// one thread at a time per instance; use one Model per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "groupsgd/kernels/element_range.h"
#include "groupsgd/kernels/kernel_status.h"

namespace groupsgd::kernels {

enum class ModelKind { kSoftmax, kMlp, kCnn };

// Names are "softmax", "mlp", "cnn"; parse returns false on anything else.
bool parseModelKind(std::string_view text, ModelKind* out);
const char* modelKindName(ModelKind kind);

// Hidden widths of the MLP (input_dim-256-128-classes, ReLU).
inline constexpr std::size_t kMlpHidden1 = 256;
inline constexpr std::size_t kMlpHidden2 = 128;

// LeNet-like CNN on a square single-channel image of side S (input_dim = S*S, S >= 16):
// conv 5x5 1->8 + ReLU + maxpool 2, conv 5x5 8->16 + ReLU + maxpool 2, dense -> classes.
// Valid convolutions, stride 1; pooling 2x2 stride 2, an odd last row/column dropped.
inline constexpr std::size_t kCnnKernel = 5;
inline constexpr std::size_t kCnnChannels1 = 8;
inline constexpr std::size_t kCnnChannels2 = 16;
inline constexpr std::size_t kCnnMinSide = 16;
// Side of the second pooled map (4 for 28x28 images), or 0 when input_dim is not a square of
// side >= kCnnMinSide. The dense layer then has kCnnChannels2 * side^2 inputs.
std::size_t cnnPooledSide(std::size_t input_dim);

// The CNN's map sides and where each tensor sits in the flat parameter vector (the layout
// below), one definition for the CPU and the CUDA model.
struct CnnLayout {
  std::size_t side = 0;              // input image side
  std::size_t conv1 = 0, pool1 = 0;  // after conv 1, after pool 1
  std::size_t conv2 = 0, pool2 = 0;  // after conv 2, after pool 2
  std::size_t flat = 0;              // dense inputs: kCnnChannels2 * pool2^2
  std::size_t k1 = 0, c1 = 0, k2 = 0, c2 = 0, w = 0, b = 0;  // offsets of each tensor
  std::size_t params = 0;                                    // total parameter count
  // input_dim must be accepted by cnnPooledSide.
  static CnnLayout of(std::size_t input_dim, std::size_t classes);
};

// Parameter layouts (D = input_dim, C = classes), matrices row-major [out][in]:
//   softmax: W (C×D) | b (C)
//   mlp:     W1 (256×D) | b1 (256) | W2 (128×256) | b2 (128) | W3 (C×128) | b3 (C)
//   cnn:     K1 (8×5×5×1) | c1 (8) | K2 (16×5×5×8) | c2 (16) | W (C×F) | b (C)
//            conv kernels row-major [out][ky][kx][in]; activations are kept as
//            [batch][y][x][channel], and the dense layer's F = 16·P·P inputs (P =
//            cnnPooledSide) are the second pooled map flattened in (y, x, channel) order.
// Inputs x are row-major batch×D floats in [0,1]; labels are in [0, C) (assert).
class Model {
 public:
  virtual ~Model();
  virtual std::size_t paramCount() const = 0;
  virtual std::size_t inputDim() const = 0;
  virtual std::size_t numClasses() const = 0;
  // Deterministic for a seed (own Box-Muller on std::mt19937_64, no std:: distributions).
  // mlp and cnn: He-normal weights (std sqrt(2/fan_in)), zero biases.
  // softmax: N(0, 0.01^2) weights, zero biases, so the initial loss is close to ln(C).
  virtual void init(std::span<float> params, std::uint64_t seed) const = 0;
  // Returns the mean cross-entropy over the batch; grad (fully overwritten) is the gradient
  // of that mean with respect to params. A zero batch gives 0 and a zero gradient.
  virtual float lossAndGrad(std::span<const float> params, const float* x,
                            const std::int32_t* labels, std::size_t batch,
                            std::span<float> grad) = 0;
  // Writes the arg-max class of each row.
  virtual void predict(std::span<const float> params, const float* x, std::size_t batch,
                       std::int32_t* out_labels) = 0;
  // The first error this model met (CUDA models, model_device.h: a label out of range, a
  // failed copy, kernel or cuBLAS/cuDNN call; lossAndGrad then returned NaN and filled grad
  // with NaN, and every later call does the same). The CPU models are always ok.
  virtual KernelStatus deviceStatus() const;
};

// Where the 1-D tensors (the biases) sit in the layout above, in order; what
// optimizer.decay_1d false exempts from weight decay. Empty for kCnn with an input_dim that
// cnnPooledSide rejects.
std::vector<ElementRange> oneDimParamRanges(ModelKind kind, std::size_t input_dim = 784,
                                            std::size_t classes = 10);

// Returns null only for kCnn with an input_dim that cnnPooledSide rejects.
std::unique_ptr<Model> makeModel(ModelKind kind, std::size_t input_dim = 784,
                                 std::size_t classes = 10);

}  // namespace groupsgd::kernels
