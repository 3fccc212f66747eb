// Shared by the fuzz targets: the oracle check (abort with a line, so libFuzzer saves the
// input and the corpus replay fails) and the length-prefixed frame scheme of
// fuzz_decode_message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: fuzz oracle failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace groupsgd::fuzz {

// Input = frames, each a u16 little-endian length and then that many bytes; a length
// longer than what is left takes the rest. At most max_frames frames are cut.
inline std::vector<std::span<const std::uint8_t>> splitFrames(const std::uint8_t* data,
                                                              std::size_t size,
                                                              std::size_t max_frames) {
  std::vector<std::span<const std::uint8_t>> frames;
  std::size_t off = 0;
  while (off + 2 <= size && frames.size() < max_frames) {
    std::size_t len = data[off] | (static_cast<std::size_t>(data[off + 1]) << 8);
    off += 2;
    if (len > size - off) len = size - off;
    frames.emplace_back(data + off, len);
    off += len;
  }
  return frames;
}

// The inverse, for the seed generator.
inline void appendFrame(std::vector<std::uint8_t>* out, const void* bytes, std::size_t len) {
  out->push_back(static_cast<std::uint8_t>(len & 0xff));
  out->push_back(static_cast<std::uint8_t>((len >> 8) & 0xff));
  const auto* p = static_cast<const std::uint8_t*>(bytes);
  out->insert(out->end(), p, p + len);
}

}  // namespace groupsgd::fuzz
