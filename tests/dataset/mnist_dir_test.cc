#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "groupsgd/dataset/idx.h"
#include "idx_files.h"

using namespace groupsgd;
using namespace groupsgd::dataset;
using namespace groupsgd::dataset::testing;

TEST_CASE("mnist dir: loads both splits by their standard names, gzipped") {
  TempDir dir;
  writeGz(dir.file("train-images-idx3-ubyte.gz"), imagesIdx(7, 2, 3));
  writeGz(dir.file("train-labels-idx1-ubyte.gz"), labelsIdx(7));
  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), imagesIdx(3, 2, 3));
  writeGz(dir.file("t10k-labels-idx1-ubyte.gz"), labelsIdx(3));
  auto train = loadMnistDir(dir.path(), Split::kTrain);
  REQUIRE_MESSAGE(train.isOk(), train.status().toString());
  CHECK(train->count == 7);
  auto test = loadMnistDir(dir.path(), Split::kTest);
  REQUIRE_MESSAGE(test.isOk(), test.status().toString());
  CHECK(test->count == 3);
}

TEST_CASE("mnist dir: prefers the uncompressed file when both exist") {
  TempDir dir;
  writePlain(dir.file("train-images-idx3-ubyte"), imagesIdx(4, 2, 2));
  writeGz(dir.file("train-images-idx3-ubyte.gz"), imagesIdx(5, 2, 2));
  writePlain(dir.file("train-labels-idx1-ubyte"), labelsIdx(4));
  writeGz(dir.file("train-labels-idx1-ubyte.gz"), labelsIdx(5));
  auto r = loadMnistDir(dir.path(), Split::kTrain);
  REQUIRE_MESSAGE(r.isOk(), r.status().toString());
  CHECK(r->count == 4);
}

TEST_CASE("mnist dir: a missing directory or file is kNotFound naming dir and files") {
  TempDir dir;
  auto none = loadMnistDir(dir.file("absent"), Split::kTrain);
  CHECK(none.status().code() == Code::kNotFound);
  CHECK(none.status().message().find(dir.file("absent")) != std::string::npos);

  writeGz(dir.file("t10k-images-idx3-ubyte.gz"), imagesIdx(3, 2, 3));
  auto r = loadMnistDir(dir.path(), Split::kTest);
  CHECK(r.status().code() == Code::kNotFound);
  const std::string& msg = r.status().message();
  CHECK(msg.find(dir.path()) != std::string::npos);
  CHECK(msg.find("t10k-labels-idx1-ubyte") != std::string::npos);
}

TEST_CASE("mnist dir: the installed Fashion-MNIST loads with its known shapes") {
  if (!std::filesystem::is_directory(kDefaultFashionMnistDir)) {
    const std::string note =
        std::string("skipped: ") + kDefaultFashionMnistDir + " is not installed";
    MESSAGE(note);
    return;
  }
  auto train = loadMnistDir(kDefaultFashionMnistDir, Split::kTrain);
  REQUIRE_MESSAGE(train.isOk(), train.status().toString());
  CHECK(train->count == 60000);
  CHECK(train->rows == 28);
  CHECK(train->cols == 28);
  CHECK(train->images.size() == 60000u * 784u);
  auto test = loadMnistDir(kDefaultFashionMnistDir, Split::kTest);
  REQUIRE_MESSAGE(test.isOk(), test.status().toString());
  CHECK(test->count == 10000);
  CHECK(test->featureDim() == 784);
}
