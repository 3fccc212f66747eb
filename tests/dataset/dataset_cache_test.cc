// The host's dataset cache: a gzipped IDX file is unpacked once into the cache directory
// and later loads map that copy; a stale, corrupt or unwritable cache never changes what
// is loaded, it only costs the inflate again.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "groupsgd/dataset/idx.h"
#include "idx_files.h"

using namespace groupsgd;
using namespace groupsgd::dataset;
using namespace groupsgd::dataset::testing;
namespace fs = std::filesystem;

namespace {

// Sets (or, with nullptr, unsets) one environment variable for a test case.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name(name) {
    if (const char* old = std::getenv(name)) saved = old;
    had = std::getenv(name) != nullptr;
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (had) {
      ::setenv(name, saved.c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  const char* name;
  std::string saved;
  bool had = false;
};

// GROUPSGD_DATA_CACHE for one test case.
struct CacheEnv : ScopedEnv {
  explicit CacheEnv(const std::string& value) : ScopedEnv("GROUPSGD_DATA_CACHE", value.c_str()) {}
};

std::size_t filesIn(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  return static_cast<std::size_t>(
      std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

// The cached copy of the images file (the only file whose name starts so).
std::string imagesCopy(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with("img-")) return e.path().string();
  }
  return "";
}

bool allPixelsRight(const Dataset& d) {
  for (std::size_t i = 0; i < d.count; ++i) {
    for (std::size_t j = 0; j < d.featureDim(); ++j) {
      if (d.images[i * d.featureDim() + j] != pixel(i, j)) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("dataset cache: the first load unpacks a gzipped file, later loads map the copy") {
  TempDir t;
  const std::string cache = t.file("cache");
  CacheEnv env(cache);
  writeGz(t.file("img.gz"), imagesIdx(50, 4, 3));
  writeGz(t.file("lbl.gz"), labelsIdx(50));
  auto first = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
  REQUIRE(first.isOk());
  CHECK(first->images.mapped());
  CHECK(allPixelsRight(*first));
  CHECK(filesIn(cache) == 2);  // the images and the labels, nothing staged left behind
  const std::string copy = imagesCopy(cache);
  REQUIRE(!copy.empty());
  CHECK(readAll(copy) == imagesIdx(50, 4, 3));
  const auto written = fs::last_write_time(copy);
  auto second = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
  REQUIRE(second.isOk());
  CHECK(second->images.mapped());
  CHECK(allPixelsRight(*second));
  CHECK(fs::last_write_time(copy) == written);  // read, not written again
  CHECK(filesIn(cache) == 2);
}

TEST_CASE("dataset cache: a corrupt copy is noticed (CRC) and replaced; the load is right") {
  TempDir t;
  const std::string cache = t.file("cache");
  CacheEnv env(cache);
  writeGz(t.file("img.gz"), imagesIdx(40, 5, 5));
  writeGz(t.file("lbl.gz"), labelsIdx(40));
  REQUIRE(loadIdx(t.file("img.gz"), t.file("lbl.gz")).isOk());
  const std::string copy = imagesCopy(cache);
  Bytes bad = readAll(copy);
  bad[100] ^= 0x5a;  // same size, one byte flipped
  fs::remove(copy);  // a new inode, as an outside writer would leave it
  writePlain(copy, bad);
  auto loaded = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
  REQUIRE(loaded.isOk());
  CHECK(allPixelsRight(*loaded));
  CHECK(readAll(copy) == imagesIdx(40, 5, 5));
}

TEST_CASE("dataset cache: a changed source gets a copy of its own") {
  TempDir t;
  const std::string cache = t.file("cache");
  CacheEnv env(cache);
  writeGz(t.file("img.gz"), imagesIdx(10, 2, 2));
  writeGz(t.file("lbl.gz"), labelsIdx(10));
  REQUIRE(loadIdx(t.file("img.gz"), t.file("lbl.gz")).isOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a later mtime
  writeGz(t.file("img.gz"), imagesIdx(30, 2, 2));
  writeGz(t.file("lbl.gz"), labelsIdx(30));
  auto loaded = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
  REQUIRE(loaded.isOk());
  CHECK(loaded->count == 30);
  CHECK(allPixelsRight(*loaded));
}

TEST_CASE("dataset cache: off, or a directory that cannot be made, loads from the gzip") {
  TempDir t;
  writeGz(t.file("img.gz"), imagesIdx(20, 3, 3));
  writeGz(t.file("lbl.gz"), labelsIdx(20));
  SUBCASE("off") {
    CacheEnv env("off");
    auto loaded = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
    REQUIRE(loaded.isOk());
    CHECK_FALSE(loaded->images.mapped());
    CHECK(allPixelsRight(*loaded));
  }
  SUBCASE("under a regular file") {
    const std::string blocker = t.write("blocker", "not a directory");
    CacheEnv env(blocker + "/cache");
    auto loaded = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
    REQUIRE(loaded.isOk());
    CHECK_FALSE(loaded->images.mapped());
    CHECK(allPixelsRight(*loaded));
  }
  CHECK(t.entries() == 2 + (fs::exists(t.file("blocker")) ? 1 : 0));
}

TEST_CASE("dataset cache: a corrupt gzip is still refused with the source's name") {
  TempDir t;
  CacheEnv env(t.file("cache"));
  writeGz(t.file("ok.gz"), imagesIdx(30, 4, 4));
  Bytes gz = readAll(t.file("ok.gz"));
  gz[gz.size() / 2] ^= 0xff;
  writePlain(t.file("img.gz"), gz);
  writeGz(t.file("lbl.gz"), labelsIdx(30));
  auto loaded = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
  REQUIRE_FALSE(loaded.isOk());
  CHECK(loaded.status().code() == Code::kDataLoss);
  CHECK(loaded.status().message().find("img.gz") != std::string::npos);
  CHECK(imagesCopy(t.file("cache")).empty());
}

TEST_CASE("plain IDX files are mapped; a wrong size is refused as before") {
  TempDir t;
  CacheEnv env("off");
  writePlain(t.file("img"), imagesIdx(12, 2, 3));
  writePlain(t.file("lbl"), labelsIdx(12));
  auto loaded = loadIdx(t.file("img"), t.file("lbl"));
  REQUIRE(loaded.isOk());
  CHECK(loaded->images.mapped());
  CHECK(allPixelsRight(*loaded));
  Bytes longer = imagesIdx(12, 2, 3);
  longer.push_back(7);
  writePlain(t.file("long"), longer);
  auto trailing = loadIdx(t.file("long"), t.file("lbl"));
  REQUIRE_FALSE(trailing.isOk());
  CHECK(trailing.status().message().find("trailing data") != std::string::npos);
  Bytes shorter = imagesIdx(12, 2, 3);
  shorter.pop_back();
  writePlain(t.file("short"), shorter);
  auto truncated = loadIdx(t.file("short"), t.file("lbl"));
  REQUIRE_FALSE(truncated.isOk());
  CHECK(truncated.status().message().find("truncated") != std::string::npos);
}

TEST_CASE("dataset cache: an error in a cached file names the source, not the copy") {
  TempDir t;
  CacheEnv env(t.file("cache"));
  Bytes short_body = imagesIdx(30, 4, 4);
  short_body.resize(short_body.size() - 5);  // the header promises 5 bytes more
  writeGz(t.file("img.gz"), short_body);
  writeGz(t.file("lbl.gz"), labelsIdx(30));
  auto loaded = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
  REQUIRE_FALSE(loaded.isOk());
  CHECK(loaded.status().code() == Code::kDataLoss);
  CHECK(loaded.status().message().starts_with(t.file("img.gz") + ": truncated"));
}

TEST_CASE("dataset cache: under systemd, CacheDirectory= ($CACHE_DIRECTORY) holds the copies") {
  TempDir t;
  ScopedEnv no_override("GROUPSGD_DATA_CACHE", nullptr);
  const std::string unit_dirs = t.file("unit") + ":" + t.file("second");
  ScopedEnv unit("CACHE_DIRECTORY", unit_dirs.c_str());
  writeGz(t.file("img.gz"), imagesIdx(8, 2, 2));
  writeGz(t.file("lbl.gz"), labelsIdx(8));
  auto loaded = loadIdx(t.file("img.gz"), t.file("lbl.gz"));
  REQUIRE(loaded.isOk());
  CHECK(loaded->images.mapped());
  CHECK(filesIn(t.file("unit") + "/datasets") == 2);
  CHECK_FALSE(fs::exists(t.file("second")));
}
