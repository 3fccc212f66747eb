#include "groupsgd/groupps/optimizer_placement.h"

namespace groupsgd::groupps {

bool parseOptimizerPlacement(const std::string& text, OptimizerPlacement* out) {
  if (text == "server") {
    *out = OptimizerPlacement::kServer;
  } else if (text == "workers") {
    *out = OptimizerPlacement::kWorkers;
  } else {
    return false;
  }
  return true;
}

const char* optimizerPlacementName(OptimizerPlacement placement) {
  return placement == OptimizerPlacement::kWorkers ? "workers" : "server";
}

}  // namespace groupsgd::groupps
