#include "groupsgd/kernels/model.h"

#include <cassert>

#include "models_impl.h"

namespace groupsgd::kernels {

Model::~Model() = default;

KernelStatus Model::deviceStatus() const { return KernelStatus::success(); }

bool parseModelKind(std::string_view text, ModelKind* out) {
  for (ModelKind k : {ModelKind::kSoftmax, ModelKind::kMlp, ModelKind::kCnn}) {
    if (text == modelKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

const char* modelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kSoftmax:
      return "softmax";
    case ModelKind::kMlp:
      return "mlp";
    case ModelKind::kCnn:
      return "cnn";
  }
  return "unknown";
}

std::unique_ptr<Model> makeModel(ModelKind kind, std::size_t input_dim, std::size_t classes) {
  assert(input_dim > 0 && classes > 0);
  switch (kind) {
    case ModelKind::kSoftmax:
      return detail::makeSoftmaxModel(input_dim, classes);
    case ModelKind::kMlp:
      return detail::makeMlpModel(input_dim, classes);
    case ModelKind::kCnn:
      return detail::makeCnnModel(input_dim, classes);
  }
  return nullptr;
}

}  // namespace groupsgd::kernels
