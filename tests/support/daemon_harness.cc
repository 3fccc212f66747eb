#include "daemon_harness.h"

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "groupsgd/common/log.h"

namespace groupsgd::testing {

using namespace std::chrono_literals;
using nlohmann::json;

const char* groupsgddPath() { return GROUPSGDD_PATH; }
const char* groupsgdctlPath() { return GROUPSGDCTL_PATH; }

std::unique_ptr<Process> startDaemon(const std::string& dir, const std::string& log,
                                     std::vector<std::string> args, const DaemonFiles& files) {
  std::vector<std::string> argv = {GROUPSGDD_PATH, "--listen", files.listen, "--endpoint-file",
                                   dir + "/endpoint"};
  if (files.control_socket) argv.insert(argv.end(), {"--control-socket", dir + "/ctl.sock"});
  argv.insert(argv.end(), {"--summary-file", dir + "/summary.json"});
  argv.insert(argv.end(), args.begin(), args.end());
  std::filesystem::remove(dir + "/endpoint");
  auto d = std::make_unique<Process>(argv, dir + "/" + log);
  REQUIRE_MESSAGE(waitForFile(dir + "/endpoint", 20000ms), readFile(dir + "/" + log));
  return d;
}

std::unique_ptr<Process> startDaemon(const std::string& dir, const std::string& log,
                                     const std::string& listen, std::vector<std::string> args) {
  return startDaemon(dir, log, std::move(args), DaemonFiles{listen, true});
}

std::string endpointIn(const std::string& dir) {
  std::string ep = readFile(dir + "/endpoint");
  ep.erase(ep.find_last_not_of("\n") + 1);
  return ep;
}

int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

int runTool(const std::vector<std::string>& argv, const std::string& log,
            std::chrono::milliseconds timeout) {
  Process p(argv, log);
  auto rc = p.wait(timeout);
  REQUIRE_MESSAGE(rc.has_value(), argv[0] << " did not finish in time: " << readFile(log));
  return *rc;
}

namespace {

// groupsgdctl --json ARGS; its exit code, its output in a log file of its own.
int runCtl(const std::string& dir, std::vector<std::string> args, std::string* out) {
  static int calls = 0;
  const std::string log = dir + "/ctl-" + std::to_string(++calls) + ".log";
  std::vector<std::string> argv = {GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, log);
  const auto rc = p.wait(30000ms);
  *out = readFile(log);
  return rc.value_or(-1);
}

}  // namespace

json ctl(const std::string& dir, std::vector<std::string> args) {
  std::string out;
  if (runCtl(dir, std::move(args), &out) != 0) return nullptr;
  try {
    return json::parse(out);
  } catch (const std::exception&) {
    return nullptr;
  }
}

json ctlJson(const std::string& dir, std::vector<std::string> args) {
  std::string out;
  const int rc = runCtl(dir, args, &out);
  INFO("groupsgdctl " << (args.empty() ? "" : args[0]) << ": " << out);
  REQUIRE(rc == 0);
  return json::parse(out);
}

void generateKeys(const std::string& dir, const std::string& name) {
  REQUIRE(runTool({GROUPSGDCTL_PATH, "keygen", "--out", dir + "/" + name},
                  dir + "/keygen-" + name + ".log") == 0);
}

CurveKeys keysOf(const std::string& dir, const std::string& name) {
  auto own = loadSecretKeyFile(dir + "/" + name + ".key");
  REQUIRE(own.isOk());
  auto server = loadPublicKeyFile(dir + "/server.pub");
  REQUIRE(server.isOk());
  return CurveKeys{own->public_key, own->secret_key, *server};
}

json readSummary(const std::string& dir) {
  const std::string text = readFile(dir + "/summary.json");
  INFO("summary file: " << text);
  REQUIRE(!text.empty());
  return json::parse(text);
}

void checkAccounting(const json& s) {
  INFO("summary: " << s.dump());
  const auto trained = s["samples_trained"].get<std::uint64_t>();
  CHECK(trained > 0);
  CHECK(trained ==
        s["samples_applied"].get<std::uint64_t>() + s["samples_dropped"].get<std::uint64_t>());
  CHECK(s["samples_unaccounted"].get<std::uint64_t>() == 0);
  CHECK(s["accounting_ok"].get<bool>());
}

bool noCurve() {
  static const bool none = zmq_has("curve") == 0;
  return none;
}

void writeAllowList(const std::string& dir, const std::string& text) {
  {
    std::ofstream allow(dir + "/allow.tmp");
    allow << text;
  }
  std::filesystem::rename(dir + "/allow.tmp", dir + "/allow");
}

std::vector<std::string> nodeCurveArgs(const std::string& dir, const std::string& key) {
  return {"--curve-secret-key-file", dir + "/" + key + ".key",  "--curve-allow-file",
          dir + "/node-allow",       "--curve-server-key-file", dir + "/server.pub"};
}

void checkImpostorNodeRefused(const std::string& dir, const std::vector<std::string>& argv) {
  Process impostor(argv, dir + "/impostor.log");
  CHECK(impostor.wait(std::chrono::seconds(30)) == std::optional<int>(1));
  CHECK(readFile(dir + "/impostor.log").find("may not register as a node daemon") !=
        std::string::npos);
}

void reportDone(const std::string& dir) {
  std::fflush(stdout);
  removeTestDir(dir);
}

double wallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double stampOf(const std::string& log, const std::string& text, std::size_t from) {
  const std::size_t at = log.find(text, from);
  if (at == std::string::npos) return -1;
  const std::size_t start = log.rfind('\n', at);
  return log::lineSeconds(log.c_str() + (start == std::string::npos ? 0 : start + 1));
}

}  // namespace groupsgd::testing
