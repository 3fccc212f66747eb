// Allocator settings for processes that move large tensors. glibc serves buffers above
// 128 KiB with fresh mmaps and returns freed memory to the kernel, so every received
// ZeroMQ frame and every replica copy lands in new pages that fault one by one (costly
// on virtualised hosts: docs/benchmarks.md, dataplane). Keeping up to 32 MiB blocks in
// the heap and not trimming it makes those buffers warm; peaks do not change.
// Call once from main() before any thread starts.
#pragma once

namespace groupsgd {

// Returns false if glibc refused a setting (the process still works, only slower).
bool tuneAllocatorForLargeBuffers();

}  // namespace groupsgd
