#include "groupsgd/daemon/ctl.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <utility>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/control_client.h"
#include "groupsgd/daemon/version.h"

namespace groupsgd::daemon {
namespace {

using ojson = nlohmann::ordered_json;
using std::chrono::milliseconds;

constexpr milliseconds kDefaultTimeout{5000};
constexpr milliseconds kDrainWaitTimeout{120000};

struct CommandSpec {
  const char* name;
  const char* usage;
  const char* summary;
  const char* details;
};

constexpr CommandSpec kCommands[] = {
    {"version", "version", "client and daemon versions", ""},
    {"status", "status", "the daemon's state: mode, stage, counts, central version", ""},
    {"workers", "workers", "one row per registered worker", ""},
    {"groups", "groups", "one row per group", ""},
    {"drain", "drain WORKER_ID [--wait]", "finish the worker's step, then remove it (admin)",
     "WORKER_ID is the numeric id or the worker's name. With --wait the reply comes once the\n"
     "worker has left (default timeout then 120000 ms).\n"},
    {"undrain", "undrain WORKER_ID", "cancel a drain that has not completed (admin)", ""},
    {"unquarantine", "unquarantine WORKER_ID", "let a quarantined worker register again (admin)",
     "The worker was quarantined for repeated bad updates; it registers again as a new worker.\n"},
    {"regroup", "regroup [--dry-run]", "recompute the grouping now (admin)",
     "With --dry-run the daemon only reports the grouping it would choose.\n"},
    {"set", "set KEY=VALUE...", "change runtime settings (admin)",
     "Each VALUE is read as JSON when it parses (numbers, true/false, null, quoted\n"
     "strings, objects), otherwise as a plain string: set log_level=debug step_deadline_ms=2000\n"},
    {"checkpoint", "checkpoint", "write a checkpoint of the central model now (admin)", ""},
    {"shutdown", "shutdown", "drain, checkpoint and stop the daemon (admin)",
     "The reply comes when shutdown has begun, not when the daemon has exited.\n"},
    {"keygen", "keygen --out PREFIX", "write a new CURVE key pair (local; no daemon needed)",
     "Writes PREFIX.key (the secret key, mode 0600) and PREFIX.pub (the public key) and\n"
     "prints the public key. Refuses to overwrite an existing key. Put worker and node\n"
     "public keys in the daemon's allow-list; see docs/operations.md.\n"},
    {"raw", "raw METHOD [JSON_PARAMS]", "send any method with params given as a JSON object",
     "Example: groupsgdctl raw drain '{\"worker\": 3, \"wait\": false}'\n"},
};

// keygen runs locally: it never touches the control socket.
int runKeygen(const std::vector<std::string>& rest, std::ostream& out, std::ostream& err) {
  std::string prefix;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--out" && i + 1 < rest.size()) {
      prefix = rest[++i];
    } else {
      err << "groupsgdctl: usage: groupsgdctl keygen --out PREFIX\n";
      return kCtlUsageOrConnection;
    }
  }
  if (prefix.empty()) {
    err << "groupsgdctl: usage: groupsgdctl keygen --out PREFIX\n";
    return kCtlUsageOrConnection;
  }
  auto keys = generateKeyPair();
  Status written = keys ? writeKeyPair(prefix, *keys) : keys.status();
  if (!written) {
    err << "groupsgdctl: keygen: " << written.message() << "\n";
    return kCtlRefused;
  }
  out << keys->public_key << "\n";
  return kCtlOk;
}

const CommandSpec* findCommand(const std::string& name) {
  for (const auto& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

void printGlobalHelp(std::ostream& out) {
  out << "usage: groupsgdctl [--socket PATH] [--json] [--timeout-ms MS] COMMAND [ARGS]\n"
         "\n"
         "Talks to a running groupsgdd over its control socket.\n"
         "\n"
         "options:\n"
         "  --socket PATH     control socket (default: $GROUPSGD_CONTROL_SOCKET, else\n"
         "                    "
      << kDefaultControlSocket
      << ")\n"
         "  --json            print the result as JSON instead of tables\n"
         "  --timeout-ms MS   deadline for connecting and for the reply (default 5000)\n"
         "  -h, --help        this help; COMMAND --help for a command's help\n"
         "\n"
         "commands:\n";
  std::size_t width = 0;
  for (const auto& c : kCommands) width = std::max(width, std::string(c.usage).size());
  for (const auto& c : kCommands) {
    out << "  " << c.usage << std::string(width - std::string(c.usage).size() + 2, ' ')
        << c.summary << "\n";
  }
  out << "\nexit status: 0 ok, 1 refused by the daemon, 2 usage or connection error\n";
}

void printCommandHelp(const CommandSpec& c, std::ostream& out) {
  out << "usage: groupsgdctl [OPTIONS] " << c.usage << "\n\n" << c.summary << ".\n";
  if (*c.details != '\0') out << "\n" << c.details;
}

// What to send for one command line.
struct Invocation {
  std::string method;
  ojson params = ojson::object();
  milliseconds default_timeout = kDefaultTimeout;
};

bool isDigits(const std::string& s) {
  return !s.empty() && s.size() <= 19 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A worker is named by its numeric id or its name.
ojson workerRef(const std::string& text) {
  if (isDigits(text)) return std::stoull(text);
  return text;
}

// Builds the request for a command; an empty method with `error` set is a usage error.
std::optional<Invocation> buildInvocation(const std::string& cmd,
                                          const std::vector<std::string>& args,
                                          std::string* error) {
  Invocation inv;
  inv.method = cmd;
  auto expectCount = [&](std::size_t lo, std::size_t hi) {
    if (args.size() < lo || args.size() > hi) {
      *error = std::string("'") + cmd + "' takes " +
               (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
               " argument(s); usage: groupsgdctl " + findCommand(cmd)->usage;
      return false;
    }
    return true;
  };
  if (cmd == "version" || cmd == "status" || cmd == "workers" || cmd == "groups" ||
      cmd == "checkpoint" || cmd == "shutdown") {
    if (!expectCount(0, 0)) return std::nullopt;
    return inv;
  }
  if (cmd == "drain" || cmd == "undrain" || cmd == "unquarantine") {
    std::vector<std::string> positional;
    bool wait = false;
    for (const auto& a : args) {
      if (cmd == "drain" && a == "--wait") {
        wait = true;
      } else if (!a.empty() && a[0] == '-' && !isDigits(a)) {
        *error = "unknown option '" + a + "' for " + cmd;
        return std::nullopt;
      } else {
        positional.push_back(a);
      }
    }
    if (positional.size() != 1 || positional[0].empty()) {
      *error = std::string("usage: groupsgdctl ") + findCommand(cmd)->usage;
      return std::nullopt;
    }
    inv.params["worker"] = workerRef(positional[0]);
    if (cmd == "drain") {
      inv.params["wait"] = wait;
      if (wait) inv.default_timeout = kDrainWaitTimeout;
    }
    return inv;
  }
  if (cmd == "regroup") {
    bool dry_run = false;
    for (const auto& a : args) {
      if (a != "--dry-run") {
        *error = "unknown argument '" + a + "'; usage: groupsgdctl regroup [--dry-run]";
        return std::nullopt;
      }
      dry_run = true;
    }
    inv.params["dry_run"] = dry_run;
    return inv;
  }
  if (cmd == "set") {
    if (args.empty()) {
      *error = "usage: groupsgdctl set KEY=VALUE...";
      return std::nullopt;
    }
    ojson values = ojson::object();
    for (const auto& a : args) {
      const auto eq = a.find('=');
      if (eq == std::string::npos || eq == 0) {
        *error = "'" + a + "' is not KEY=VALUE";
        return std::nullopt;
      }
      const std::string value = a.substr(eq + 1);
      ojson parsed = ojson::parse(value, nullptr, /*allow_exceptions=*/false);
      values[a.substr(0, eq)] = parsed.is_discarded() || value.empty() ? ojson(value) : parsed;
    }
    inv.params["values"] = std::move(values);
    return inv;
  }
  if (cmd == "raw") {
    if (!expectCount(1, 2)) return std::nullopt;
    inv.method = args[0];
    if (args.size() == 2) {
      inv.params = ojson::parse(args[1], nullptr, /*allow_exceptions=*/false);
      if (inv.params.is_discarded()) {
        *error = "JSON_PARAMS is not valid JSON: " + args[1];
        return std::nullopt;
      }
    }
    return inv;
  }
  *error = "unknown command '" + cmd + "' (groupsgdctl --help lists them)";
  return std::nullopt;
}

bool parseTimeout(const std::string& text, milliseconds* out) {
  if (!isDigits(text)) return false;
  const unsigned long long v = std::stoull(text);
  if (v == 0 || v > 24ULL * 3600 * 1000) return false;
  *out = milliseconds(v);
  return true;
}

bool isScalar(const ojson& v) { return !v.is_object() && !v.is_array(); }

bool isTable(const ojson& v) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const ojson& e) {
           return e.is_object();
         });
}

std::string cellText(const ojson& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array() && std::all_of(v.begin(), v.end(), isScalar)) {
    std::string joined;
    for (const auto& e : v) {
      if (!joined.empty()) joined += ", ";
      joined += cellText(e);
    }
    return joined;
  }
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

// Flattens nested objects into dotted keys; arrays of objects are set aside as tables.
void flatten(const ojson& obj, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>* lines,
             std::vector<std::pair<std::string, const ojson*>>* tables) {
  for (const auto& [key, value] : obj.items()) {
    const std::string name = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object() && !value.empty()) {
      flatten(value, name, lines, tables);
    } else if (isTable(value) && !value.empty()) {
      tables->emplace_back(name, &value);
    } else {
      lines->emplace_back(name, cellText(value));
    }
  }
}

}  // namespace

std::string defaultControlSocketPath() {
  const char* env = std::getenv("GROUPSGD_CONTROL_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  return kDefaultControlSocket;
}

std::string formatTable(const ojson& rows, const std::string& indent) {
  if (rows.empty()) return indent + "(none)\n";
  std::vector<std::string> columns;
  for (const auto& row : rows) {
    for (const auto& [key, value] : row.items()) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::vector<std::vector<std::string>> cells;
  cells.emplace_back();
  for (const auto& c : columns) cells.back().push_back(upper(c));
  for (const auto& row : rows) {
    cells.emplace_back();
    for (const auto& c : columns) {
      const auto it = row.find(c);
      cells.back().push_back(it == row.end() ? "-" : cellText(*it));
    }
  }
  std::vector<std::size_t> width(columns.size(), 0);
  for (const auto& line : cells) {
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  std::string out;
  for (const auto& line : cells) {
    std::string text = indent;
    for (std::size_t i = 0; i < line.size(); ++i) {
      text += line[i];
      if (i + 1 < line.size()) text += std::string(width[i] - line[i].size() + 2, ' ');
    }
    text.erase(text.find_last_not_of(' ') + 1);  // no trailing blanks (an empty last cell)
    out += text + "\n";
  }
  return out;
}

std::string formatResult(const ojson& result) {
  if (isTable(result)) return formatTable(result);
  if (result.is_array()) {
    std::string out;
    for (const auto& e : result) out += cellText(e) + "\n";
    return out;
  }
  if (!result.is_object()) return cellText(result) + "\n";
  if (result.size() == 1 && isTable(result.begin().value())) {
    return formatTable(result.begin().value());
  }
  std::vector<std::pair<std::string, std::string>> lines;
  std::vector<std::pair<std::string, const ojson*>> tables;
  flatten(result, "", &lines, &tables);
  std::size_t width = 0;
  for (const auto& [k, v] : lines) width = std::max(width, k.size());
  std::string out;
  for (const auto& [k, v] : lines) {
    out += k + ":" + (v.empty() ? "" : std::string(width - k.size() + 1, ' ') + v) + "\n";
  }
  for (const auto& [k, rows] : tables) {
    if (!out.empty()) out += "\n";
    out += k + ":\n" + formatTable(*rows, "  ");
  }
  return out;
}

namespace {

int runCtlUnchecked(const std::vector<std::string>& args, const std::string& default_socket,
                    std::ostream& out, std::ostream& err) {
  std::string socket = default_socket;
  bool json = false;
  std::optional<milliseconds> timeout;
  std::size_t i = 0;
  auto usageError = [&](const std::string& what) {
    err << "groupsgdctl: " << what << "\n";
    return kCtlUsageOrConnection;
  };
  for (; i < args.size() && !args[i].empty() && args[i][0] == '-'; ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      printGlobalHelp(out);
      return kCtlOk;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--socket" || a.rfind("--socket=", 0) == 0) {
      if (a == "--socket" && i + 1 >= args.size()) return usageError("--socket needs a PATH");
      socket = a == "--socket" ? args[++i] : a.substr(9);
      if (socket.empty()) return usageError("--socket needs a PATH");
    } else if (a == "--timeout-ms" || a.rfind("--timeout-ms=", 0) == 0) {
      if (a == "--timeout-ms" && i + 1 >= args.size()) return usageError("--timeout-ms needs MS");
      const std::string v = a == "--timeout-ms" ? args[++i] : a.substr(13);
      milliseconds t;
      if (!parseTimeout(v, &t)) return usageError("--timeout-ms wants 1..86400000, got '" + v + "'");
      timeout = t;
    } else {
      return usageError("unknown option '" + a + "' (groupsgdctl --help)");
    }
  }
  if (i >= args.size()) {
    printGlobalHelp(err);
    return kCtlUsageOrConnection;
  }
  const std::string cmd = args[i];
  std::vector<std::string> rest(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  if (cmd == "help") {
    if (rest.empty()) {
      printGlobalHelp(out);
      return kCtlOk;
    }
    const CommandSpec* spec = findCommand(rest[0]);
    if (spec == nullptr) return usageError("no command '" + rest[0] + "'");
    printCommandHelp(*spec, out);
    return kCtlOk;
  }
  const CommandSpec* spec = findCommand(cmd);
  if (spec == nullptr) return usageError("unknown command '" + cmd + "' (groupsgdctl --help)");
  if (std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
        return a == "--help" || a == "-h";
      }) != rest.end()) {
    printCommandHelp(*spec, out);
    return kCtlOk;
  }
  if (cmd == "keygen") return runKeygen(rest, out, err);
  std::string error;
  const auto inv = buildInvocation(cmd, rest, &error);
  if (!inv) return usageError(error);

  const milliseconds deadline = timeout.value_or(inv->default_timeout);
  const auto started = std::chrono::steady_clock::now();
  auto client = ControlClient::connect(socket, deadline);
  if (!client) return usageError(client.status().message());
  const auto spent =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started);
  const nlohmann::json params = nlohmann::json::parse(inv->params.dump());
  auto line = client->callLine(inv->method, params, std::max(deadline - spent, milliseconds(1)));
  if (!line) return usageError(line.status().message());
  const ojson reply = ojson::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded()) return usageError("malformed reply");

  if (!reply.value("ok", false)) {
    const ojson error_obj = reply.contains("error") ? reply["error"] : ojson::object();
    const std::string code = error_obj.is_object() ? error_obj.value("code", "internal") : "internal";
    const std::string message = error_obj.is_object() ? error_obj.value("message", "") : "";
    if (json) out << error_obj.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
    err << "groupsgdctl: " << inv->method << ": " << code << ": " << message << "\n";
    return kCtlRefused;
  }
  const ojson result = reply.contains("result") ? reply["result"] : ojson();
  if (json) {
    out << result.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
  } else {
    if (cmd == "version") out << "groupsgdctl: " << buildVersion() << "\n";
    out << formatResult(result);
  }
  return kCtlOk;
}

}  // namespace

int runCtl(const std::vector<std::string>& args, const std::string& default_socket,
           std::ostream& out, std::ostream& err) {
  try {
    return runCtlUnchecked(args, default_socket, out, err);
  } catch (const std::exception& e) {
    // A reply with unexpected types (e.g. a non-string error code) lands here.
    err << "groupsgdctl: " << e.what() << "\n";
    return kCtlUsageOrConnection;
  }
}

}  // namespace groupsgd::daemon
