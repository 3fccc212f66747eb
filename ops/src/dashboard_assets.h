// The dashboard page's files (ops/dashboard/), compiled into the binary by a CMake step
// (ops/dashboard/embed.cmake writes dashboard_assets.cc), so the page needs no internet
// and no files next to the daemon.
// Thread rule: constants; any thread.
#pragma once

#include <string_view>

namespace groupsgd::ops {

struct DashboardAsset {
  std::string_view path;          // URL path: "/" for the page, "/dashboard.js", ...
  std::string_view content_type;  // with its charset
  std::string_view body;
};

// The asset served at `path`, or nullptr.
const DashboardAsset* findDashboardAsset(std::string_view path);

}  // namespace groupsgd::ops
