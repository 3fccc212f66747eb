#include "groupsgd/dataset/idx.h"

#include <doctest/doctest.h>

#include <string>

#include "idx_files.h"

using namespace groupsgd;
using namespace groupsgd::dataset;
using namespace groupsgd::dataset::testing;

namespace {

void checkContent(const Dataset& d, std::size_t count, std::size_t rows, std::size_t cols) {
  REQUIRE(d.count == count);
  CHECK(d.rows == rows);
  CHECK(d.cols == cols);
  CHECK(d.featureDim() == rows * cols);
  REQUIRE(d.images.size() == count * rows * cols);
  REQUIRE(d.labels.size() == count);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t j = 0; j < rows * cols; ++j)
      bad += d.images[i * rows * cols + j] != pixel(i, j);
    bad += d.labels[i] != i % 10;
  }
  CHECK(bad == 0);
}

bool mentions(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("idx: loads plain files") {
  TempDir dir;
  writePlain(dir.file("img"), imagesIdx(12, 3, 5));
  writePlain(dir.file("lbl"), labelsIdx(12));
  auto r = loadIdx(dir.file("img"), dir.file("lbl"));
  REQUIRE_MESSAGE(r.isOk(), r.status().toString());
  checkContent(*r, 12, 3, 5);
}

TEST_CASE("idx: loads gzipped files, and a gzipped file next to a plain one") {
  TempDir dir;
  writeGz(dir.file("img.gz"), imagesIdx(30, 4, 4));
  writeGz(dir.file("lbl.gz"), labelsIdx(30));
  writePlain(dir.file("lbl"), labelsIdx(30));
  REQUIRE(readAll(dir.file("img.gz"))[0] == 0x1f);  // really gzip
  auto r = loadIdx(dir.file("img.gz"), dir.file("lbl.gz"));
  REQUIRE_MESSAGE(r.isOk(), r.status().toString());
  checkContent(*r, 30, 4, 4);
  auto mixed = loadIdx(dir.file("img.gz"), dir.file("lbl"));
  REQUIRE_MESSAGE(mixed.isOk(), mixed.status().toString());
  checkContent(*mixed, 30, 4, 4);
}

TEST_CASE("idx: a missing file is kNotFound and names the path") {
  TempDir dir;
  writePlain(dir.file("lbl"), labelsIdx(2));
  auto r = loadIdx(dir.file("no-such-images"), dir.file("lbl"));
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(mentions(r.status(), dir.file("no-such-images")));
  writePlain(dir.file("img"), imagesIdx(2, 2, 2));
  auto l = loadIdx(dir.file("img"), dir.file("no-such-labels"));
  CHECK(l.status().code() == Code::kNotFound);
  CHECK(mentions(l.status(), dir.file("no-such-labels")));
}

TEST_CASE("idx: bad magic is kDataLoss naming the file") {
  TempDir dir;
  writePlain(dir.file("img"), imagesIdx(2, 2, 2, 0x00000801));  // a labels magic
  writePlain(dir.file("lbl"), labelsIdx(2));
  auto r = loadIdx(dir.file("img"), dir.file("lbl"));
  CHECK(r.status().code() == Code::kDataLoss);
  CHECK(mentions(r.status(), "magic"));
  CHECK(mentions(r.status(), dir.file("img")));
  writePlain(dir.file("img"), imagesIdx(2, 2, 2));
  writeGz(dir.file("lbl.gz"), labelsIdx(2, 0x00000803));
  CHECK(loadIdx(dir.file("img"), dir.file("lbl.gz")).status().code() == Code::kDataLoss);
}

TEST_CASE("idx: truncated header or body is kDataLoss, plain and gzipped") {
  TempDir dir;
  Bytes img = imagesIdx(10, 3, 3);
  writePlain(dir.file("lbl"), labelsIdx(10));
  Bytes body_cut(img.begin(), img.end() - 5);
  Bytes header_cut(img.begin(), img.begin() + 10);
  for (const Bytes& cut : {body_cut, header_cut}) {
    writePlain(dir.file("img"), cut);
    writeGz(dir.file("img.gz"), cut);
    auto plain = loadIdx(dir.file("img"), dir.file("lbl"));
    CHECK(plain.status().code() == Code::kDataLoss);
    CHECK(mentions(plain.status(), "truncated"));
    auto gz = loadIdx(dir.file("img.gz"), dir.file("lbl"));
    CHECK(gz.status().code() == Code::kDataLoss);
    CHECK(mentions(gz.status(), "truncated"));
  }
  // A gzip stream cut short (the compressed bytes themselves end early).
  writeGz(dir.file("whole.gz"), imagesIdx(10, 3, 3));
  Bytes gz = readAll(dir.file("whole.gz"));
  writePlain(dir.file("cut.gz"), Bytes(gz.begin(), gz.begin() + gz.size() / 2));
  CHECK(loadIdx(dir.file("cut.gz"), dir.file("lbl")).status().code() == Code::kDataLoss);
}

TEST_CASE("idx: trailing bytes after the described data are kDataLoss") {
  TempDir dir;
  Bytes img = imagesIdx(4, 2, 2);
  img.push_back(0);
  writePlain(dir.file("img"), img);
  writePlain(dir.file("lbl"), labelsIdx(4));
  CHECK(loadIdx(dir.file("img"), dir.file("lbl")).status().code() == Code::kDataLoss);
}

TEST_CASE("idx: image and label counts that differ are kInvalidArgument") {
  TempDir dir;
  writePlain(dir.file("img"), imagesIdx(5, 2, 2));
  writePlain(dir.file("lbl"), labelsIdx(6));
  auto r = loadIdx(dir.file("img"), dir.file("lbl"));
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(mentions(r.status(), "5 images"));
  CHECK(mentions(r.status(), "6 labels"));
}

TEST_CASE("idx: a label not below the class count is kInvalidArgument") {
  TempDir dir;
  writePlain(dir.file("img"), imagesIdx(10, 2, 2));
  writePlain(dir.file("lbl"), labelsIdx(10));  // labels 0..9
  CHECK(loadIdx(dir.file("img"), dir.file("lbl"), 9).status().code() == Code::kInvalidArgument);
  CHECK(loadIdx(dir.file("img"), dir.file("lbl"), 10).isOk());
}

TEST_CASE("idx: absurd or empty headers are refused before allocating") {
  TempDir dir;
  writePlain(dir.file("lbl"), labelsIdx(3));
  Bytes huge;
  putBe32(&huge, 0x00000803);
  putBe32(&huge, 3);
  putBe32(&huge, 100000);
  putBe32(&huge, 100000);
  writePlain(dir.file("huge"), huge);
  CHECK(loadIdx(dir.file("huge"), dir.file("lbl")).status().code() == Code::kResourceExhausted);

  // Within the limits but far more than the gzip holds: truncated, not a giant allocation.
  Bytes lying = imagesIdx(3, 2, 2);
  lying[7] = 0;
  lying[6] = 0;
  lying[5] = 0x10;  // count = 0x100000
  writeGz(dir.file("lying.gz"), lying);
  writeGz(dir.file("lbl_big.gz"), labelsIdx(0x100000));
  CHECK(loadIdx(dir.file("lying.gz"), dir.file("lbl_big.gz")).status().code() == Code::kDataLoss);

  writePlain(dir.file("empty"), imagesIdx(0, 2, 2));
  writePlain(dir.file("lbl0"), labelsIdx(0));
  CHECK(loadIdx(dir.file("empty"), dir.file("lbl0")).status().code() == Code::kInvalidArgument);
}
