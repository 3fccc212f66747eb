#include "groupsgd/centralps/shard_cut.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/common/atomic_file.h"

namespace groupsgd::centralps {
namespace {

constexpr std::string_view kCutPrefix = "cut-";
constexpr std::string_view kCutSuffix = ".gsgd";

std::uint32_t crcOf(const std::string& text) {
  return static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                          reinterpret_cast<const Bytef*>(text.data()),
                                          static_cast<uInt>(text.size())));
}

// Everything but the CRC, in a fixed key order (nlohmann's object keys are sorted).
nlohmann::json bodyOf(const ShardCut& cut) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : cut.shards) {
    shards.push_back(
        {{"begin", s.begin}, {"end", s.end}, {"version", s.version}, {"file", s.file}});
  }
  nlohmann::json marks = nlohmann::json::array();
  for (const auto& [group, seq] : cut.marks) marks.push_back({{"group", group}, {"seq", seq}});
  return {{"cut", cut.number},
          {"model", cut.model},
          {"split", cut.split},
          {"seed", cut.seed},
          {"shards", shards},
          {"marks", marks},
          {"run_samples", cut.run_samples},
          {"pause_ms", cut.pause_ms}};
}

template <typename T>
bool take(const nlohmann::json& j, const char* key, T* out) {
  if (!j.is_object() || !j.contains(key)) return false;
  const auto& v = j[key];
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return false;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return false;
  } else {
    if (!v.is_number_unsigned()) return false;
  }
  *out = v.get<T>();
  return true;
}

}  // namespace

std::string cutFileName(std::uint64_t number) {
  char digits[21];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(number));
  return std::string(kCutPrefix) + digits + std::string(kCutSuffix);
}

std::string cutFileFor(std::size_t shard, std::uint64_t number) {
  if (shard == 0) return cutFileName(number);
  return "shard-" + std::to_string(shard) + "/" + cutFileName(number);
}

std::string shardCutJson(const ShardCut& cut) {
  nlohmann::json j = bodyOf(cut);
  j["crc32"] = crcOf(bodyOf(cut).dump());
  return j.dump(1) + "\n";
}

Status writeShardCut(const std::string& dir, const ShardCut& cut) {
  return writeFileAtomically(dir + "/" + kShardCutFile, shardCutJson(cut));
}

Result<ShardCut> readShardCut(const std::string& dir) {
  const std::string path = dir + "/" + kShardCutFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return notFound("no " + path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const std::string& why) {
    return dataLoss("shard cut manifest " + path + ": " + why + " (nothing was deleted)");
  };
  if (!j.is_object()) return bad("not a JSON object");
  ShardCut cut;
  std::uint64_t crc = 0;
  if (!take(j, "cut", &cut.number) || !take(j, "model", &cut.model) ||
      !take(j, "split", &cut.split) || !take(j, "seed", &cut.seed) ||
      !take(j, "run_samples", &cut.run_samples) || !take(j, "pause_ms", &cut.pause_ms) ||
      !take(j, "crc32", &crc) || !j.contains("shards") || !j["shards"].is_array() ||
      !j.contains("marks") || !j["marks"].is_array()) {
    return bad("a field is missing or of the wrong type");
  }
  for (const auto& s : j["shards"]) {
    ShardCutEntry e;
    if (!take(s, "begin", &e.begin) || !take(s, "end", &e.end) || !take(s, "version", &e.version) ||
        !take(s, "file", &e.file)) {
      return bad("shard " + std::to_string(cut.shards.size()) + ": a field is missing");
    }
    cut.shards.push_back(std::move(e));
  }
  for (const auto& m : j["marks"]) {
    std::uint32_t group = 0;
    std::uint64_t seq = 0;
    if (!take(m, "group", &group) || !take(m, "seq", &seq)) return bad("a mark is malformed");
    cut.marks[group] = seq;
  }
  if (crcOf(bodyOf(cut).dump()) != crc) {
    return bad("its crc32 does not match its content (edited or torn)");
  }
  if (cut.shards.size() < 2) return bad("it names fewer than 2 shards");
  return cut;
}

Status checkShardCut(const ShardCut& cut, const std::string& model, std::uint64_t seed,
                     const std::string& split, const std::vector<ShardRange>& ranges) {
  const std::string what = "shard cut " + std::to_string(cut.number);
  if (cut.model != model || cut.seed != seed || cut.split != split) {
    return invalidArgument(what + " is of model " + cut.model + " seed " +
                           std::to_string(cut.seed) + " split " + cut.split + ", this run's " +
                           model + " seed " + std::to_string(seed) + " split " + split);
  }
  if (cut.shards.size() != ranges.size()) {
    return invalidArgument(what + " has " + std::to_string(cut.shards.size()) +
                           " shards, central_shards is " + std::to_string(ranges.size()));
  }
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const ShardCutEntry& e = cut.shards[k];
    if (e.begin != ranges[k].begin || e.end != ranges[k].end) {
      return invalidArgument(what + ": shard " + std::to_string(k) + " holds " +
                             std::to_string(e.begin) + "-" + std::to_string(e.end) +
                             ", this run's shard " + std::to_string(k) + " is " +
                             std::to_string(ranges[k].begin) + "-" + std::to_string(ranges[k].end));
    }
    if (e.file != cutFileFor(k, cut.number)) {
      return invalidArgument(what + ": shard " + std::to_string(k) + " names " + e.file +
                             ", not its file of this cut " + cutFileFor(k, cut.number));
    }
  }
  return Status::ok();
}

Result<std::string> shardCutFilePath(const std::string& dir, const ShardCut& cut, std::size_t k) {
  if (k >= cut.shards.size()) {
    return invalidArgument("shard cut " + std::to_string(cut.number) + " has no shard " +
                           std::to_string(k));
  }
  const ShardCutEntry& e = cut.shards[k];
  const std::string path = dir + "/" + e.file;
  const std::string who = "shard cut " + std::to_string(cut.number) + ", shard " +
                          std::to_string(k) + " (" + path + "): ";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return notFound(who + "file missing: the cut is incomplete (nothing was deleted)");
  }
  auto loaded = readCheckpointFile(path, e.end - e.begin);
  if (!loaded) return Status(loaded.status().code(), who + loaded.status().message());
  if (loaded->version != e.version) {
    return invalidArgument(who + "holds version " + std::to_string(loaded->version) +
                           ", the manifest says " + std::to_string(e.version));
  }
  return path;
}

std::vector<std::string> pruneCutFiles(const std::string& dir, std::uint64_t keep_a,
                                       std::uint64_t keep_b) {
  std::vector<std::string> warnings;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != kCutPrefix.size() + 20 + kCutSuffix.size() ||
        name.compare(0, kCutPrefix.size(), kCutPrefix) != 0 ||
        name.compare(name.size() - kCutSuffix.size(), kCutSuffix.size(), kCutSuffix) != 0) {
      continue;
    }
    if (name == cutFileName(keep_a) || name == cutFileName(keep_b)) continue;
    std::error_code rm;
    std::filesystem::remove(entry.path(), rm);
    if (rm) warnings.push_back("cannot delete " + entry.path().string() + ": " + rm.message());
  }
  if (ec) warnings.push_back("cannot list " + dir + ": " + ec.message());
  return warnings;
}

}  // namespace groupsgd::centralps
