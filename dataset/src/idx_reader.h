// One IDX file opened through zlib (which reads gzip and plain files alike): the header's
// magic and big-endian dims, then the body. Thread rule: one thread per IdxFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"
#include "groupsgd/dataset/idx.h"

namespace groupsgd::dataset::detail {

class IdxFile {
 public:
  // kNotFound when the file does not exist; the path is in every message.
  static Result<IdxFile> open(const std::string& path);

  // Reads the magic (must equal expected_magic, else kDataLoss) and dims.size() dims.
  Status readHeader(std::uint32_t expected_magic, std::vector<std::uint32_t>* dims);
  // Reads exactly n body bytes into *out and checks nothing follows them.
  Status readBody(std::size_t n, std::vector<std::uint8_t>* out);
  // The same checks; a plain file's body is mapped read-only instead of read.
  Status mapOrReadBody(std::size_t n, ImageBytes* out);

  const std::string& path() const { return path_; }
  bool gzipped() const { return gzipped_; }

 private:
  struct Closer {
    void operator()(void* f) const;
  };
  IdxFile(std::string path, std::string read_path, bool gzipped, std::uint64_t file_size, void* gz);
  // Reads up to n bytes; fails with kDataLoss on a zlib error.
  Result<std::size_t> readSome(std::uint8_t* dst, std::size_t n);

  std::string path_;                // the file asked for: every message names it
  std::string read_path_;           // the file read: path_, or its unpacked copy from the cache
  bool gzipped_ = false;            // of the file read
  std::uint64_t file_size_ = 0;     // on disk, compressed or not
  std::uint64_t header_bytes_ = 0;  // consumed by readHeader
  std::unique_ptr<void, Closer> gz_;
};

}  // namespace groupsgd::dataset::detail
