// A whole file mapped read-only (mmap), unmapped when the last owner lets go.
// Thread rule: immutable once opened; any thread may read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "groupsgd/common/status.h"

namespace groupsgd::dataset::detail {

class MappedFile {
 public:
  // Errors name the file and errno; an empty file is refused (nothing to map).
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return static_cast<const std::uint8_t*>(addr_); }
  std::size_t size() const { return size_; }

 private:
  MappedFile(void* addr, std::size_t size) : addr_(addr), size_(size) {}
  void* addr_;
  std::size_t size_;
};

}  // namespace groupsgd::dataset::detail
