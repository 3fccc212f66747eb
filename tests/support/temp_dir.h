// A temporary directory for one test, removed with everything in it at the end (process
// tests that keep their directory for a post-mortem use makeTempDir(), process.h).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace groupsgd::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/groupsgd-ops.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace groupsgd::testing
