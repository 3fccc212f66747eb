#include "groupsgd/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace groupsgd {
namespace {

Status writeAll(int fd, std::string_view data, const std::string& path) {
  const char* p = data.data();
  std::size_t size = data.size();
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<std::size_t>(size, 1u << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fileError("write", path, errno);
    }
    if (n == 0) return fileError("write", path, EIO);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::ok();
}

std::string directoryOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status writeTemp(const std::string& tmp, std::initializer_list<std::string_view> parts,
                 mode_t mode) {
  // A leftover of a crashed writer with the same temp name; O_EXCL reports any that stays.
  ::unlink(tmp.c_str());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (fd.get() < 0) return fileError("create", tmp, errno);
  if (::fchmod(fd.get(), mode) != 0) return fileError("chmod", tmp, errno);
  for (std::string_view part : parts) GSGD_RETURN_IF_ERROR(writeAll(fd.get(), part, tmp));
  if (::fsync(fd.get()) != 0) return fileError("fsync", tmp, errno);
  if (fd.close() != 0) return fileError("close", tmp, errno);
  return Status::ok();
}

}  // namespace

Status fileError(const std::string& op, const std::string& path, int err) {
  std::string msg = op + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return resourceExhausted(std::move(msg));
  if (err == EACCES || err == EPERM || err == EROFS) return permissionDenied(std::move(msg));
  if (err == ENOENT || err == ENOTDIR) return notFound(std::move(msg));
  if (err == EEXIST) return failedPrecondition(std::move(msg));
  return unavailable(std::move(msg));
}

Status fsyncDirectory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return fileError("open directory", dir, errno);
  if (::fsync(fd.get()) != 0) return fileError("fsync directory", dir, errno);
  if (fd.close() != 0) return fileError("close directory", dir, errno);
  return Status::ok();
}

Status writeFileAtomically(const std::string& path, std::initializer_list<std::string_view> parts,
                           const AtomicWriteOptions& options) {
  if (path.empty()) return invalidArgument("writeFileAtomically: empty path");
  const std::string tmp = options.temp_path.empty()
                              ? path + "." + std::to_string(::getpid()) + ".tmp"
                              : options.temp_path;
  Status s = writeTemp(tmp, parts, options.mode);
  if (s.isOk()) {
    if (options.replace) {
      if (::rename(tmp.c_str(), path.c_str()) != 0)
        s = fileError("rename " + tmp + " to", path, errno);
    } else {
      // link(2) fails with EEXIST on any existing entry, a dangling link included.
      if (::link(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        s = err == EEXIST ? failedPrecondition(path + " exists; refusing to overwrite it")
                          : fileError("link " + tmp + " to", path, err);
      }
    }
  }
  if (!s.isOk() || !options.replace) ::unlink(tmp.c_str());
  if (!s.isOk()) return s;
  // The new name is durable only once the directory is synced.
  return fsyncDirectory(directoryOf(path));
}

}  // namespace groupsgd
