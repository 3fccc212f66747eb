#include "groupsgd/common/allocator.h"

#include <malloc.h>

namespace groupsgd {

bool tuneAllocatorForLargeBuffers() {
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
         mallopt(M_TOP_PAD, 256 << 20) == 1;
}

}  // namespace groupsgd
