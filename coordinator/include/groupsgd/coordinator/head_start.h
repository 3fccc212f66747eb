// What this head incarnation knows about the one before it (incarnation.h reads it from
// the checkpoint directory's state file). Plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace groupsgd::coordinator {

struct HeadStart {
  std::uint64_t incarnation = 1;      // epochs of this incarnation start at incarnation << 32
  std::string resumed_from;           // checkpoint file resumed from ("" = fresh start)
  std::uint64_t resumed_version = 0;  // central version of that checkpoint
  std::vector<std::string> skipped_checkpoints;        // newer files unusable, with the reason
  std::optional<std::uint64_t> previous_version_seen;  // newest version the last head saw
  std::string state_file;  // where this head records what it sees ("" = none)
  // A promoted standby: the incarnation it took over from, and whether its replication
  // was synchronous (then no acknowledged version can be lost).
  std::optional<std::uint64_t> took_over_from;
  bool standby_sync = true;
};

}  // namespace groupsgd::coordinator
