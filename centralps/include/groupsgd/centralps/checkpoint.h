// Checkpoints of the central model: one file per model version in a directory, written
// atomically and loaded newest-valid-first. docs/operations.md gives the byte layout.
//
// File name: ckpt-<model version, 20 decimal digits>.gsgd. Anything else in the
// directory (a leftover temp file ".ckpt-*.tmp", other files) is ignored by the loader.
// Writing (the order Redis and LevelDB use):
//   temp file ".ckpt-<version>.<pid>.tmp" in the same directory (O_EXCL) -> write header
//   and payload -> fdatasync -> close -> rename over the final name -> fsync the
//   directory; then prune older checkpoints beyond keep_last.
// Any failure up to and including the directory fsync fails the checkpoint: the temp
// file is removed, the Status names the file and the errno text, and nothing is retried
// (a failed fsync may have dropped the data). Older checkpoints are never touched
// before the new one is durable, so a crash at any point leaves the old or the new file
// loadable, never a torn one under the final name.
// One writer per directory (one daemon); readers may run at any time.
// Thread rule: plain functions of their arguments. Blocking disk I/O: call from a
// background thread, never from a network loop.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"
#include "groupsgd/kernels/optimizer_snapshot.h"

namespace groupsgd::centralps {

inline constexpr char kCheckpointMagic[8] = {'G', 'S', 'G', 'D', 'C', 'K', 'P', 'T'};
// Format 2 adds the outer optimizer's state after the model; a model whose optimizer keeps
// none (sgd) is still written as format 1, and both formats load.
inline constexpr std::uint32_t kCheckpointFormatVersion = 2;
inline constexpr std::uint32_t kCheckpointFormatModelOnly = 1;
inline constexpr std::uint32_t kCheckpointOptimizerSectionBytes = 24;
inline constexpr std::uint32_t kCheckpointHeaderBytes = 64;
inline constexpr std::uint32_t kCheckpointDtypeFloat32 = 1;

// "ckpt-00000000000000000042.gsgd" for version 42.
std::string checkpointFileName(std::uint64_t version);

// What a successful write did besides writing.
struct CheckpointWriteInfo {
  std::string path;                   // the checkpoint written
  std::vector<std::string> pruned;    // older checkpoints deleted
  std::vector<std::string> warnings;  // pruning failures (the new checkpoint is durable)
};

// Writes params as model `version` into dir (which must exist) and keeps the newest
// keep_last (>= 1) checkpoints, never deleting the one just written. A checkpoint of
// the same version is replaced atomically. A model with a NaN/Inf is refused
// (InvalidArgument) before anything is written. I/O errors: ResourceExhausted for
// ENOSPC/EDQUOT, PermissionDenied for EACCES/EPERM/EROFS, NotFound for a missing
// directory, Unavailable otherwise. info may be null. optimizer (may be null): the outer
// optimizer's state over the same N parameters, saved after the model (format 2) when it
// has buffers; a NaN/Inf in it is refused like one in the model.
Status writeCheckpoint(const std::string& dir, std::uint64_t version, std::span<const float> params,
                       std::size_t keep_last, CheckpointWriteInfo* info = nullptr,
                       const kernels::OptimizerSnapshot* optimizer = nullptr);

// Writes params as model `version` to the one file `path` in the same format, atomically
// (a temp file beside it, fsync, rename, directory fsync) and without pruning anything:
// keep_best's best.ckpt. The name is free; a directory's loader ignores any name but
// ckpt-<version>.gsgd, so this file is never resumed from. The same refusals and errors
// as writeCheckpoint. optimizer (may be null): saved after the model as writeCheckpoint
// does (a consistent cut's files, shard_cut.h).
Status writeCheckpointFile(const std::string& path, std::uint64_t version,
                           std::span<const float> params,
                           const kernels::OptimizerSnapshot* optimizer = nullptr);

struct LoadedCheckpoint {
  std::string path;           // the file used
  std::uint64_t version = 0;  // model version from its header
  std::vector<float> params;
  std::uint32_t format = 0;              // 1: model only; 2: with the optimizer state
  kernels::OptimizerSnapshot optimizer;  // buffers 0 (format 1, or none was saved)
  std::vector<std::string> warnings;     // newer files skipped, each with the reason
};

// Loads the newest valid checkpoint in dir holding expected_count parameters
// (0: any count). Newer files that are truncated, corrupt (magic, header or payload
// checksum, lengths, a version that disagrees with the name, a non-finite value) or of
// another size are skipped and reported in warnings (and logged).
// NotFound when dir has no checkpoint file (or does not exist); DataLoss when every
// checkpoint file was unusable (the message lists why).
Result<LoadedCheckpoint> loadNewestCheckpoint(const std::string& dir, std::uint64_t expected_count);

// Checks one file (for tools and tests); the same checks as the loader.
Result<LoadedCheckpoint> readCheckpointFile(const std::string& path, std::uint64_t expected_count);

// Final checkpoint files in dir, newest (highest version) first.
Result<std::vector<std::pair<std::uint64_t, std::string>>> listCheckpoints(const std::string& dir);

}  // namespace groupsgd::centralps
