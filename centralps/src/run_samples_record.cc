#include "groupsgd/centralps/run_samples_record.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "groupsgd/common/atomic_file.h"

namespace groupsgd::centralps {
namespace {

std::string recordPath(const std::string& dir) { return dir + "/" + kRunSamplesFile; }

// version -> samples, from the file: {"checkpoints": [{"version": V, "run_samples": S}]}.
Result<std::map<std::uint64_t, std::uint64_t>> readRecords(const std::string& dir) {
  const std::string path = recordPath(dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return notFound("no " + path);
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::map<std::uint64_t, std::uint64_t> records;
  const bool shaped = j.is_object() && j.contains("checkpoints") && j["checkpoints"].is_array();
  if (shaped) {
    for (const auto& r : j["checkpoints"]) {
      if (!r.is_object() || !r.contains("version") || !r.contains("run_samples") ||
          !r["version"].is_number_unsigned() || !r["run_samples"].is_number_unsigned()) {
        return dataLoss(path + ": a record is not {\"version\": N, \"run_samples\": N}");
      }
      records[r["version"].get<std::uint64_t>()] = r["run_samples"].get<std::uint64_t>();
    }
  } else {
    return dataLoss(path + " is not a run-samples record");
  }
  return records;
}

}  // namespace

Status recordRunSamples(const std::string& dir, std::uint64_t version, std::uint64_t run_samples,
                        std::size_t keep_last) {
  auto records = readRecords(dir);
  std::map<std::uint64_t, std::uint64_t> kept;
  if (records) kept = std::move(*records);  // an unreadable file is replaced
  kept[version] = run_samples;
  while (kept.size() > std::max<std::size_t>(1, keep_last)) kept.erase(kept.begin());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [v, s] : kept) list.push_back({{"version", v}, {"run_samples", s}});
  return writeFileAtomically(recordPath(dir), nlohmann::json{{"checkpoints", list}}.dump() + "\n");
}

Result<RunSamplesAt> runSamplesAt(const std::string& dir, std::uint64_t version) {
  auto records = readRecords(dir);
  if (!records) return records.status();
  auto it = records->upper_bound(version);  // the first record after `version`
  if (it == records->begin()) {
    return notFound("no run-samples record at or before version " + std::to_string(version));
  }
  --it;
  return RunSamplesAt{it->second, it->first};
}

}  // namespace groupsgd::centralps
