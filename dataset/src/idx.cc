// loadIdx: both headers first (cheap checks, including the count match), then the bodies.
#include "groupsgd/dataset/idx.h"

#include <string>
#include <vector>

#include "idx_reader.h"

namespace groupsgd::dataset {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;
constexpr std::uint32_t kLabelsMagic = 0x00000801;

Status checkImageDims(const std::string& path, std::size_t count, std::size_t rows,
                      std::size_t cols) {
  const std::string dims =
      std::to_string(count) + "x" + std::to_string(rows) + "x" + std::to_string(cols);
  if (count == 0 || rows == 0 || cols == 0) {
    return invalidArgument(path + ": empty images header " + dims);
  }
  if (count > kMaxIdxCount || rows > kMaxIdxSide || cols > kMaxIdxSide ||
      count * rows * cols > kMaxIdxImageBytes) {
    return resourceExhausted(path + ": images header " + dims + " is over the loader's limits");
  }
  return Status::ok();
}

}  // namespace

ImageBytes ImageBytes::owning(std::vector<std::uint8_t> bytes) {
  auto held = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  ImageBytes b;
  b.data_ = held->data();
  b.size_ = held->size();
  b.keeper_ = std::move(held);
  return b;
}

ImageBytes ImageBytes::viewing(std::shared_ptr<const void> keeper, const std::uint8_t* data,
                               std::size_t size) {
  ImageBytes b;
  b.keeper_ = std::move(keeper);
  b.data_ = data;
  b.size_ = size;
  b.mapped_ = true;
  return b;
}

Result<Dataset> loadIdx(const std::string& images_path, const std::string& labels_path,
                        std::size_t classes) {
  Result<detail::IdxFile> images = detail::IdxFile::open(images_path);
  if (!images.isOk()) return images.status();
  Result<detail::IdxFile> labels = detail::IdxFile::open(labels_path);
  if (!labels.isOk()) return labels.status();

  std::vector<std::uint32_t> image_dims(3), label_dims(1);
  GSGD_RETURN_IF_ERROR(images->readHeader(kImagesMagic, &image_dims));
  GSGD_RETURN_IF_ERROR(labels->readHeader(kLabelsMagic, &label_dims));
  Dataset d;
  d.count = image_dims[0];
  d.rows = image_dims[1];
  d.cols = image_dims[2];
  GSGD_RETURN_IF_ERROR(checkImageDims(images_path, d.count, d.rows, d.cols));
  if (label_dims[0] != d.count) {
    return invalidArgument(images_path + " holds " + std::to_string(d.count) + " images but " +
                           labels_path + " holds " + std::to_string(label_dims[0]) + " labels");
  }

  // A plain file (the dataset cache's copy or an uncompressed one) is mapped, not read.
  GSGD_RETURN_IF_ERROR(images->mapOrReadBody(d.count * d.featureDim(), &d.images));
  GSGD_RETURN_IF_ERROR(labels->readBody(d.count, &d.labels));
  for (std::size_t i = 0; i < d.count; ++i) {
    if (d.labels[i] >= classes) {
      return invalidArgument(labels_path + ": label " + std::to_string(d.labels[i]) + " at index " +
                             std::to_string(i) + " is not below " + std::to_string(classes) +
                             " classes");
    }
  }
  return d;
}

}  // namespace groupsgd::dataset
