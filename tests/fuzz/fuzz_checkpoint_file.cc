// Fuzz target: the checkpoint reader, the decoder of the one input a restarted head trusts
// from disk (a file another process, a full disk or a bad copy may have mangled). The
// input is the whole file, handed over through a memfd so no disk I/O slows the campaign.
// Oracles: no crash or sanitizer report; an accepted file holds only finite parameters,
// is accepted again when its own parameter count is expected and refused for any other.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <string>

#include "fuzz_check.h"
#include "groupsgd/centralps/checkpoint.h"

using namespace groupsgd;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = memfd_create("fuzz_checkpoint", 0);
  FUZZ_CHECK(fd >= 0);
  std::size_t off = 0;
  while (off < size) {
    const ssize_t w = ::write(fd, data + off, size - off);
    FUZZ_CHECK(w > 0);
    off += static_cast<std::size_t>(w);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto loaded = centralps::readCheckpointFile(path, 0);
  if (!loaded) {
    FUZZ_CHECK(!loaded.status().message().empty());
  } else {
    for (float v : loaded->params) FUZZ_CHECK(std::isfinite(v));
    FUZZ_CHECK(!centralps::readCheckpointFile(path, loaded->params.size() + 1).isOk());
    FUZZ_CHECK(centralps::readCheckpointFile(path, loaded->params.size()).isOk());
  }
  ::close(fd);
  return 0;
}
