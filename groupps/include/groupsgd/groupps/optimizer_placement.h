// Where a group's inner optimizer steps (daemon key optimizer.placement): at the group PS
// (server, the replica is stepped there) or on every member (workers, the group PS hands
// out the mean gradient). docs/protocol.md, "Optimizer on the workers".
// Thread rule: plain values and pure functions.
#pragma once

#include <string>

namespace groupsgd::groupps {

enum class OptimizerPlacement { kServer, kWorkers };

bool parseOptimizerPlacement(const std::string& text, OptimizerPlacement* out);
const char* optimizerPlacementName(OptimizerPlacement placement);

}  // namespace groupsgd::groupps
