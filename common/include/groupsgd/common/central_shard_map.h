// Where the central PS's shards are (docs/shards.md): the flat parameter vector cut into
// contiguous ranges, each served by its own central PS process. With one shard the central
// endpoint is a plain ZeroMQ endpoint, as it always was; with more, the head hands out a
// shard map in the same place (the assignment's central endpoint, a group PS's
// central_endpoint): "shards:BEGIN-END@ENDPOINT,BEGIN-END@ENDPOINT,...", ranges in order,
// adjacent, the first at 0. A shard with a standby names its failover list in its place:
// "ENDPOINT|ENDPOINT" (its primary first); a reader moves to the next one when the one it
// uses falls silent. Plain functions on plain data; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd {

// The most shards one map may name (central_shards' bound).
inline constexpr std::size_t kMaxCentralShards = 64;

struct CentralShard {
  std::string endpoint;              // one endpoint, or a failover list "EP|EP|..."
  std::uint64_t begin = 0, end = 0;  // [begin, end) of the flat parameter vector
  std::uint64_t size() const { return end - begin; }
  // The failover list in order (one entry without a standby).
  std::vector<std::string> alternatives() const { return splitFailoverList(endpoint); }
  static std::vector<std::string> splitFailoverList(std::string_view list);
};

// Whether text is a shard map (else it is one endpoint).
bool isCentralShardMap(std::string_view text);
// One endpoint: one shard over [0, param_count). A map: its shards, checked (adjacent
// ranges from 0 to param_count, none empty, no empty endpoint in a failover list).
Result<std::vector<CentralShard>> parseCentralShards(std::string_view text,
                                                     std::uint64_t param_count);
// The map's text (one shard: its endpoint alone, so S = 1 reads as it always did).
std::string formatCentralShards(const std::vector<CentralShard>& shards);

}  // namespace groupsgd
