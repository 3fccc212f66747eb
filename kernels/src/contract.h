// Size contracts of the kernels that hold in release builds too. The public functions
// return nothing, so a mismatch is a bug in the caller; with the check compiled out it
// would read or write past a buffer (a null residual once made axpy read a model's
// length from address 0). One comparison per call, before a loop over the whole buffer.
#pragma once

namespace groupsgd::kernels::detail {

// Prints "groupsgd kernels: contract violated: WHAT (FILE:LINE)" to stderr and aborts.
[[noreturn]] void contractViolated(const char* what, const char* file, int line);

}  // namespace groupsgd::kernels::detail

#define GSGD_KERNEL_REQUIRE(cond)                                               \
  do {                                                                          \
    if (!(cond)) [[unlikely]]                                                   \
      ::groupsgd::kernels::detail::contractViolated(#cond, __FILE__, __LINE__); \
  } while (0)
