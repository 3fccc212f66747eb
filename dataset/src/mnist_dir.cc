// loadMnistDir: maps a split to the standard MNIST file names inside a directory.
#include <filesystem>
#include <optional>
#include <string>

#include "groupsgd/dataset/idx.h"

namespace groupsgd::dataset {
namespace {

namespace fs = std::filesystem;

// The uncompressed file if present, else the .gz one, else nothing.
std::optional<std::string> pick(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  for (const std::string& candidate : {name, name + ".gz"}) {
    fs::path p = dir / candidate;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return std::nullopt;
}

}  // namespace

Result<Dataset> loadMnistDir(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_name = prefix + "-images-idx3-ubyte";
  const std::string labels_name = prefix + "-labels-idx1-ubyte";
  const std::string expected =
      "expected " + images_name + "[.gz] and " + labels_name + "[.gz] in " + dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return notFound("dataset directory " + dir + " does not exist; " + expected);
  }
  std::optional<std::string> images = pick(dir, images_name);
  std::optional<std::string> labels = pick(dir, labels_name);
  if (!images || !labels) {
    return notFound(std::string("missing ") + (images ? labels_name : images_name) + "[.gz]; " +
                    expected);
  }
  return loadIdx(*images, *labels);
}

}  // namespace groupsgd::dataset
