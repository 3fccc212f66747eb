#include "groupsgd/common/atomic_file.h"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/temp_dir.h"

using namespace groupsgd;
using groupsgd::testing::TempDir;

namespace {

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

unsigned modeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

}  // namespace

TEST_CASE("writeFileAtomically: writes the parts in order and leaves no temp file") {
  TempDir dir;
  const auto path = dir.file("out.json");
  REQUIRE(writeFileAtomically(path, {"ab", "", "cd\n"}).isOk());
  CHECK(readAll(path) == "abcd\n");
  CHECK(dir.entries() == 1);
  CHECK(modeOf(path) == 0644);
}

TEST_CASE("writeFileAtomically: replaces an existing file whole") {
  TempDir dir;
  const auto path = dir.file("state");
  REQUIRE(writeFileAtomically(path, std::string(10000, 'x')).isOk());
  REQUIRE(writeFileAtomically(path, "short").isOk());
  CHECK(readAll(path) == "short");
  CHECK(dir.entries() == 1);
}

TEST_CASE("writeFileAtomically: the mode is applied regardless of the umask") {
  TempDir dir;
  const auto path = dir.file("secret");
  const mode_t old = ::umask(0077);
  AtomicWriteOptions how;
  how.mode = 0644;
  const Status s = writeFileAtomically(path, "k", how);
  ::umask(old);
  REQUIRE(s.isOk());
  CHECK(modeOf(path) == 0644);
  how.mode = 0600;
  REQUIRE(writeFileAtomically(dir.file("private"), "k", how).isOk());
  CHECK(modeOf(dir.file("private")) == 0600);
}

TEST_CASE("writeFileAtomically: replace = false refuses an existing file or link, untouched") {
  TempDir dir;
  const auto path = dir.file("key");
  AtomicWriteOptions how;
  how.replace = false;
  REQUIRE(writeFileAtomically(path, "first", how).isOk());
  const Status again = writeFileAtomically(path, "second", how);
  CHECK(again.code() == Code::kFailedPrecondition);
  CHECK(again.message().find(path) != std::string::npos);
  CHECK(readAll(path) == "first");
  // A dangling symlink is not followed either.
  const auto link = dir.file("dangling");
  REQUIRE(::symlink(dir.file("nowhere").c_str(), link.c_str()) == 0);
  CHECK(writeFileAtomically(link, "x", how).code() == Code::kFailedPrecondition);
  CHECK_FALSE(std::filesystem::exists(dir.file("nowhere")));
  CHECK(dir.entries() == 2);  // key and the link: no temp file left behind
}

TEST_CASE("writeFileAtomically: a missing directory is kNotFound naming the temp file") {
  TempDir dir;
  const Status s = writeFileAtomically(dir.file("no/such/dir/f"), "x");
  CHECK(s.code() == Code::kNotFound);
  CHECK(s.message().find(".tmp") != std::string::npos);
}

TEST_CASE("writeFileAtomically: a given temp path is used and removed") {
  TempDir dir;
  AtomicWriteOptions how;
  how.temp_path = dir.file(".staged.tmp");
  REQUIRE(writeFileAtomically(dir.file("f"), "x", how).isOk());
  CHECK_FALSE(std::filesystem::exists(how.temp_path));
  CHECK(readAll(dir.file("f")) == "x");
}

TEST_CASE("writeFileAtomically: an unwritable directory is kPermissionDenied") {
  if (::geteuid() == 0) return;  // root writes anywhere
  TempDir dir;
  std::filesystem::create_directories(dir.file("ro"));
  ::chmod(dir.file("ro").c_str(), 0500);
  const Status s = writeFileAtomically(dir.file("ro/f"), "x");
  ::chmod(dir.file("ro").c_str(), 0700);
  CHECK(s.code() == Code::kPermissionDenied);
}
