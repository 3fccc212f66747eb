#include "groupsgd/ops/version.h"

#ifndef GROUPSGD_VERSION
#error "GROUPSGD_VERSION must be defined by the build (daemon/CMakeLists.txt)"
#endif

namespace groupsgd::ops {

const char* buildVersion() { return GROUPSGD_VERSION; }

}  // namespace groupsgd::ops
