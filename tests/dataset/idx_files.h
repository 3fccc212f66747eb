// Test helpers that write small IDX files (plain or gzipped) into a private temp dir.
// Thread rule: one test at a time per TempDir.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace groupsgd::dataset::testing {

using Bytes = std::vector<std::uint8_t>;

// Removed with everything in it when the test ends.
using groupsgd::testing::TempDir;

inline void putBe32(Bytes* out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out->push_back(static_cast<std::uint8_t>(v >> shift));
}

// Pixel (i, j) of image i is (i * 31 + j * 7) % 256, so content errors show up.
inline std::uint8_t pixel(std::size_t i, std::size_t j) {
  return static_cast<std::uint8_t>((i * 31 + j * 7) % 256);
}

inline Bytes imagesIdx(std::uint32_t count, std::uint32_t rows, std::uint32_t cols,
                       std::uint32_t magic = 0x00000803) {
  Bytes b;
  putBe32(&b, magic);
  putBe32(&b, count);
  putBe32(&b, rows);
  putBe32(&b, cols);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t j = 0; j < std::size_t{rows} * cols; ++j) b.push_back(pixel(i, j));
  }
  return b;
}

inline Bytes labelsIdx(std::uint32_t count, std::uint32_t magic = 0x00000801) {
  Bytes b;
  putBe32(&b, magic);
  putBe32(&b, count);
  for (std::size_t i = 0; i < count; ++i) b.push_back(static_cast<std::uint8_t>(i % 10));
  return b;
}

inline void writePlain(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline void writeGz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}

inline Bytes readAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

}  // namespace groupsgd::dataset::testing
