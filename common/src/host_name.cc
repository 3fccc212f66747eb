#include "groupsgd/common/host_name.h"

#include <unistd.h>

#include <cstdlib>

namespace groupsgd {

std::string hostName() {
  for (const char* var : {"GROUPSGD_HOST", "SLURMD_NODENAME"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return v;
  }
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace groupsgd
