#include "groupsgd/ops/ctl.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <utility>

#include <CLI/CLI.hpp>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/ops/control_client.h"
#include "groupsgd/ops/version.h"

namespace groupsgd::ops {
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
    {"failover", "failover", "a standby head: take over from the primary now (admin)",
     "Sent to a daemon started with --role standby once it follows its primary: it promotes\n"
     "itself at once (docs/reliability.md, \"Standby head\").\n"},
    {"shutdown", "shutdown", "drain, checkpoint and stop the daemon (admin)",
     "The reply comes when shutdown has begun, not when the daemon has exited.\n"},
    {"reload-keys", "reload-keys", "re-read the CURVE allow-list now (admin)",
     "The daemon reads curve.allow_file again (as on SIGHUP). A removed key's new\n"
     "connections are refused, and so is the next message of its open ones.\n"},
    {"keygen", "keygen --out PREFIX", "write a new CURVE key pair (local; no daemon needed)",
     "Writes PREFIX.key (the secret key, mode 0600) and PREFIX.pub (the public key) and\n"
     "prints the public key. Refuses to overwrite an existing key. Put worker and node\n"
     "public keys in the daemon's allow-list; see docs/operations.md.\n"},
    {"job", "job submit FILE | list | status JOB | stop JOB [--drain] | summary JOB",
     "the jobs of a daemon started with --serve (admin: submit, stop)",
     "submit FILE   start the job in FILE (a JSON object: \"name\" plus job options,\n"
     "              docs/jobs.md); a bad one is refused with every problem named\n"
     "list          every job: name, id, state, mode, group PSes, coordinator\n"
     "status JOB    the job's row, configuration and its coordinator's status\n"
     "stop JOB      end the job now; with --drain its trainers finish their step first\n"
     "summary JOB   the summary of a job that has ended\n"
     "The other commands (status, workers, drain, set, ...) go to one job: name it with\n"
     "--job JOB when more than one runs.\n"},
    {"raw", "raw METHOD [JSON_PARAMS]", "send any method with params given as a JSON object",
     "Example: groupsgdctl raw drain '{\"worker\": 3, \"wait\": false}'\n"},
};

// keygen runs locally: it never touches the control socket.
int runKeygen(const std::string& prefix, std::ostream& out, std::ostream& err) {
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
         "  --job JOB         a daemon hosting several jobs: the job a command is for\n"
         "  -h, --help        this help; COMMAND --help for a command's help\n"
         "\n"
         "commands:\n";
  std::size_t width = 0;
  for (const auto& c : kCommands) width = std::max(width, std::string(c.usage).size());
  for (const auto& c : kCommands) {
    out << "  " << c.usage << std::string(width - std::string(c.usage).size() + 2, ' ') << c.summary
        << "\n";
  }
  out << "\nThe options may also follow the command (groupsgdctl status --json); a value\n"
         "is the next word or follows an '='.\n"
         "\nexit status: 0 ok, 1 refused by the daemon, 2 usage or connection error\n";
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
// The flags a command may take; CLI11 has refused any other option already.
struct CommandFlags {
  bool wait = false;     // drain
  bool dry_run = false;  // regroup
  bool drain = false;    // job stop
};

// job SUB ...: reads a submitted file here, so the daemon gets its contents.
std::optional<Invocation> buildJobInvocation(const std::vector<std::string>& args,
                                             const CommandFlags& flags, std::string* error) {
  const std::string usage =
      "usage: groupsgdctl job submit FILE | list | status JOB | stop JOB "
      "[--drain] | summary JOB";
  if (args.empty()) {
    *error = usage;
    return std::nullopt;
  }
  Invocation inv;
  const std::string& sub = args[0];
  inv.method = "job." + sub;
  if (sub == "list" && args.size() == 1) return inv;
  if ((sub == "status" || sub == "stop" || sub == "summary") && args.size() == 2) {
    inv.params["job"] = args[1];
    if (sub == "stop") inv.params["drain"] = flags.drain;
    return inv;
  }
  if (sub == "submit" && args.size() == 2) {
    std::ifstream in(args[1]);
    if (!in) {
      *error = "cannot open " + args[1];
      return std::nullopt;
    }
    std::stringstream text;
    text << in.rdbuf();
    ojson config = ojson::parse(text.str(), nullptr, /*allow_exceptions=*/false,
                                /*ignore_comments=*/true);
    if (config.is_discarded() || !config.is_object()) {
      *error = args[1] + " is not a JSON object";
      return std::nullopt;
    }
    inv.params["config"] = std::move(config);
    return inv;
  }
  *error = usage;
  return std::nullopt;
}

std::optional<Invocation> buildInvocation(const std::string& cmd,
                                          const std::vector<std::string>& args,
                                          const CommandFlags& flags, std::string* error) {
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
      cmd == "checkpoint" || cmd == "shutdown" || cmd == "failover") {
    if (!expectCount(0, 0)) return std::nullopt;
    return inv;
  }
  if (cmd == "reload-keys") {
    if (!expectCount(0, 0)) return std::nullopt;
    inv.method = "reload_keys";
    return inv;
  }
  if (cmd == "drain" || cmd == "undrain" || cmd == "unquarantine") {
    if (args.size() != 1 || args[0].empty()) {
      *error = std::string("usage: groupsgdctl ") + findCommand(cmd)->usage;
      return std::nullopt;
    }
    inv.params["worker"] = workerRef(args[0]);
    if (cmd == "drain") {
      inv.params["wait"] = flags.wait;
      if (flags.wait) inv.default_timeout = kDrainWaitTimeout;
    }
    return inv;
  }
  if (cmd == "regroup") {
    if (!expectCount(0, 0)) return std::nullopt;
    inv.params["dry_run"] = flags.dry_run;
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
  if (cmd == "job") return buildJobInvocation(args, flags, error);
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
  return v.is_array() &&
         std::all_of(v.begin(), v.end(), [](const ojson& e) { return e.is_object(); });
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string printed(const char* format, double v) {
  char text[64];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

// A fraction (not an integer) as a person reads it; the key (its last dotted part) says
// what it measures. --json keeps the full value.
std::string numberText(const std::string& dotted_key, double v) {
  const std::string key = dotted_key.substr(dotted_key.rfind('.') + 1);
  if (endsWith(key, "_per_s") || key.find("rate") != std::string::npos ||
      key.find("speed") != std::string::npos) {
    return printed(std::fabs(v) >= 100 ? "%.0f" : "%.3g", v);  // rates: 3 figures or more
  }
  if (endsWith(key, "_ms") || endsWith(key, "_s")) return printed("%.1f", v);
  if (key.find("acc") != std::string::npos || key.find("loss") != std::string::npos) {
    return printed("%.4f", v);
  }
  // lr, ratios, anything else: 4 significant figures, no exponent for large values
  return printed(std::fabs(v) >= 1e4 ? "%.0f" : "%.4g", v);
}

std::string cellText(const ojson& v, const std::string& key = "") {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return numberText(key, v.get<double>());
  if (v.is_array() && std::all_of(v.begin(), v.end(), isScalar)) {
    std::string joined;
    for (const auto& e : v) {
      if (!joined.empty()) joined += ", ";
      joined += cellText(e, key);
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
      lines->emplace_back(name, cellText(value, name));
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
      cells.back().push_back(it == row.end() ? "-" : cellText(*it, c));
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

// What one command line asked for.
struct CtlCommandLine {
  std::string socket;
  bool json = false;
  std::string timeout_text;
  std::string job;  // --job: the job a per-job command goes to
  bool help = false;
  std::string command;            // "" = none given
  std::vector<std::string> args;  // the command's positional arguments
  CommandFlags flags;
  std::string out_prefix;          // keygen
  std::vector<std::string> stray;  // a first word that is no command
};

// The global options may come before or after the command ("status --json"): each
// subcommand falls through to them. Help is printed by us, so its flags are plain flags.
std::unique_ptr<CLI::App> makeCtlApp(CtlCommandLine* line) {
  auto app = std::make_unique<CLI::App>("groupsgdctl", "groupsgdctl");
  app->set_help_flag();
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->add_flag("-h,--help", line->help);
  app->add_flag("--json", line->json);
  app->add_option("--socket", line->socket);
  app->add_option("--timeout-ms", line->timeout_text);
  app->add_option("--job", line->job);
  app->add_option("command", line->stray);
  app->require_subcommand(0, 1);
  auto add = [&](const std::string& name) {
    CLI::App* sub = app->add_subcommand(name);
    sub->fallthrough();
    sub->set_help_flag();
    sub->add_flag("-h,--help", line->help);
    sub->add_option("args", line->args);
    sub->callback([line, name] { line->command = name; });
    return sub;
  };
  for (const auto& c : kCommands) {
    CLI::App* sub = add(c.name);
    if (std::string(c.name) == "drain") sub->add_flag("--wait", line->flags.wait);
    if (std::string(c.name) == "regroup") sub->add_flag("--dry-run", line->flags.dry_run);
    if (std::string(c.name) == "keygen") sub->add_option("--out", line->out_prefix);
    if (std::string(c.name) == "job") sub->add_flag("--drain", line->flags.drain);
  }
  add("help");
  return app;
}

int usageError(std::ostream& err, const std::string& what) {
  err << "groupsgdctl: " << what << "\n";
  return kCtlUsageOrConnection;
}

// Parses the command line into *cl and *timeout; an exit code when that already answered
// it (a usage error, the global help).
std::optional<int> parseCtlLine(const std::vector<std::string>& args, CtlCommandLine* cl,
                                std::optional<milliseconds>* timeout, std::ostream& out,
                                std::ostream& err) {
  auto app = makeCtlApp(cl);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
    app->parse(reversed);
  } catch (const CLI::ParseError& e) {
    return usageError(err, std::string(e.what()) + " (groupsgdctl --help)");
  }
  if (!cl->stray.empty()) {
    return usageError(err, "unknown command '" + cl->stray[0] + "' (groupsgdctl --help)");
  }
  if (cl->help && cl->command.empty()) {
    printGlobalHelp(out);
    return kCtlOk;
  }
  if (cl->command.empty()) {
    printGlobalHelp(err);
    return kCtlUsageOrConnection;
  }
  if (!cl->timeout_text.empty()) {
    milliseconds t;
    if (!parseTimeout(cl->timeout_text, &t)) {
      return usageError(err, "--timeout-ms wants 1..86400000, got '" + cl->timeout_text + "'");
    }
    *timeout = t;
  }
  return std::nullopt;
}

// help, --help and keygen need no daemon: their exit code, or nullopt for the others.
std::optional<int> runLocalCommand(const CtlCommandLine& cl, std::ostream& out, std::ostream& err) {
  if (cl.command == "help") {
    if (cl.args.empty()) {
      printGlobalHelp(out);
      return kCtlOk;
    }
    const CommandSpec* spec = findCommand(cl.args[0]);
    if (spec == nullptr) return usageError(err, "no command '" + cl.args[0] + "'");
    printCommandHelp(*spec, out);
    return kCtlOk;
  }
  if (cl.help) {
    printCommandHelp(*findCommand(cl.command), out);
    return kCtlOk;
  }
  if (cl.command == "keygen") {
    if (!cl.args.empty()) return usageError(err, "usage: groupsgdctl keygen --out PREFIX");
    return runKeygen(cl.out_prefix, out, err);
  }
  return std::nullopt;
}

// One call on the control socket within deadline (connecting included): the parsed reply.
Result<ojson> callDaemon(const std::string& socket, const Invocation& inv, milliseconds deadline) {
  const auto started = std::chrono::steady_clock::now();
  auto client = ControlClient::connect(socket, deadline);
  if (!client) return client.status();
  const auto spent =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started);
  const nlohmann::json params = nlohmann::json::parse(inv.params.dump());
  auto line = client->callLine(inv.method, params, std::max(deadline - spent, milliseconds(1)));
  if (!line) return line.status();
  ojson reply = ojson::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded()) return unavailable("malformed reply");
  return reply;
}

// Prints a reply's result (a table, or JSON with --json) or its error.
int printReply(const ojson& reply, const std::string& method, const CtlCommandLine& cl,
               std::ostream& out, std::ostream& err) {
  if (!reply.value("ok", false)) {
    const ojson error_obj = reply.contains("error") ? reply["error"] : ojson::object();
    const std::string code =
        error_obj.is_object() ? error_obj.value("code", "internal") : "internal";
    const std::string message = error_obj.is_object() ? error_obj.value("message", "") : "";
    if (cl.json) out << error_obj.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
    err << "groupsgdctl: " << method << ": " << code << ": " << message << "\n";
    return kCtlRefused;
  }
  const ojson result = reply.contains("result") ? reply["result"] : ojson();
  if (cl.json) {
    out << result.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
  } else {
    if (cl.command == "version") out << "groupsgdctl: " << buildVersion() << "\n";
    out << formatResult(result);
  }
  return kCtlOk;
}

int runCtlUnchecked(const std::vector<std::string>& args, const std::string& default_socket,
                    std::ostream& out, std::ostream& err) {
  CtlCommandLine cl;
  cl.socket = default_socket;
  std::optional<milliseconds> timeout;
  if (auto done = parseCtlLine(args, &cl, &timeout, out, err)) return *done;
  if (auto done = runLocalCommand(cl, out, err)) return *done;
  if (cl.socket.empty()) return usageError(err, "--socket needs a PATH");
  std::string error;
  auto inv = buildInvocation(cl.command, cl.args, cl.flags, &error);
  if (!inv) return usageError(err, error);
  if (!cl.job.empty() && cl.command != "job") inv->params["job"] = cl.job;
  auto reply = callDaemon(cl.socket, *inv, timeout.value_or(inv->default_timeout));
  if (!reply) return usageError(err, reply.status().message());
  return printReply(*reply, inv->method, cl, out, err);
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

}  // namespace groupsgd::ops
