// Factories for the concrete models behind makeModel.
// Thread rule: each returned Model is used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>

#include "groupsgd/kernels/model.h"

namespace groupsgd::kernels::detail {

std::unique_ptr<Model> makeSoftmaxModel(std::size_t input_dim, std::size_t classes);
std::unique_ptr<Model> makeMlpModel(std::size_t input_dim, std::size_t classes);
// Null when input_dim is not a square image the CNN can take (see cnnPooledSide).
std::unique_ptr<Model> makeCnnModel(std::size_t input_dim, std::size_t classes);

}  // namespace groupsgd::kernels::detail
