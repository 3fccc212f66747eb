// MNIST-format IDX files (images 0x00000803, labels 0x00000801, plain or gzip) loaded into
// memory with checked headers. Thread rule: plain functions; a Dataset is a value, safe to
// read from many threads once loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd::dataset {

struct Dataset {
  std::size_t count = 0;
  std::size_t rows = 0, cols = 0;
  std::vector<std::uint8_t> images;  // count*rows*cols, row-major per image
  std::vector<std::uint8_t> labels;  // count
  std::size_t featureDim() const { return rows * cols; }
};

// Headers beyond these are refused (kResourceExhausted) before anything is allocated.
inline constexpr std::size_t kMaxIdxCount = std::size_t{1} << 26;
inline constexpr std::size_t kMaxIdxSide = 4096;
inline constexpr std::size_t kMaxIdxImageBytes = std::size_t{1} << 32;

// Errors: kNotFound (missing file, path in the message), kDataLoss (bad magic, truncated
// or trailing data, corrupt gzip), kInvalidArgument (image/label count mismatch, a label
// >= classes, an empty or zero-sized header), kResourceExhausted (absurd header).
Result<Dataset> loadIdx(const std::string& images_path, const std::string& labels_path,
                        std::size_t classes = 10);

enum class Split { kTrain, kTest };

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte from dir, each file uncompressed if
// present, else with .gz. kNotFound names the directory and the expected files.
Result<Dataset> loadMnistDir(const std::string& dir, Split split);

inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace groupsgd::dataset
