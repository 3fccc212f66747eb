// The run's samples applied at each checkpoint, kept beside the checkpoints in
// DIR/run_samples.json, so a resumed run's learning-rate schedules go on from where the
// checkpoint was (docs/architecture.md, "Learning-rate schedules"). A file of its own, not
// a checkpoint field: the checkpoint format stays the model's (and its optimizer's).
// Written after the checkpoint is durable; a crash in between leaves the newest
// checkpoint without a record, and the resume takes the newest older one (fewer samples:
// the schedule repeats a little, never skips).
// Thread rule: plain functions of their arguments; blocking disk I/O (a background thread).
#pragma once

#include <cstdint>
#include <string>

#include "groupsgd/common/status.h"

namespace groupsgd::centralps {

inline constexpr char kRunSamplesFile[] = "run_samples.json";

// Records run_samples at checkpoint `version` in dir's file (atomically replaced), keeping
// the newest keep_last records (>= 1).
Status recordRunSamples(const std::string& dir, std::uint64_t version, std::uint64_t run_samples,
                        std::size_t keep_last);

struct RunSamplesAt {
  std::uint64_t samples = 0;
  std::uint64_t version = 0;  // the record's version: `version` asked, or the newest older
};

// The record for checkpoint `version`, or else the newest at an older version. NotFound
// when there is no file or no such record; DataLoss when the file is unreadable.
Result<RunSamplesAt> runSamplesAt(const std::string& dir, std::uint64_t version);

}  // namespace groupsgd::centralps
