// groupsgd-bench-dataplane split over two processes on loopback (no root needed): a
// `--serve-only` server publishes its endpoints, a `--connect` client measures against it
// and prints what the one-process run prints (plus "remote"), and the server stops on
// SIGTERM. Bad flags and bad endpoints are refused with exit 2 and a reason. The same
// split between two network namespaces is scripts/bench/dataplane_netns.sh.
#include <doctest/doctest.h>

#include <csignal>
#include <sstream>

#include <nlohmann/json.hpp>

#include "process.h"
#include "temp_dir.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// The last line of `path` that is a JSON object with "bench" (the summary).
json lastJsonLine(const std::string& path) {
  std::istringstream in(readFile(path));
  json last;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.front() != '{') continue;
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("bench")) last = j;
  }
  return last;
}

// Runs the benchmark with `args` and returns its exit status; its output in `log`.
std::optional<int> runBench(std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), BENCH_DATAPLANE_PATH);
  Process p(args, log);
  return p.wait(60s);
}

const char* kOneSize =
    R"({"host":"127.0.0.1","echo_port":1,"part_kib":4096,)"
    R"("sizes":[{"size_mib":1,"central":"tcp://127.0.0.1:1","group":"tcp://127.0.0.1:2"}]})";

}  // namespace

TEST_CASE("dataplane: --serve-only and --connect in two processes give the one-process JSON") {
  TempDir dir;
  const std::string endpoints = dir.file("endpoints.json");
  Process server({BENCH_DATAPLANE_PATH, "--serve-only", "--bind", "127.0.0.1", "--endpoint-file",
                  endpoints, "--quick", "--sizes", "1"},
                 dir.file("server.log"));
  REQUIRE_MESSAGE(waitForFile(endpoints, 30s), readFile(dir.file("server.log")));
  const json spec = json::parse(readFile(endpoints));
  CHECK(spec["host"] == "127.0.0.1");
  CHECK(spec["echo_port"].get<int>() > 0);
  REQUIRE(spec["sizes"].size() == 1);
  CHECK(spec["sizes"][0]["central"].get<std::string>().rfind("tcp://127.0.0.1:", 0) == 0);
  CHECK(spec["latency"]["group"].get<std::string>().rfind("tcp://127.0.0.1:", 0) == 0);

  const auto rc =
      runBench({"--connect", endpoints, "--quick", "--seconds", "0.1"}, dir.file("client.log"));
  INFO(readFile(dir.file("client.log")));
  REQUIRE(rc == std::optional<int>(0));
  const json summary = lastJsonLine(dir.file("client.log"));
  CHECK(summary["bench"] == "dataplane");
  CHECK(summary["ok"] == true);
  CHECK(summary["remote"]["host"] == "127.0.0.1");
  CHECK(summary["part_kib"] == spec["part_kib"]);
  REQUIRE(summary["sizes"].size() == 1);
  for (const char* key : {"groupsgd_gbps", "tcp_gbps", "k1_gbps", "exchange_gbps"}) {
    INFO(key);
    CHECK(summary["sizes"][0][key].get<double>() > 0);
  }
  CHECK(summary["step_latency_1mib_8w"]["p50_ms"].get<double>() > 0);

  ::kill(server.pid(), SIGTERM);
  CHECK_MESSAGE(server.wait(20s) == std::optional<int>(0), readFile(dir.file("server.log")));
}

TEST_CASE("dataplane: flags of the wrong mode and bad endpoints are refused with a reason") {
  TempDir dir;
  const std::string log = dir.file("bench.log");
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const Case cases[] = {
      {{"--serve-only", "--connect", kOneSize}, "--serve-only excludes --connect"},
      {{"--bind", "127.0.0.1"}, "--bind requires --serve-only"},
      {{"--connect", kOneSize, "--part-kib", "64"}, "--connect excludes --part-kib"},
      {{"--serve-only", "--seconds", "1"}, "--serve-only excludes --seconds"},
      {{"--serve-only", "--bind", "localhost"}, "not an IPv4 address"},
      {{"--sizes", "0,16"}, "--sizes: must be a number > 0, got '0'"},
      {{"--only", "tcp,udp"}, "--only: udp not in {tcp,push,k1,exchange}"},
      {{"--part-kib", "0"}, "--part-kib"},
      {{"--connect", dir.file("missing.json")}, "cannot read the endpoint file"},
      {{"--connect", "{\"host\": \"127.0.0.1\"}"}, "need 'host', 'echo_port'"},
      {{"--connect", "{not json"}, "is not a JSON object"},
      {{"--connect", kOneSize, "--sizes", "16", "--no-latency"}, "16 MiB is not served"},
      {{"--connect", kOneSize}, "serves no step-latency group"},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    INFO(joined);
    const auto rc = runBench(c.args, log);
    const std::string out = readFile(log);
    INFO(out);
    CHECK(rc == std::optional<int>(2));
    CHECK(out.find(c.says) != std::string::npos);
  }
}
