#include "groupsgd/coordinator/ledger_record.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "groupsgd/common/atomic_file.h"

namespace groupsgd::coordinator {
namespace {

std::string recordPath(const std::string& dir) { return dir + "/" + kEpochLedgerFile; }

Result<std::map<std::uint64_t, nlohmann::json>> readRecords(const std::string& dir) {
  const std::string path = recordPath(dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return notFound("no " + path);
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("checkpoints") || !j["checkpoints"].is_array() ||
      !j.value("format", nlohmann::json()).is_number_unsigned()) {
    return dataLoss(path + " is not an epoch ledger record");
  }
  if (j["format"].get<std::uint64_t>() > kEpochLedgerFormat) {
    return dataLoss(path + ": format " + j["format"].dump() + " is newer than this head's " +
                    std::to_string(kEpochLedgerFormat));
  }
  std::map<std::uint64_t, nlohmann::json> records;
  for (const auto& r : j["checkpoints"]) {
    if (!r.is_object() || !r.contains("version") || !r["version"].is_number_unsigned() ||
        !r.contains("ledger") || !r["ledger"].is_object()) {
      return dataLoss(path + ": a record is not {\"version\": N, \"ledger\": {...}}");
    }
    records[r["version"].get<std::uint64_t>()] = r["ledger"];
  }
  return records;
}

}  // namespace

Status recordLedger(const std::string& dir, std::uint64_t version, const nlohmann::json& ledger,
                    std::size_t keep_last) {
  auto records = readRecords(dir);
  std::map<std::uint64_t, nlohmann::json> kept;
  if (records) kept = std::move(*records);  // an unreadable file is replaced
  kept[version] = ledger;
  while (kept.size() > std::max<std::size_t>(1, keep_last)) kept.erase(kept.begin());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [v, l] : kept) list.push_back({{"version", v}, {"ledger", l}});
  return writeFileAtomically(
      recordPath(dir),
      nlohmann::json{{"format", kEpochLedgerFormat}, {"checkpoints", list}}.dump() + "\n");
}

Result<LedgerAt> ledgerAt(const std::string& dir, std::uint64_t version) {
  auto records = readRecords(dir);
  if (!records) return records.status();
  auto it = records->upper_bound(version);  // the first record after `version`
  if (it == records->begin()) {
    return notFound("no epoch ledger record at or before version " + std::to_string(version));
  }
  --it;
  return LedgerAt{it->second, it->first};
}

}  // namespace groupsgd::coordinator
