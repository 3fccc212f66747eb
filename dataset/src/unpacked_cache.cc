#include "unpacked_cache.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "mapped_file.h"

namespace groupsgd::dataset::detail {
namespace {

namespace fs = std::filesystem;

// The gzip trailer: CRC-32 and size (mod 2^32) of the unpacked bytes.
struct GzipTrailer {
  std::uint32_t crc = 0;
  std::uint32_t size = 0;
};

std::uint32_t le32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}

std::optional<GzipTrailer> readTrailer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.seekg(-8, std::ios::end)) return std::nullopt;
  unsigned char raw[8];
  if (!in.read(reinterpret_cast<char*>(raw), 8)) return std::nullopt;
  return GzipTrailer{le32(raw), le32(raw + 4)};
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// FNV-1a: a stable name for (path, size, mtime); not a security boundary.
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// CRC-32 and size of a plain file, read through a mapping (the page cache, no copy).
std::optional<GzipTrailer> summarize(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return std::nullopt;
  const uLong crc = crc32_z(crc32(0L, Z_NULL, 0), (*file)->data(), (*file)->size());
  return GzipTrailer{static_cast<std::uint32_t>(crc), static_cast<std::uint32_t>((*file)->size())};
}

// Inflates gz_path whole, expecting `expected` bytes (the trailer's size); nothing on any
// error or when the stream holds more (a size that wrapped at 4 GiB, several members).
std::optional<std::string> inflateAll(const std::string& gz_path, std::uint32_t expected) {
  gzFile gz = gzopen(gz_path.c_str(), "rb");
  if (gz == nullptr) return std::nullopt;
  gzbuffer(gz, 1 << 17);
  std::string out;
  out.resize(std::size_t{expected} + 1);  // one more byte reveals an overrun
  std::size_t done = 0;
  while (done < out.size()) {
    const auto want = static_cast<unsigned>(std::min<std::size_t>(out.size() - done, 1u << 30));
    const int r = gzread(gz, out.data() + done, want);
    if (r <= 0) break;
    done += static_cast<std::size_t>(r);
  }
  int errnum = Z_OK;
  gzerror(gz, &errnum);
  gzclose(gz);
  if (errnum != Z_OK || done != expected) return std::nullopt;
  out.resize(done);
  return out;
}

}  // namespace

std::string dataCacheDir() {
  if (const char* env = std::getenv("GROUPSGD_DATA_CACHE"); env != nullptr) {
    const std::string dir = env;
    return dir == "off" ? "" : dir;
  }
  // systemd's CacheDirectory= (the units set it: a writable /var/cache/groupsgd under
  // ProtectSystem=strict); several paths are colon-separated, the first is ours.
  if (const char* unit = std::getenv("CACHE_DIRECTORY"); unit != nullptr && *unit == '/') {
    const std::string first = std::string(unit).substr(0, std::string(unit).find(':'));
    return first + "/datasets";
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/groupsgd/datasets";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    return std::string(home) + "/.cache/groupsgd/datasets";
  }
  return "";
}

std::optional<std::string> unpackedCopy(const std::string& gz_path) {
  const std::string dir = dataCacheDir();
  if (dir.empty()) return std::nullopt;
  std::error_code ec;
  const fs::path source = fs::absolute(gz_path, ec);
  struct stat st {};
  if (ec || ::stat(source.c_str(), &st) != 0) return std::nullopt;
  const auto trailer = readTrailer(source.string());
  if (!trailer) return std::nullopt;
  std::string name = source.filename().string();
  if (name.size() > 3 && name.ends_with(".gz")) name.resize(name.size() - 3);
  const std::string key = source.string() + "\n" + std::to_string(st.st_size) + "\n" +
                          std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec);
  const std::string copy = dir + "/" + name + "-" + hex64(fnv1a(key));

  if (fs::exists(copy, ec)) {
    const auto seen = summarize(copy);
    if (seen && seen->crc == trailer->crc && seen->size == trailer->size) return copy;
    GSGD_WARN("dataset cache: " << copy << " does not match " << source.string()
                                << " (CRC or size); unpacking it again");
  }
  const auto unpacked = inflateAll(source.string(), trailer->size);
  if (!unpacked) return std::nullopt;
  const std::uint32_t crc = static_cast<std::uint32_t>(crc32_z(
      crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(unpacked->data()), unpacked->size()));
  if (crc != trailer->crc || static_cast<std::uint32_t>(unpacked->size()) != trailer->size) {
    return std::nullopt;  // e.g. several gzip members: the trailer covers only the last
  }
  fs::create_directories(dir, ec);
  AtomicWriteOptions opts;
  static std::atomic<unsigned> writes{0};  // threads of one process stage apart
  opts.temp_path =
      copy + "." + std::to_string(::getpid()) + "-" + std::to_string(writes++) + ".tmp";
  if (Status s = writeFileAtomically(copy, std::string_view(*unpacked), opts); !s) {
    GSGD_DEBUG("dataset cache: not kept: " << s.toString());
    return std::nullopt;
  }
  return copy;
}

}  // namespace groupsgd::dataset::detail
