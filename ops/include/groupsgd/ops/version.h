// The build's version string (CMake's project version), for `groupsgdctl version`, the
// control method "version" and the groupsgd_build_info metric.
// Thread rule: a constant; any thread.
#pragma once

namespace groupsgd::ops {

const char* buildVersion();

}  // namespace groupsgd::ops
