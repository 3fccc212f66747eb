// groupsgdctl, the command-line client of the control socket. The whole program is
// runCtl(); ops/src/ctl_main.cc only passes argv, the environment's default socket
// and the standard streams, so tests run it in-process as well as as a binary.
//
//   groupsgdctl [--socket PATH] [--json] [--timeout-ms MS] COMMAND [ARGS]
//
// Exit status: 0 ok (and --help), 1 the daemon answered ok:false, 2 usage error,
// connection failure, timeout or a malformed reply. docs/operations.md has the manual.
// Thread rule: runCtl is reentrant; it shares nothing between calls.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace groupsgd::ops {

inline constexpr const char* kDefaultControlSocket = "/run/groupsgd/control.sock";
inline constexpr int kCtlOk = 0;
inline constexpr int kCtlRefused = 1;
inline constexpr int kCtlUsageOrConnection = 2;

// $GROUPSGD_CONTROL_SOCKET if set and not empty, else kDefaultControlSocket.
std::string defaultControlSocketPath();

// Runs groupsgdctl with args (argv without argv[0]); writes results to out and
// diagnostics to err; returns the exit status.
int runCtl(const std::vector<std::string>& args, const std::string& default_socket,
           std::ostream& out, std::ostream& err);

// Readable rendering of a result (what groupsgdctl prints without --json):
// - an array of objects: an aligned table, columns from the keys in first-seen order,
//   headers upper-cased, "-" for a missing or null cell; "(none)" when empty;
// - an object: "key: value" lines with aligned values, nested objects flattened with
//   dotted keys, arrays of scalars joined with ", "; each array of objects follows as
//   "key:" and an indented table; an object holding only one such array is just the table;
// - a scalar: its text (strings without quotes).
// Fractions are rounded by what their key measures (docs/operations.md, "groupsgdctl"):
// *_ms and *_s to 0.1, *acc* and *loss* to 4 places, rates (*_per_s, *rate*, *speed*) to
// 3 figures, anything else to 4 significant figures; integers are printed as they are.
std::string formatResult(const nlohmann::ordered_json& result);
std::string formatTable(const nlohmann::ordered_json& rows, const std::string& indent = "");

}  // namespace groupsgd::ops
