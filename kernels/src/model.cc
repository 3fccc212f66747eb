#include "groupsgd/kernels/model.h"

#include <cassert>

#include "groupsgd/base/enum_names.h"
#include "models_impl.h"

namespace groupsgd::kernels {

Model::~Model() = default;

KernelStatus Model::deviceStatus() const { return KernelStatus::success(); }

constexpr std::array<base::EnumName<ModelKind>, 3> kModelKindNames{{
    {ModelKind::kSoftmax, "softmax"},
    {ModelKind::kMlp, "mlp"},
    {ModelKind::kCnn, "cnn"},
}};

bool parseModelKind(std::string_view text, ModelKind* out) {
  return base::parseInto(kModelKindNames, text, out);
}

const char* modelKindName(ModelKind kind) { return base::nameOf(kModelKindNames, kind); }

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
