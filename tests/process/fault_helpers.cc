#include "fault_helpers.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>

namespace groupsgd::testing {

using namespace std::chrono_literals;
using nlohmann::json;

double wallNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double stampOf(const std::string &log, const std::string &text,
               std::size_t from) {
  const std::size_t at = log.find(text, from);
  if (at == std::string::npos)
    return -1;
  const std::size_t start = log.rfind('\n', at);
  return std::atof(log.c_str() + (start == std::string::npos ? 0 : start + 1));
}

std::string endpointIn(const std::string &dir) {
  std::string ep = readFile(dir + "/endpoint");
  ep.erase(ep.find_last_not_of("\n") + 1);
  return ep;
}

std::unique_ptr<Process> startDaemon(const std::string &dir,
                                     const std::string &log,
                                     const std::string &listen,
                                     std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      GROUPSGDD_PATH,    "--listen",        listen,
      "--endpoint-file", dir + "/endpoint", "--control-socket",
      dir + "/ctl.sock", "--summary-file",  dir + "/summary.json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::filesystem::remove(dir + "/endpoint");
  auto d = std::make_unique<Process>(argv, dir + "/" + log);
  REQUIRE_MESSAGE(waitForFile(dir + "/endpoint", 20000ms),
                  readFile(dir + "/" + log));
  return d;
}

json ctl(const std::string &dir, std::vector<std::string> args) {
  std::vector<std::string> argv = {GROUPSGDCTL_PATH, "--socket",
                                   dir + "/ctl.sock", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = dir + "/ctl.json";
  Process p(argv, out);
  auto rc = p.wait(20000ms);
  if (rc != std::optional<int>(0))
    return nullptr;
  try {
    return json::parse(readFile(out));
  } catch (const std::exception &) {
    return nullptr;
  }
}

void checkAccounting(const json &s) {
  INFO("summary: " << s.dump());
  const auto trained = s["samples_trained"].get<std::uint64_t>();
  CHECK(trained > 0);
  CHECK(trained == s["samples_applied"].get<std::uint64_t>() +
                       s["samples_dropped"].get<std::uint64_t>());
  CHECK(s["samples_unaccounted"].get<std::uint64_t>() == 0);
  CHECK(s["accounting_ok"].get<bool>());
}

} // namespace groupsgd::testing
