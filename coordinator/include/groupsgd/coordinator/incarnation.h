// The head's incarnation: a number that grows with every start of the coordinator, kept
// in <checkpoint_dir>/head.json beside the checkpoints together with the newest central
// version the previous head saw (so a restarted head can report what was lost).
// Thread rule: call once from main() before the coordinator runs.
#pragma once

#include <string>

#include "groupsgd/common/status.h"
#include "groupsgd/coordinator/head_start.h"

namespace groupsgd::coordinator {

// Reads the previous incarnation, records the next one at once and returns it. Without
// a checkpoint directory the incarnation is the start time in seconds (still growing
// across restarts, nothing to report). A corrupt state file is an error, not a reset.
// at_least: a promoted standby's floor (its primary's incarnation + 1).
Result<HeadStart> startIncarnation(const std::string& checkpoint_dir, std::uint64_t at_least = 0);

}  // namespace groupsgd::coordinator
