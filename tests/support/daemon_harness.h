// The daemon under test, for the process tests: groupsgdd started in a test's directory
// (its endpoint file, control socket and summary there), groupsgdctl calls returning JSON,
// CURVE key files, the run summary and its accounting check, log time stamps.
// The program paths are compiled into the support library (tests/CMakeLists.txt);
// groupsgd_add_process_test(... NEEDS ...) builds the programs a test runs.
// Thread rule: the test's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/curve_keys.h"
#include "process.h"

namespace groupsgd::testing {

// The programs, as built in this tree.
const char* groupsgddPath();
const char* groupsgdctlPath();

// groupsgdd --listen LISTEN --endpoint-file DIR/endpoint [--control-socket DIR/ctl.sock]
// --summary-file DIR/summary.json ARGS, its output in DIR/LOG; returns once the endpoint
// file is written (fails the test with the log otherwise).
struct DaemonFiles {
  std::string listen = "tcp://127.0.0.1:0";
  bool control_socket = true;
};
std::unique_ptr<Process> startDaemon(const std::string& dir, const std::string& log,
                                     std::vector<std::string> args, const DaemonFiles& files);
// The same with the control socket (the common case).
std::unique_ptr<Process> startDaemon(const std::string& dir, const std::string& log,
                                     const std::string& listen, std::vector<std::string> args);
// `args` followed by `more`.
inline std::vector<std::string> withArgs(std::vector<std::string> args,
                                         const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}
// The endpoint the daemon wrote into DIR/endpoint.
std::string endpointIn(const std::string& dir);

// A loopback TCP port nothing listens on now (the kernel's choice, released at once), for
// a daemon that must keep its endpoint across a restart.
int freePort();

// Runs a program to completion (failing the test if it takes longer than `timeout`);
// returns its exit code and leaves its output in `log`.
int runTool(const std::vector<std::string>& argv, const std::string& log,
            std::chrono::milliseconds timeout = std::chrono::seconds(120));
// groupsgdctl --socket DIR/ctl.sock --json ARGS, parsed; null when it fails or the daemon
// does not answer.
nlohmann::json ctl(const std::string& dir, std::vector<std::string> args);
// The same, failing the test unless it succeeds.
nlohmann::json ctlJson(const std::string& dir, std::vector<std::string> args);
// Polls `status` until pred(status) holds or the timeout passes; returns the last status.
template <typename Pred>
nlohmann::json waitForStatus(const std::string& dir, Pred pred, std::chrono::milliseconds timeout) {
  nlohmann::json st;
  waitUntil(
      [&] {
        st = ctl(dir, {"status"});
        return st.is_object() && pred(st);
      },
      timeout, std::chrono::milliseconds(100));
  return st;
}

// groupsgdctl keygen --out DIR/NAME: DIR/NAME.key and DIR/NAME.pub.
void generateKeys(const std::string& dir, const std::string& name);
// The same for each of `names`.
inline void generateKeys(const std::string& dir, std::initializer_list<const char*> names) {
  for (const char* name : names) generateKeys(dir, name);
}
// The keys of DIR/NAME.key, with DIR/server.pub as the server's key.
CurveKeys keysOf(const std::string& dir, const std::string& name);

// libzmq built without CURVE: the CURVE cases mark themselves skipped (never passed silently).
bool noCurve();
// TEXT as DIR/allow, written in one step (a new file renamed over the old one), as an
// operator's edit of the allow-list.
void writeAllowList(const std::string& dir, const std::string& text);
// The CURVE flags of a daemon with the key pair DIR/server.key admitting the keys of
// DIR/allow.
inline std::vector<std::string> serverCurveArgs(const std::string& dir) {
  return {"--curve-secret-key-file", dir + "/server.key", "--curve-allow-file", dir + "/allow"};
}
// The CURVE flags of a node daemon with the key pair DIR/KEY.key that admits the clients of
// DIR/node-allow and trusts the server key DIR/server.pub.
std::vector<std::string> nodeCurveArgs(const std::string& dir, const std::string& key);
// A node daemon run as `argv` with a worker's key pair (its output in DIR/impostor.log) is
// refused: it exits 1, saying it may not register as a node daemon.
void checkImpostorNodeRefused(const std::string& dir, const std::vector<std::string>& argv);

// DIR/summary.json, parsed.
nlohmann::json readSummary(const std::string& dir);
// samples_trained > 0 and == samples_applied + samples_dropped, nothing unaccounted,
// accounting_ok.
void checkAccounting(const nlohmann::json& summary);

// A JSON count as printf's %llu takes it, for the figures a test prints.
inline unsigned long long llu(const nlohmann::json& count) {
  return static_cast<unsigned long long>(count.get<std::uint64_t>());
}
// After a test's report lines: flushes them, then removes the test's directory.
void reportDone(const std::string& dir);

// Seconds since the epoch (the clock log lines are stamped with).
double wallNow();
// The time stamp of the first log line holding `text` at or after byte `from`, as seconds
// since the epoch (log::lineSeconds); -1 if none.
double stampOf(const std::string& log, const std::string& text, std::size_t from = 0);

}  // namespace groupsgd::testing
