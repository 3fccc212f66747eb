#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "groupsgd/common/atomic_file.h"

namespace groupsgd::dataset::detail {

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return fileError("open", path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fileError("fstat", path, errno);
  if (st.st_size <= 0) return invalidArgument(path + " is empty: nothing to map");
  const auto size = static_cast<std::size_t>(st.st_size);
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (addr == MAP_FAILED) return fileError("mmap", path, errno);
  return std::shared_ptr<const MappedFile>(new MappedFile(addr, size));
}

MappedFile::~MappedFile() { ::munmap(addr_, size_); }

}  // namespace groupsgd::dataset::detail
