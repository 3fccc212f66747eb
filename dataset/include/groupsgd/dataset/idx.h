// MNIST-format IDX files (images 0x00000803, labels 0x00000801, plain or gzip) loaded into
// memory with checked headers. Thread rule: plain functions; a Dataset is a value, safe to
// read from many threads once loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd::dataset {

// A dataset's image bytes: held in memory, or mapped read-only from a plain IDX file (the
// host's dataset cache, or an uncompressed file given), so that every process on the host
// shares one copy in the page cache. The mapped file is only ever replaced by a rename,
// never written in place, so a mapping stays valid. Copies share the bytes.
class ImageBytes {
 public:
  ImageBytes() = default;
  ImageBytes(std::initializer_list<std::uint8_t> bytes)
      : ImageBytes(owning(std::vector<std::uint8_t>(bytes))) {}
  // Holds these bytes.
  static ImageBytes owning(std::vector<std::uint8_t> bytes);
  // `size` bytes at `data`, kept alive by `keeper` (the mapping's owner).
  static ImageBytes viewing(std::shared_ptr<const void> keeper, const std::uint8_t* data,
                            std::size_t size);

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::uint8_t operator[](std::size_t i) const { return data_[i]; }
  bool mapped() const { return mapped_; }

 private:
  std::shared_ptr<const void> keeper_;  // the owned vector or the mapping
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;
};

struct Dataset {
  std::size_t count = 0;
  std::size_t rows = 0, cols = 0;
  ImageBytes images;                 // count*rows*cols, row-major per image
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
