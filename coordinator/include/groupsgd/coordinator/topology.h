// Where the servers of one run are, as the head learns them before its coordinator starts:
// the central PS, this daemon's own group PSes and the model's size and layout. Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace groupsgd::coordinator {

struct Topology {
  std::string central_endpoint;  // the central PS (shard 0 with central_shards > 1)
  // central_shards > 1: the shard map workers and group PSes get (central_shard_map.h);
  // "" = central_endpoint is the whole central PS.
  std::string central_map;
  std::vector<std::string> group_endpoints;  // index = group id
  std::uint64_t param_count = 0;
  std::string model_fingerprint;  // external model: layout every worker must match
  std::string model_layout;       // the layout's text, when its first worker stated it
};

}  // namespace groupsgd::coordinator
