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

std::vector<ElementRange> oneDimParamRanges(ModelKind kind, std::size_t input_dim,
                                            std::size_t classes) {
  const std::size_t d = input_dim, c = classes;
  switch (kind) {
    case ModelKind::kSoftmax:
      return {{c * d, c * d + c}};
    case ModelKind::kMlp: {
      const std::size_t b1 = kMlpHidden1 * d;
      const std::size_t b2 = b1 + kMlpHidden1 + kMlpHidden2 * kMlpHidden1;
      const std::size_t b3 = b2 + kMlpHidden2 + c * kMlpHidden2;
      return {{b1, b1 + kMlpHidden1}, {b2, b2 + kMlpHidden2}, {b3, b3 + c}};
    }
    case ModelKind::kCnn: {
      if (cnnPooledSide(d) == 0) return {};
      const CnnLayout l = CnnLayout::of(d, c);
      return {{l.c1, l.c1 + kCnnChannels1}, {l.c2, l.c2 + kCnnChannels2}, {l.b, l.b + c}};
    }
  }
  return {};
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
