// Durable whole-file writes: a reader (or the next process after a crash) sees either the
// old file or the complete new one, never a torn one.
// Thread rule: free functions with no shared state; any thread. Two writers of one path
// must use different temp paths (the default one includes the pid).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "groupsgd/common/status.h"

namespace groupsgd {

// A file descriptor closed on scope exit unless closed explicitly (close(2) can report a
// deferred write error, so writers close it themselves and check).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

struct AtomicWriteOptions {
  mode_t mode = 0644;     // applied with fchmod, so the umask does not narrow it
  bool replace = true;    // false: refuse (kFailedPrecondition) when path already exists
  std::string temp_path;  // where the data is staged; "" = PATH.PID.tmp
};

// Writes the parts, in order, to a temp file in path's directory, fsyncs it, moves it to
// path (rename, or link when !replace so an existing file is never overwritten) and
// fsyncs the directory. The temp file is removed on failure. Errors name the file and
// errno: ENOSPC/EDQUOT -> kResourceExhausted, EACCES/EPERM/EROFS -> kPermissionDenied,
// ENOENT/ENOTDIR -> kNotFound, others kUnavailable.
Status writeFileAtomically(const std::string& path, std::initializer_list<std::string_view> parts,
                           const AtomicWriteOptions& options = {});
inline Status writeFileAtomically(const std::string& path, std::string_view text,
                                  const AtomicWriteOptions& options = {}) {
  return writeFileAtomically(path, {text}, options);
}

// A failed system call as a Status: "OP PATH: strerror(err)", coded as above.
Status fileError(const std::string& op, const std::string& path, int err);

// Fsyncs a directory so renames and creations in it survive a crash.
Status fsyncDirectory(const std::string& dir);

}  // namespace groupsgd
