#include "groupsgd/centralps/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"

namespace groupsgd::centralps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoints store float32 little-endian; add a byte swap for this host");

constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".gsgd";
constexpr std::string_view kTempPrefix = ".ckpt-";
constexpr std::string_view kTempSuffix = ".tmp";
constexpr std::size_t kVersionDigits = 20;

// Header field offsets (docs/operations.md, "Checkpoint file format").
constexpr std::size_t kOffMagic = 0, kOffFormat = 8, kOffHeaderBytes = 12, kOffVersion = 16,
                      kOffCount = 24, kOffByteLength = 32, kOffDtype = 40, kOffPayloadCrc = 44,
                      kOffWrittenNs = 48, kOffReserved = 56, kOffHeaderCrc = 60;

void put32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t get32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// zlib's CRC-32 (IEEE 802.3), fed in chunks because its length is 32-bit.
std::uint32_t crc32Of(const void* data, std::size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const std::size_t chunk = std::min<std::size_t>(size, 1u << 30);
    crc = crc32(crc, p, static_cast<uInt>(chunk));
    p += chunk;
    size -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

std::string joinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// A failed system call on a checkpoint file, as a Status naming the file and errno.
Status ioError(const std::string& op, const std::string& path, int err) {
  const Status s = fileError(op, path, err);
  return Status(s.code(), "checkpoint: " + s.message());
}

// Reads exactly size bytes; a short file is reported as truncation by the caller.
Status readAll(int fd, void* data, std::size_t size, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, std::min<std::size_t>(size, 1u << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ioError("read", path, errno);
    }
    if (n == 0) return dataLoss("checkpoint: " + path + ": truncated while reading");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::ok();
}

bool parseName(std::string_view name, std::uint64_t* version) {
  if (name.size() != kPrefix.size() + kVersionDigits + kSuffix.size()) return false;
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  if (name.substr(name.size() - kSuffix.size()) != kSuffix) return false;
  const std::string_view digits = name.substr(kPrefix.size(), kVersionDigits);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), *version);
  return res.ec == std::errc() && res.ptr == digits.data() + digits.size();
}

bool isTempName(std::string_view name) {
  return name.size() > kTempPrefix.size() + kTempSuffix.size() &&
         name.substr(0, kTempPrefix.size()) == kTempPrefix &&
         name.substr(name.size() - kTempSuffix.size()) == kTempSuffix;
}

// Optimizer section offsets (format 2, after the payload; docs/operations.md).
constexpr std::size_t kOffOptKind = 0, kOffOptBuffers = 4, kOffOptSteps = 8, kOffOptCrc = 16,
                      kOffOptHeaderCrc = 20;
// What an optimizer kind is called in the file (its own numbering, never the enum's order).
constexpr std::pair<kernels::OptimizerKind, std::uint32_t> kOptimizerCodes[] = {
    {kernels::OptimizerKind::kSgd, 0},
    {kernels::OptimizerKind::kMomentum, 1},
    {kernels::OptimizerKind::kNesterov, 2},
    {kernels::OptimizerKind::kAdam, 3},
    {kernels::OptimizerKind::kAdamW, 4}};

std::uint32_t codeOf(kernels::OptimizerKind kind) {
  for (const auto& [k, code] : kOptimizerCodes) {
    if (k == kind) return code;
  }
  return 0;
}

bool kindOf(std::uint32_t code, kernels::OptimizerKind* kind) {
  for (const auto& [k, c] : kOptimizerCodes) {
    if (c == code) {
      *kind = k;
      return true;
    }
  }
  return false;
}

bool allFinite(std::span<const float> v, std::size_t* bad) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      *bad = i;
      return false;
    }
  }
  return true;
}

void fillOptimizerSection(unsigned char (&section)[kCheckpointOptimizerSectionBytes],
                          const kernels::OptimizerSnapshot& opt) {
  put32(section + kOffOptKind, codeOf(opt.kind));
  put32(section + kOffOptBuffers, opt.buffers);
  put64(section + kOffOptSteps, opt.steps);
  put32(section + kOffOptCrc, crc32Of(opt.values.data(), opt.values.size() * sizeof(float)));
  put32(section + kOffOptHeaderCrc, crc32Of(section, kOffOptHeaderCrc));
}

// The file's header: format, version, sizes and CRCs (docs/operations.md).
void fillHeader(unsigned char (&header)[kCheckpointHeaderBytes], std::uint32_t format,
                std::uint64_t version, std::span<const float> params) {
  const std::uint64_t count = params.size();
  const std::uint64_t bytes = count * sizeof(float);
  std::memcpy(header + kOffMagic, kCheckpointMagic, sizeof kCheckpointMagic);
  put32(header + kOffFormat, format);
  put32(header + kOffHeaderBytes, kCheckpointHeaderBytes);
  put64(header + kOffVersion, version);
  put64(header + kOffCount, count);
  put64(header + kOffByteLength, bytes);
  put32(header + kOffDtype, kCheckpointDtypeFloat32);
  put32(header + kOffPayloadCrc, crc32Of(params.data(), bytes));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  put64(header + kOffWrittenNs,
        static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  put32(header + kOffReserved, 0);
  put32(header + kOffHeaderCrc, crc32Of(header, kOffHeaderCrc));
}

// Deletes checkpoints beyond keep_last (never `keep`) and leftover temp files.
void prune(const std::string& dir, std::size_t keep_last, const std::string& keep,
           CheckpointWriteInfo* info) {
  auto listed = listCheckpoints(dir);
  if (!listed) {
    info->warnings.push_back("prune: " + listed.status().message());
    return;
  }
  std::size_t kept = 0;
  for (const auto& [version, path] : *listed) {
    if (path == keep || kept < keep_last) {
      kept += 1;
      continue;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      info->warnings.push_back(ioError("unlink", path, errno).message());
    } else {
      info->pruned.push_back(path);
    }
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    if (!isTempName(e->d_name)) continue;
    const std::string path = joinPath(dir, e->d_name);
    if (::unlink(path.c_str()) == 0) info->pruned.push_back(path);
  }
  ::closedir(d);
}

// The optimizer section of a format 2 file (`left` bytes remain after the model).
Status readOptimizerSection(int fd, const std::string& path, std::uint64_t count,
                            std::uint64_t left, kernels::OptimizerSnapshot* out) {
  auto corrupt = [&](const std::string& why) { return dataLoss(path + ": " + why); };
  if (left < kCheckpointOptimizerSectionBytes) {
    return corrupt("truncated: the optimizer section needs " +
                   std::to_string(kCheckpointOptimizerSectionBytes) + " bytes, " +
                   std::to_string(left) + " left");
  }
  unsigned char section[kCheckpointOptimizerSectionBytes];
  GSGD_RETURN_IF_ERROR(readAll(fd, section, sizeof section, path));
  if (get32(section + kOffOptHeaderCrc) != crc32Of(section, kOffOptHeaderCrc)) {
    return corrupt("optimizer section checksum mismatch");
  }
  kernels::OptimizerSnapshot opt;
  if (!kindOf(get32(section + kOffOptKind), &opt.kind)) {
    return corrupt("unknown optimizer code " + std::to_string(get32(section + kOffOptKind)));
  }
  opt.buffers = get32(section + kOffOptBuffers);
  opt.steps = get64(section + kOffOptSteps);
  if (opt.buffers != kernels::optimizerStateBuffers(opt.kind) || opt.buffers == 0) {
    return corrupt(std::to_string(opt.buffers) + " optimizer buffers for " +
                   kernels::optimizerKindName(opt.kind));
  }
  const std::uint64_t state_bytes = opt.buffers * count * sizeof(float);
  if (left - kCheckpointOptimizerSectionBytes != state_bytes) {
    return corrupt(left < kCheckpointOptimizerSectionBytes + state_bytes
                       ? "truncated optimizer state"
                       : std::to_string(left - kCheckpointOptimizerSectionBytes - state_bytes) +
                             " bytes after the optimizer state");
  }
  opt.values.resize(opt.buffers * count);
  GSGD_RETURN_IF_ERROR(readAll(fd, opt.values.data(), state_bytes, path));
  if (get32(section + kOffOptCrc) != crc32Of(opt.values.data(), state_bytes)) {
    return corrupt("optimizer state checksum mismatch");
  }
  std::size_t bad = 0;
  if (!allFinite(opt.values, &bad)) {
    return corrupt("non-finite optimizer state at index " + std::to_string(bad));
  }
  *out = std::move(opt);
  return Status::ok();
}

}  // namespace

std::string checkpointFileName(std::uint64_t version) {
  std::string digits = std::to_string(version);
  return std::string(kPrefix) + std::string(kVersionDigits - digits.size(), '0') + digits +
         std::string(kSuffix);
}

namespace {

Status checkWritable(std::span<const float> params, const kernels::OptimizerSnapshot* optimizer) {
  if (params.size() > std::numeric_limits<std::uint64_t>::max() / sizeof(float)) {
    return invalidArgument("checkpoint: too many parameters");
  }
  std::size_t bad = 0;
  if (!allFinite(params, &bad)) {
    return invalidArgument("checkpoint: refusing a model with a non-finite parameter at index " +
                           std::to_string(bad));
  }
  const bool with_optimizer = optimizer != nullptr && optimizer->buffers > 0;
  if (with_optimizer) {
    if (optimizer->buffers != kernels::optimizerStateBuffers(optimizer->kind) ||
        optimizer->values.size() != optimizer->buffers * params.size()) {
      return invalidArgument("checkpoint: optimizer state of " +
                             std::to_string(optimizer->values.size()) + " values in " +
                             std::to_string(optimizer->buffers) + " buffers for " +
                             kernels::optimizerKindName(optimizer->kind) + " over " +
                             std::to_string(params.size()) + " parameters");
    }
    if (!allFinite(optimizer->values, &bad)) {
      return invalidArgument(
          "checkpoint: refusing an optimizer state with a non-finite value at index " +
          std::to_string(bad));
    }
  }
  return Status::ok();
}

// Writes one checkpoint file's bytes (header, parameters and, with an optimizer state, its
// section and values) to path through writeFileAtomically with `how`.
Status writeCheckpointBytes(const std::string& path, std::uint64_t version,
                            std::span<const float> params,
                            const kernels::OptimizerSnapshot* optimizer, AtomicWriteOptions how) {
  const bool with_optimizer = optimizer != nullptr && optimizer->buffers > 0;
  unsigned char header[kCheckpointHeaderBytes] = {};
  fillHeader(header, with_optimizer ? kCheckpointFormatVersion : kCheckpointFormatModelOnly,
             version, params);
  unsigned char section[kCheckpointOptimizerSectionBytes] = {};
  std::string_view section_bytes, state_bytes;
  if (with_optimizer) {
    fillOptimizerSection(section, *optimizer);
    section_bytes = std::string_view(reinterpret_cast<const char*>(section), sizeof section);
    state_bytes = std::string_view(reinterpret_cast<const char*>(optimizer->values.data()),
                                   optimizer->values.size() * sizeof(float));
  }
  how.mode = 0640;
  Status written = writeFileAtomically(
      path,
      {std::string_view(reinterpret_cast<const char*>(header), sizeof header),
       std::string_view(reinterpret_cast<const char*>(params.data()), params.size_bytes()),
       section_bytes, state_bytes},
      how);
  if (!written.isOk()) return Status(written.code(), "checkpoint: " + written.message());
  return Status::ok();
}

}  // namespace

Status writeCheckpointFile(const std::string& path, std::uint64_t version,
                           std::span<const float> params,
                           const kernels::OptimizerSnapshot* optimizer) {
  GSGD_RETURN_IF_ERROR(checkWritable(params, optimizer));
  return writeCheckpointBytes(path, version, params, optimizer, {});
}

Status writeCheckpoint(const std::string& dir, std::uint64_t version, std::span<const float> params,
                       std::size_t keep_last, CheckpointWriteInfo* info,
                       const kernels::OptimizerSnapshot* optimizer) {
  if (keep_last == 0) return invalidArgument("checkpoint: keep_last must be at least 1");
  GSGD_RETURN_IF_ERROR(checkWritable(params, optimizer));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return ioError("stat directory", dir, errno);
  if (!S_ISDIR(st.st_mode)) return invalidArgument("checkpoint: " + dir + " is not a directory");

  const std::string final_path = joinPath(dir, checkpointFileName(version));
  const std::string tmp = joinPath(dir, "." + checkpointFileName(version) + "." +
                                            std::to_string(::getpid()) + std::string(kTempSuffix));
  AtomicWriteOptions how;
  how.temp_path = tmp;  // prune() removes leftovers of crashed writers by this name
  Status written = writeCheckpointBytes(final_path, version, params, optimizer, how);
  if (!written.isOk()) {
    // Not durable (perhaps not even there after a crash): older checkpoints still are.
    GSGD_ERROR(written.message());
    return written;
  }
  CheckpointWriteInfo local;
  CheckpointWriteInfo* out = info != nullptr ? info : &local;
  out->path = final_path;
  prune(dir, keep_last, final_path, out);
  for (const auto& w : out->warnings) GSGD_WARN("checkpoint: " << w);
  return Status::ok();
}

Result<std::vector<std::pair<std::uint64_t, std::string>>> listCheckpoints(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ioError("open directory", dir, errno);
  std::vector<std::pair<std::uint64_t, std::string>> found;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    std::uint64_t version = 0;
    if (parseName(e->d_name, &version)) found.emplace_back(version, joinPath(dir, e->d_name));
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return ioError("read directory", dir, err);
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return found;
}

Result<LoadedCheckpoint> readCheckpointFile(const std::string& path, std::uint64_t expected_count) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ioError("open", path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ioError("stat", path, errno);
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  auto corrupt = [&](const std::string& why) { return dataLoss(path + ": " + why); };
  if (file_size < kCheckpointHeaderBytes) {
    return corrupt("truncated: " + std::to_string(file_size) + " bytes, the header alone is " +
                   std::to_string(kCheckpointHeaderBytes));
  }
  unsigned char header[kCheckpointHeaderBytes];
  GSGD_RETURN_IF_ERROR(readAll(fd.get(), header, sizeof header, path));
  if (std::memcmp(header + kOffMagic, kCheckpointMagic, sizeof kCheckpointMagic) != 0) {
    return corrupt("bad magic (not a groupsgd checkpoint)");
  }
  if (get32(header + kOffHeaderCrc) != crc32Of(header, kOffHeaderCrc)) {
    return corrupt("header checksum mismatch");
  }
  const std::uint32_t format = get32(header + kOffFormat);
  if (format != kCheckpointFormatVersion && format != kCheckpointFormatModelOnly) {
    return corrupt("unsupported format version " + std::to_string(format));
  }
  if (get32(header + kOffHeaderBytes) != kCheckpointHeaderBytes ||
      get32(header + kOffDtype) != kCheckpointDtypeFloat32) {
    return corrupt("unsupported header size or dtype");
  }
  const std::uint64_t count = get64(header + kOffCount);
  const std::uint64_t bytes = get64(header + kOffByteLength);
  if (count > std::numeric_limits<std::uint64_t>::max() / sizeof(float) ||
      bytes != count * sizeof(float)) {
    return corrupt("byte length " + std::to_string(bytes) + " does not match " +
                   std::to_string(count) + " float32 values");
  }
  if (expected_count != 0 && count != expected_count) {
    return invalidArgument(path + ": holds " + std::to_string(count) +
                           " parameters, the model has " + std::to_string(expected_count));
  }
  if (file_size < kCheckpointHeaderBytes + bytes) {
    return corrupt("truncated: " + std::to_string(file_size) + " bytes, expected " +
                   std::to_string(kCheckpointHeaderBytes + bytes));
  }
  const std::uint64_t after = file_size - kCheckpointHeaderBytes - bytes;
  if (format == kCheckpointFormatModelOnly && after > 0) {
    return corrupt(std::to_string(after) + " bytes after the payload");
  }
  LoadedCheckpoint loaded;
  loaded.path = path;
  loaded.format = format;
  loaded.version = get64(header + kOffVersion);
  loaded.params.resize(count);  // bounded by the file size checked above
  GSGD_RETURN_IF_ERROR(readAll(fd.get(), loaded.params.data(), bytes, path));
  if (get32(header + kOffPayloadCrc) != crc32Of(loaded.params.data(), bytes)) {
    return corrupt("payload checksum mismatch");
  }
  std::size_t bad = 0;
  if (!allFinite(loaded.params, &bad)) {
    return corrupt("non-finite parameter at index " + std::to_string(bad));
  }
  if (format == kCheckpointFormatVersion) {
    GSGD_RETURN_IF_ERROR(readOptimizerSection(fd.get(), path, count, after, &loaded.optimizer));
  }
  return loaded;
}

Result<LoadedCheckpoint> loadNewestCheckpoint(const std::string& dir,
                                              std::uint64_t expected_count) {
  auto listed = listCheckpoints(dir);
  if (!listed) return listed.status();
  if (listed->empty()) return notFound("checkpoint: no checkpoint in " + dir);
  std::vector<std::string> warnings;
  for (const auto& [version, path] : *listed) {
    auto loaded = readCheckpointFile(path, expected_count);
    if (loaded && loaded->version != version) {
      loaded = dataLoss(path + ": header says version " + std::to_string(loaded->version) +
                        ", the name says " + std::to_string(version));
    }
    if (!loaded) {
      warnings.push_back("skipped " + loaded.status().message());
      GSGD_WARN("checkpoint: skipped " << loaded.status().message());
      continue;
    }
    loaded->warnings = std::move(warnings);
    return loaded;
  }
  std::string all = "checkpoint: no usable checkpoint in " + dir + ":";
  for (const auto& w : warnings) all += "\n  " + w;
  return dataLoss(all);
}

}  // namespace groupsgd::centralps
