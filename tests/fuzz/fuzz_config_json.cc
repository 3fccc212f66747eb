// Fuzz target: the daemon configuration as a file would give it. The input is parsed the
// way loadConfigFile does (comments allowed, no exceptions), applied with applyJson onto the
// defaults and validated.
// Oracles: no crash, no exception out of applyJson; a configuration that validates
// serialises with toJson, and that JSON applies again and still validates.
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "groupsgd/daemon/config.h"

using namespace groupsgd;
using namespace groupsgd::daemon;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false,
                                           /*ignore_comments=*/true);
  if (j.is_discarded()) return 0;
  DaemonConfig cfg;
  const Status applied = applyJson(j, &cfg);
  if (!applied) {
    FUZZ_CHECK(!applied.message().empty());
    return 0;
  }
  if (!validate(cfg)) return 0;
  (void)cfg.groupCount();
  (void)cfg.exchangePeriod();
  const nlohmann::json again = toJson(cfg);
  DaemonConfig cfg2;
  const Status reapplied = applyJson(again, &cfg2);
  if (!reapplied) std::fprintf(stderr, "toJson output refused: %s\n", reapplied.toString().c_str());
  FUZZ_CHECK(reapplied.isOk());
  const Status revalidated = validate(cfg2);
  if (!revalidated)
    std::fprintf(stderr, "toJson output invalid: %s\n", revalidated.toString().c_str());
  FUZZ_CHECK(revalidated.isOk());
  return 0;
}
