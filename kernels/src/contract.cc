#include "contract.h"

#include <cstdio>
#include <cstdlib>

namespace groupsgd::kernels::detail {

void contractViolated(const char* what, const char* file, int line) {
  std::fprintf(stderr, "groupsgd kernels: contract violated: %s (%s:%d)\n", what, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace groupsgd::kernels::detail
