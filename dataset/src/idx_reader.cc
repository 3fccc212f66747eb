#include "idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "groupsgd/common/log.h"
#include "mapped_file.h"
#include "unpacked_cache.h"

namespace groupsgd::dataset::detail {
namespace {

constexpr std::size_t kReadChunk = std::size_t{16} << 20;  // grow the body this much at a time

gzFile asGz(void* p) { return static_cast<gzFile>(p); }

std::string describe(std::uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace

void IdxFile::Closer::operator()(void* f) const { gzclose(asGz(f)); }

IdxFile::IdxFile(std::string path, std::string read_path, bool gzipped, std::uint64_t file_size,
                 void* gz)
    : path_(std::move(path)),
      read_path_(std::move(read_path)),
      gzipped_(gzipped),
      file_size_(file_size),
      gz_(gz) {}

Result<IdxFile> IdxFile::open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return invalidArgument(path + " is a directory, expected an IDX file");
  }
  // Probe with stdio first: a clean errno for the message, the size, and the gzip magic.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = "cannot open " + path + ": " + std::strerror(err);
    if (err == ENOENT || err == ENOTDIR) return notFound(msg);
    if (err == EACCES || err == EPERM) return permissionDenied(msg);
    return unavailable(msg);
  }
  unsigned char magic[2] = {0, 0};
  const std::size_t got = std::fread(magic, 1, 2, f);
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fclose(f);
  const bool gzipped = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (gzipped) {
    // A verified plain copy from the host's dataset cache reads without inflating.
    if (auto copy = unpackedCopy(path)) {
      std::error_code size_ec;
      const auto copy_size = std::filesystem::file_size(*copy, size_ec);
      gzFile plain = size_ec ? nullptr : gzopen(copy->c_str(), "rb");
      if (plain != nullptr) {
        gzbuffer(plain, 1 << 17);
        return IdxFile(path, *copy, false, copy_size, plain);
      }
    }
  }

  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return unavailable("cannot open " + path + " with zlib");
  gzbuffer(gz, 1 << 17);
  return IdxFile(path, path, gzipped, size < 0 ? 0 : static_cast<std::uint64_t>(size), gz);
}

Result<std::size_t> IdxFile::readSome(std::uint8_t* dst, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const unsigned want = static_cast<unsigned>(std::min<std::size_t>(n - done, INT_MAX));
    const int r = gzread(asGz(gz_.get()), dst + done, want);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(asGz(gz_.get()), &errnum);
      return dataLoss(path_ + ": corrupt data (" + (msg ? msg : "zlib error") + ")");
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  return done;
}

Status IdxFile::readHeader(std::uint32_t expected_magic, std::vector<std::uint32_t>* dims) {
  std::vector<std::uint8_t> raw(4 * (1 + dims->size()));
  Result<std::size_t> got = readSome(raw.data(), raw.size());
  if (!got.isOk()) return got.status();
  if (*got != raw.size()) {
    return dataLoss(path_ + ": truncated header (" + describe(*got) + ", expected " +
                    describe(raw.size()) + ")");
  }
  auto be32 = [&](std::size_t i) {
    const std::uint8_t* p = raw.data() + 4 * i;
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
           std::uint32_t{p[3]};
  };
  const std::uint32_t magic = be32(0);
  if (magic != expected_magic) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ": bad IDX magic 0x%08x, expected 0x%08x", magic,
                  expected_magic);
    return dataLoss(path_ + buf);
  }
  for (std::size_t i = 0; i < dims->size(); ++i) (*dims)[i] = be32(i + 1);
  header_bytes_ = raw.size();
  return Status::ok();
}

Status IdxFile::readBody(std::size_t n, std::vector<std::uint8_t>* out) {
  // A plain file's size is known: refuse a short one before allocating for it.
  if (!gzipped_ && file_size_ < header_bytes_ + n) {
    return dataLoss(path_ + ": truncated, header promises " + describe(header_bytes_ + n) +
                    " but the file has " + describe(file_size_));
  }
  // Grow in chunks so a lying gzip header cannot make us allocate more than it holds.
  out->clear();
  while (out->size() < n) {
    const std::size_t old = out->size();
    out->resize(old + std::min(kReadChunk, n - old));
    Result<std::size_t> got = readSome(out->data() + old, out->size() - old);
    if (!got.isOk()) return got.status();
    if (old + *got != out->size()) {
      return dataLoss(path_ + ": truncated, header promises " + describe(header_bytes_ + n) +
                      " of data but it ends after " + describe(header_bytes_ + old + *got));
    }
  }
  std::uint8_t extra;
  Result<std::size_t> more = readSome(&extra, 1);
  if (!more.isOk()) return more.status();
  if (*more != 0) {
    return dataLoss(path_ + ": trailing data after the " + describe(header_bytes_ + n) +
                    " the header describes");
  }
  return Status::ok();
}

Status IdxFile::mapOrReadBody(std::size_t n, ImageBytes* out) {
  if (!gzipped_) {
    if (file_size_ < header_bytes_ + n) {
      return dataLoss(path_ + ": truncated, header promises " + describe(header_bytes_ + n) +
                      " but the file has " + describe(file_size_));
    }
    if (file_size_ > header_bytes_ + n) {
      return dataLoss(path_ + ": trailing data after the " + describe(header_bytes_ + n) +
                      " the header describes");
    }
    auto mapping = MappedFile::open(read_path_);
    if (mapping) {
      const std::uint8_t* body = (*mapping)->data() + header_bytes_;
      *out = ImageBytes::viewing(std::move(*mapping), body, n);
      return Status::ok();
    }
    GSGD_DEBUG(read_path_ << ": not mapped (" << mapping.status().toString() << "); reading it");
  }
  std::vector<std::uint8_t> bytes;
  GSGD_RETURN_IF_ERROR(readBody(n, &bytes));
  *out = ImageBytes::owning(std::move(bytes));
  return Status::ok();
}

}  // namespace groupsgd::dataset::detail
