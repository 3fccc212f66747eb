// The dataplane benchmark split over two processes (or two hosts, or two network
// namespaces): `--serve-only` publishes where its servers listen as one JSON object, and
// `--connect SPEC` reads it back here. The object (docs/benchmarks.md, "dataplane between
// two network namespaces"):
//   {"bench": "dataplane", "serving": true, "host": "10.79.0.1", "part_kib": 4096,
//    "echo_port": 40123,
//    "sizes": [{"size_mib": 1, "central": "tcp://10.79.0.1:41001", "group": "tcp://..."}, ...],
//    "latency": {"model_mib": 1, "central": "tcp://...", "group": "tcp://..."}}
// ("latency" is absent when the server was started with --no-latency).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd::bench {

// Where the servers of one size are: in this process or in another one.
struct Target {
  std::string central_ep, group_ep;  // tcp://HOST:PORT of the central PS and the group PS
  std::string echo_host;             // the TCP echo of the baseline (tcp_echo.h)
  std::uint16_t echo_port = 0;
};

struct RemoteSpec {
  std::string host;
  std::uint32_t part_bytes = 0;
  std::vector<std::pair<std::size_t, Target>> sizes;  // MiB and its servers
  std::optional<std::string> latency_group;           // group PS of the 1 MiB latency model
};

// Writes `text` to `path` through a temporary file and a rename, so that a reader polling
// for the file never sees half of it.
inline Status writeFileWhole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) return internalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return internalError("cannot rename " + tmp + " to " + path);
  }
  return Status::ok();
}

// SPEC: the JSON object itself (starts with '{') or the file --serve-only wrote.
inline Result<RemoteSpec> parseRemoteSpec(const std::string& spec) {
  using nlohmann::json;
  std::string text = spec;
  if (spec.empty() || spec.front() != '{') {
    std::ifstream in(spec);
    if (!in) return invalidArgument("--connect: cannot read the endpoint file '" + spec + "'");
    std::stringstream buf;
    buf << in.rdbuf();
    text = buf.str();
  }
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalidArgument("--connect: '" + spec + "' is not a JSON object");
  }
  auto str = [&](const json& o, const char* key) -> std::optional<std::string> {
    auto it = o.find(key);
    if (it == o.end() || !it->is_string() || it->get<std::string>().empty()) return std::nullopt;
    return it->get<std::string>();
  };
  auto num = [&](const json& o, const char* key) -> std::optional<std::uint64_t> {
    auto it = o.find(key);
    if (it == o.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<std::uint64_t>();
  };
  RemoteSpec out;
  const auto host = str(j, "host");
  const auto port = num(j, "echo_port");
  const auto part_kib = num(j, "part_kib");
  if (!host || !port || *port == 0 || *port > 65535 || !part_kib || *part_kib == 0 ||
      *part_kib > (1u << 20)) {
    return invalidArgument(
        "--connect: the endpoints need 'host', 'echo_port' (1-65535) and 'part_kib' (> 0), "
        "as groupsgd-bench-dataplane --serve-only writes them");
  }
  out.host = *host;
  out.part_bytes = static_cast<std::uint32_t>(*part_kib << 10);
  auto sizes = j.find("sizes");
  if (sizes == j.end() || !sizes->is_array() || sizes->empty()) {
    return invalidArgument("--connect: the endpoints list no 'sizes'");
  }
  for (const json& s : *sizes) {
    const std::uint64_t mib = s.is_object() ? num(s, "size_mib").value_or(0) : 0;
    const std::string central = s.is_object() ? str(s, "central").value_or("") : "";
    const std::string group = s.is_object() ? str(s, "group").value_or("") : "";
    if (mib == 0 || central.empty() || group.empty()) {
      return invalidArgument("--connect: a size needs 'size_mib' (> 0), 'central' and 'group': " +
                             s.dump());
    }
    out.sizes.push_back({mib, Target{central, group, *host, static_cast<std::uint16_t>(*port)}});
  }
  if (auto lat = j.find("latency"); lat != j.end()) {
    const auto group = lat->is_object() ? str(*lat, "group") : std::nullopt;
    if (!group) return invalidArgument("--connect: 'latency' needs a 'group' endpoint");
    out.latency_group = *group;
  }
  return out;
}

}  // namespace groupsgd::bench
