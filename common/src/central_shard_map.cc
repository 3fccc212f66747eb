#include "groupsgd/common/central_shard_map.h"

#include <charconv>

namespace groupsgd {

namespace {

constexpr std::string_view kPrefix = "shards:";

bool parseNumber(std::string_view text, std::uint64_t* out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && p == end && !text.empty();
}

}  // namespace

bool isCentralShardMap(std::string_view text) { return text.starts_with(kPrefix); }

std::vector<std::string> CentralShard::splitFailoverList(std::string_view list) {
  std::vector<std::string> out;
  for (;;) {
    const auto bar = list.find('|');
    out.emplace_back(list.substr(0, bar));
    if (bar == std::string_view::npos) return out;
    list.remove_prefix(bar + 1);
  }
}

Result<std::vector<CentralShard>> parseCentralShards(std::string_view text,
                                                     std::uint64_t param_count) {
  if (!isCentralShardMap(text)) {
    if (text.empty()) return invalidArgument("no central endpoint");
    return std::vector<CentralShard>{{std::string(text), 0, param_count}};
  }
  std::vector<CentralShard> shards;
  std::string_view rest = text.substr(kPrefix.size());
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const auto at = item.find('@');
    const auto dash = item.find('-');
    CentralShard s;
    if (at == std::string_view::npos || dash == std::string_view::npos || dash > at ||
        !parseNumber(item.substr(0, dash), &s.begin) ||
        !parseNumber(item.substr(dash + 1, at - dash - 1), &s.end) || at + 1 == item.size()) {
      return invalidArgument("central shard map: '" + std::string(item) +
                             "' is not BEGIN-END@ENDPOINT");
    }
    s.endpoint = std::string(item.substr(at + 1));
    for (const auto& alternative : s.alternatives()) {
      if (alternative.empty()) {
        return invalidArgument("central shard map: '" + std::string(item) +
                               "' has an empty endpoint in its failover list (EP|EP)");
      }
    }
    const std::uint64_t expected = shards.empty() ? 0 : shards.back().end;
    if (s.begin != expected || s.end <= s.begin) {
      return invalidArgument("central shard map: range " + std::to_string(s.begin) + "-" +
                             std::to_string(s.end) + " does not follow " +
                             std::to_string(expected) + " or is empty");
    }
    shards.push_back(std::move(s));
  }
  if (shards.empty() || shards.back().end != param_count) {
    return invalidArgument("central shard map covers " +
                           std::to_string(shards.empty() ? 0 : shards.back().end) + " of " +
                           std::to_string(param_count) + " parameters");
  }
  return shards;
}

std::string formatCentralShards(const std::vector<CentralShard>& shards) {
  if (shards.size() == 1) return shards.front().endpoint;
  std::string out(kPrefix);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(shards[i].begin) + "-" + std::to_string(shards[i].end) + "@" +
           shards[i].endpoint;
  }
  return out;
}

}  // namespace groupsgd
