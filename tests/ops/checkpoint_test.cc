// Checkpoints: round trip, pruning, skipping damaged newest files, temp files, loud
// failures on a read-only directory and a full disk (tiny tmpfs), and a writer killed
// at random points always leaving a loadable old-or-new checkpoint.
#include "groupsgd/centralps/checkpoint.h"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <thread>

#include "temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using groupsgd::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<float> model(std::size_t n, float seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = seed + 0.001f * static_cast<float>(i);
  return v;
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> filesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool anyContains(const std::vector<std::string>& lines, const std::string& needle) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(needle) != std::string::npos; });
}

std::uint32_t le32(const std::string& b, std::size_t off) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[off + i]);
  return v;
}
void putLe32(std::string* b, std::size_t off, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) (*b)[off + i] = static_cast<char>(v >> (8 * i));
}
// One bit changed at byte `at`.
std::string flipped(std::string b, std::size_t at) {
  b.at(at) = static_cast<char>(b.at(at) ^ 0x10);
  return b;
}

// Recomputes both checksums after a deliberate edit, so only the semantic check can fail.
void fixChecksums(std::string* b) {
  const auto* p = reinterpret_cast<const Bytef*>(b->data());
  putLe32(b, 44, static_cast<std::uint32_t>(crc32(0, p + 64, static_cast<uInt>(b->size() - 64))));
  putLe32(b, 60, static_cast<std::uint32_t>(crc32(0, p, 60)));
}

// A tmpfs mounted on a fresh directory for the test; skipped where mounting is denied.
class TinyTmpfs {
 public:
  explicit TinyTmpfs(const std::string& size) {
    if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0) {
      mounted_ = true;
    } else {
      why_ = std::strerror(errno);
    }
  }
  ~TinyTmpfs() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path(); }
  bool remount(bool read_only) {
    return ::mount("tmpfs", dir_.path().c_str(), "tmpfs", MS_REMOUNT | (read_only ? MS_RDONLY : 0),
                   nullptr) == 0;
  }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

}  // namespace

TEST_CASE("checkpoint: file name has the version in 20 digits") {
  CHECK(checkpointFileName(42) == "ckpt-00000000000000000042.gsgd");
  CHECK(checkpointFileName(0) == "ckpt-00000000000000000000.gsgd");
  CHECK(checkpointFileName(UINT64_MAX) == "ckpt-18446744073709551615.gsgd");
}

TEST_CASE("checkpoint: round trip and the header bytes") {
  TempDir dir;
  const auto params = model(1000, 0.5f);
  CheckpointWriteInfo info;
  REQUIRE(writeCheckpoint(dir.path(), 7, params, 3, &info).isOk());
  CHECK(info.path == dir.file("ckpt-00000000000000000007.gsgd"));
  CHECK(info.pruned.empty());
  CHECK(filesIn(dir.path()) == std::vector<std::string>{"ckpt-00000000000000000007.gsgd"});

  const std::string bytes = readBytes(info.path);
  REQUIRE(bytes.size() == 64 + 4000);
  CHECK(bytes.substr(0, 8) == "GSGDCKPT");
  CHECK(le32(bytes, 8) == 1);      // format version
  CHECK(le32(bytes, 12) == 64);    // header size
  CHECK(le32(bytes, 16) == 7);     // model version (low half)
  CHECK(le32(bytes, 24) == 1000);  // element count (low half)
  CHECK(le32(bytes, 32) == 4000);  // payload bytes (low half)
  CHECK(le32(bytes, 40) == 1);     // dtype float32
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  CHECK(le32(bytes, 44) == crc32(0, p + 64, 4000));
  CHECK(le32(bytes, 60) == crc32(0, p, 60));
  CHECK((fs::status(info.path).permissions() & fs::perms::others_all) == fs::perms::none);

  auto loaded = loadNewestCheckpoint(dir.path(), 1000);
  REQUIRE_MESSAGE(loaded.isOk(), loaded.status().toString());
  CHECK(loaded->version == 7);
  CHECK(loaded->path == info.path);
  CHECK(loaded->params == params);
  CHECK(loaded->warnings.empty());
  CHECK(loadNewestCheckpoint(dir.path(), 0).isOk());  // 0: any size

  // The same version again replaces the file.
  REQUIRE(writeCheckpoint(dir.path(), 7, model(1000, 2.0f), 3).isOk());
  CHECK(loadNewestCheckpoint(dir.path(), 1000)->params == model(1000, 2.0f));
  CHECK(filesIn(dir.path()).size() == 1);
}

TEST_CASE("checkpoint: keep_last prunes the oldest") {
  TempDir dir;
  CheckpointWriteInfo info;
  for (std::uint64_t v = 1; v <= 5; ++v) {
    info = {};
    REQUIRE(writeCheckpoint(dir.path(), v, model(10, static_cast<float>(v)), 2, &info).isOk());
  }
  CHECK(filesIn(dir.path()) == std::vector<std::string>{"ckpt-00000000000000000004.gsgd",
                                                        "ckpt-00000000000000000005.gsgd"});
  CHECK(info.pruned == std::vector<std::string>{dir.file("ckpt-00000000000000000003.gsgd")});
  // An older version written later is kept even though it is not among the newest two.
  REQUIRE(writeCheckpoint(dir.path(), 2, model(10, 2), 2, &info).isOk());
  CHECK(filesIn(dir.path()).size() == 3);
  CHECK(loadNewestCheckpoint(dir.path(), 10)->version == 5);
  CHECK(writeCheckpoint(dir.path(), 9, model(10, 9), 0).code() == Code::kInvalidArgument);
}

TEST_CASE("checkpoint: a damaged newest file is skipped in favour of the previous one") {
  TempDir dir;
  REQUIRE(writeCheckpoint(dir.path(), 1, model(256, 1), 5).isOk());
  REQUIRE(writeCheckpoint(dir.path(), 2, model(256, 2), 5).isOk());
  const std::string newest = dir.file(checkpointFileName(2));
  const std::string original = readBytes(newest);

  struct Damage {
    const char* name;
    std::function<std::string(std::string)> apply;
    const char* reason;
  };
  const std::vector<Damage> damages = {
      {"truncated payload", [](std::string b) { return b.substr(0, b.size() / 2); }, "truncated"},
      {"truncated header", [](std::string b) { return b.substr(0, 30); }, "truncated"},
      {"empty file", [](std::string) { return std::string(); }, "truncated"},
      {"flipped payload byte", [](std::string b) { return flipped(std::move(b), 64 + 100); },
       "payload checksum"},
      {"flipped header byte", [](std::string b) { return flipped(std::move(b), 20); },
       "header checksum"},
      {"bad magic", [](std::string b) { return b.replace(0, 1, "X"); }, "bad magic"},
      {"trailing bytes", [](std::string b) { return b + "junk"; }, "after the payload"},
      {"NaN with valid checksums",
       [](std::string b) {
         const float nan = std::nanf("");
         std::memcpy(&b[64 + 8], &nan, 4);
         fixChecksums(&b);
         return b;
       },
       "non-finite"},
      {"future format version",
       [](std::string b) {
         putLe32(&b, 8, 3);  // 1 and 2 are known
         fixChecksums(&b);
         return b;
       },
       "format version"},
  };
  for (const auto& d : damages) {
    CAPTURE(d.name);
    writeBytes(newest, d.apply(original));
    auto loaded = loadNewestCheckpoint(dir.path(), 256);
    REQUIRE_MESSAGE(loaded.isOk(), loaded.status().toString());
    CHECK(loaded->version == 1);
    CHECK(loaded->params == model(256, 1));
    REQUIRE(loaded->warnings.size() == 1);
    CHECK(loaded->warnings[0].find(checkpointFileName(2)) != std::string::npos);
    CHECK(loaded->warnings[0].find(d.reason) != std::string::npos);
  }
}

TEST_CASE("checkpoint: wrong size, misnamed, and all-bad directories") {
  TempDir dir;
  REQUIRE(writeCheckpoint(dir.path(), 1, model(100, 1), 5).isOk());
  REQUIRE(writeCheckpoint(dir.path(), 3, model(200, 3), 5).isOk());  // another model size
  auto loaded = loadNewestCheckpoint(dir.path(), 100);
  REQUIRE(loaded.isOk());
  CHECK(loaded->version == 1);
  CHECK(anyContains(loaded->warnings, "holds 200 parameters"));

  // A file renamed to a newer version than its header says.
  fs::copy_file(dir.file(checkpointFileName(1)), dir.file(checkpointFileName(9)));
  loaded = loadNewestCheckpoint(dir.path(), 100);
  REQUIRE(loaded.isOk());
  CHECK(loaded->version == 1);
  CHECK(anyContains(loaded->warnings, "header says version 1"));
  CHECK(loaded->warnings.size() == 2);

  auto none = loadNewestCheckpoint(dir.path(), 7);  // no file holds 7 parameters
  REQUIRE(!none.isOk());
  CHECK(none.status().code() == Code::kDataLoss);
  CHECK(none.status().message().find(checkpointFileName(3)) != std::string::npos);

  TempDir empty;
  CHECK(loadNewestCheckpoint(empty.path(), 7).status().code() == Code::kNotFound);
  CHECK(loadNewestCheckpoint(empty.file("missing"), 7).status().code() == Code::kNotFound);
  CHECK(writeCheckpoint(empty.file("missing"), 1, model(3, 1), 1).code() == Code::kNotFound);
}

TEST_CASE("checkpoint: leftover temp files are ignored by the loader and cleaned by the writer") {
  TempDir dir;
  REQUIRE(writeCheckpoint(dir.path(), 4, model(64, 4), 3).isOk());
  const std::string leftover = dir.file(".ckpt-00000000000000000005.gsgd.12345.tmp");
  writeBytes(leftover, "half a checkpoint");
  writeBytes(dir.file("notes.txt"), "unrelated");
  writeBytes(dir.file("ckpt-5.gsgd"), "not a checkpoint name");
  auto loaded = loadNewestCheckpoint(dir.path(), 64);
  REQUIRE(loaded.isOk());
  CHECK(loaded->version == 4);
  CHECK(loaded->warnings.empty());
  CheckpointWriteInfo info;
  REQUIRE(writeCheckpoint(dir.path(), 6, model(64, 6), 3, &info).isOk());
  CHECK(!fs::exists(leftover));
  CHECK(std::find(info.pruned.begin(), info.pruned.end(), leftover) != info.pruned.end());
  CHECK(fs::exists(dir.file("notes.txt")));
  CHECK(fs::exists(dir.file("ckpt-5.gsgd")));
}

TEST_CASE("checkpoint: a non-finite model is refused before anything is written") {
  TempDir dir;
  auto params = model(10, 1);
  params[3] = INFINITY;
  const Status s = writeCheckpoint(dir.path(), 1, params, 2);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(filesIn(dir.path()).empty());
}

TEST_CASE("checkpoint: writing into a read-only directory fails loudly; the old one stays") {
  const auto params_old = model(500, 1);
  auto check = [&](const std::string& dir) {
    const Status s = writeCheckpoint(dir, 2, model(500, 2), 2);
    REQUIRE(!s.isOk());
    CHECK(s.code() == Code::kPermissionDenied);
    CHECK(s.message().find(dir) != std::string::npos);  // names the file
    CHECK(s.message().find(".tmp") != std::string::npos);
    const bool errno_text = s.message().find(std::strerror(EROFS)) != std::string::npos ||
                            s.message().find(std::strerror(EACCES)) != std::string::npos;
    CHECK(errno_text);
    auto loaded = loadNewestCheckpoint(dir, 500);
    REQUIRE(loaded.isOk());
    CHECK(loaded->version == 1);
    CHECK(loaded->params == params_old);
  };
  if (::geteuid() != 0) {
    TempDir dir;
    REQUIRE(writeCheckpoint(dir.path(), 1, params_old, 2).isOk());
    fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
    check(dir.path());
    fs::permissions(dir.path(), fs::perms::owner_all);
    return;
  }
  // Root ignores directory permissions: use a tmpfs remounted read-only.
  TinyTmpfs tmpfs("1m");
  if (!tmpfs.mounted()) {
    MESSAGE("SKIPPED read-only test: running as root and cannot mount a tmpfs (" << tmpfs.why()
                                                                                 << ")");
    return;
  }
  REQUIRE(writeCheckpoint(tmpfs.path(), 1, params_old, 2).isOk());
  REQUIRE(tmpfs.remount(/*read_only=*/true));
  check(tmpfs.path());
  REQUIRE(tmpfs.remount(/*read_only=*/false));
}

TEST_CASE("checkpoint: a full disk (ENOSPC on a 64 KiB tmpfs) fails loudly; the old one stays") {
  TinyTmpfs tmpfs("64k");
  if (!tmpfs.mounted()) {
    MESSAGE("SKIPPED ENOSPC test: cannot mount a tmpfs (" << tmpfs.why() << ")");
    return;
  }
  // 6000 floats = 24 KiB + 64 bytes: two fit in 64 KiB, the third temp file does not.
  const std::size_t n = 6000;
  REQUIRE(writeCheckpoint(tmpfs.path(), 1, model(n, 1), 2).isOk());
  REQUIRE(writeCheckpoint(tmpfs.path(), 2, model(n, 2), 2).isOk());
  const Status s = writeCheckpoint(tmpfs.path(), 3, model(n, 3), 2);
  REQUIRE(!s.isOk());
  CHECK(s.code() == Code::kResourceExhausted);
  CHECK(s.message().find(std::strerror(ENOSPC)) != std::string::npos);
  CHECK(s.message().find(tmpfs.path() + "/.ckpt-00000000000000000003.gsgd") != std::string::npos);
  CHECK(filesIn(tmpfs.path()) == std::vector<std::string>{"ckpt-00000000000000000001.gsgd",
                                                          "ckpt-00000000000000000002.gsgd"});
  auto loaded = loadNewestCheckpoint(tmpfs.path(), n);
  REQUIRE(loaded.isOk());
  CHECK(loaded->version == 2);
  CHECK(loaded->params == model(n, 2));
}

TEST_CASE("checkpoint: a writer killed at random points leaves the old or the new checkpoint") {
  TempDir dir;
  const std::size_t n = 50000;  // 200 KB: a write takes long enough to be cut
  auto valueOf = [](std::uint64_t v) { return static_cast<float>(v); };
  REQUIRE(writeCheckpoint(dir.path(), 0, std::vector<float>(n, valueOf(0)), 2).isOk());
  std::mt19937 rng(12345);
  std::uint64_t newest_seen = 0;
  for (int round = 0; round < 30; ++round) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (std::uint64_t v = newest_seen + 1;; ++v) {
        if (!writeCheckpoint(dir.path(), v, std::vector<float>(n, valueOf(v)), 2).isOk()) _exit(3);
      }
    }
    // A random time on purpose: the kill lands anywhere in a checkpoint's write.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    auto loaded = loadNewestCheckpoint(dir.path(), n);
    REQUIRE_MESSAGE(loaded.isOk(), loaded.status().toString());
    CHECK(loaded->warnings.empty());  // never a torn file under a final name
    CHECK(loaded->version >= newest_seen);
    const bool consistent = std::all_of(loaded->params.begin(), loaded->params.end(),
                                        [&](float x) { return x == valueOf(loaded->version); });
    CHECK(consistent);
    newest_seen = loaded->version;
  }
  MESSAGE("killed the writer 30 times; reached version " << newest_seen);
}
