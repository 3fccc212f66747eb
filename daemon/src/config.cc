#include "groupsgd/daemon/config.h"

#include <array>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "groupsgd/base/enum_names.h"
#include "groupsgd/codec/compression_spec.h"
#include "groupsgd/daemon/config_options.h"
#include "groupsgd/daemon/group_server_setup.h"

namespace groupsgd::daemon {
namespace {

using nlohmann::json;

// Applies the members of one JSON object; prefix is "" at the top, "adaptive." inside.
void applyObject(const json& obj, const std::string& prefix, DaemonConfig* c) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string key = prefix + it.key();
    // Nested options are written as objects ({"adaptive": {"control_ms": ...}}), not "a.b".
    if (it.key().find('.') != std::string::npos) throw OptionError("unknown option '" + key + "'");
    if (const OptionSpec* o = findOption(key)) {
      o->read(*it, c);
    } else if (isOptionObject(key)) {
      if (!it->is_object()) throw OptionError(key + " must be an object, got " + it->dump());
      applyObject(*it, key + ".", c);
    } else {
      throw OptionError("unknown option '" + key + "'");
    }
  }
}

json::json_pointer pointerTo(const std::string& key) {
  std::string p = "/" + key;
  for (char& ch : p) {
    if (ch == '.') ch = '/';
  }
  return json::json_pointer(p);
}

}  // namespace

constexpr std::array<base::EnumName<Mode>, 4> kModeNames{{
    {Mode::kSync, "sync"},
    {Mode::kAsync, "async"},
    {Mode::kGrouped, "grouped"},
    {Mode::kAdaptive, "adaptive"},
}};

bool parseMode(const std::string& text, Mode* out) {
  return base::parseInto(kModeNames, text, out);
}

const char* modeName(Mode mode) { return base::nameOf(kModeNames, mode); }

std::uint32_t DaemonConfig::groupCount() const {
  switch (mode) {
    case Mode::kSync:
      return 1;
    case Mode::kAsync:
      return workers;
    case Mode::kGrouped:
      return groups;
    case Mode::kAdaptive:
      return std::min(workers, std::max({1u, adaptive.stages.coarse_max_groups,
                                         adaptive.stages.fine_max_groups}));
  }
  return 1;
}

std::uint32_t DaemonConfig::exchangePeriod() const {
  return mode == Mode::kGrouped ? exchange_period : 1;
}

Status applyJson(const json& j, DaemonConfig* cfg) {
  if (!j.is_object()) return invalidArgument("the configuration must be a JSON object");
  try {
    applyObject(j, "", cfg);
    return Status::ok();
  } catch (const OptionError& e) {
    return invalidArgument(e.what());
  }
}

Status loadConfigFile(const std::string& path, DaemonConfig* cfg) {
  std::ifstream in(path);
  if (!in) return notFound("cannot open configuration file " + path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (j.is_discarded()) return invalidArgument("configuration file " + path + " is not valid JSON");
  Status s = applyJson(j, cfg);
  if (!s) return Status(s.code(), path + ": " + s.message());
  return Status::ok();
}

namespace {

// "--name=value" is "--name" "value".
std::vector<std::string> splitAssignments(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    const auto eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      out.push_back(a.substr(0, eq));
      out.push_back(a.substr(eq + 1));
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace

Status applyFlags(const std::vector<std::string>& given, DaemonConfig* cfg, bool* help) {
  const std::vector<std::string> args = splitAssignments(given);
  // --config is applied first wherever it appears, so flags override the file.
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return invalidArgument("--config needs a file");
      GSGD_RETURN_IF_ERROR(loadConfigFile(args[i + 1], cfg));
      cfg->config_file = args[i + 1];
    }
  }
  // Flags are applied as a JSON patch so files and flags share one reader.
  json patch = json::object();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      continue;
    }
    if (a == "--config") {
      ++i;
      continue;
    }
    const OptionSpec* o = findFlag(a);
    if (o == nullptr) return invalidArgument("unknown option '" + a + "' (see --help)");
    if (o->type == OptionType::kBool) {
      patch[pointerTo(o->key)] = true;
      continue;
    }
    if (i + 1 >= args.size()) return invalidArgument(a + " needs a value");
    const std::string& v = args[++i];
    json value = v;
    if (o->type != OptionType::kString && o->type != OptionType::kChoice) {
      value = json::parse(v, nullptr, false);
      if (!value.is_number()) return invalidArgument(a + " expects a number, got '" + v + "'");
    }
    patch[pointerTo(o->key)] = value;
  }
  return applyJson(patch, cfg);
}

namespace {

// central_shards across options (docs/shards.md).
Status validateCentralShards(const DaemonConfig& c) {
  if (c.central_shard_split != "tensors" && c.central_shard_split != "even") {
    return invalidArgument("central_shard_split '" + c.central_shard_split +
                           "' is not one of tensors, even");
  }
  if (c.node_central_shard != 0 && c.role != "node") {
    return invalidArgument("node_central_shard is for role node");
  }
  // A node's shard has a standby with both: the stream at replication_listen, and the
  // standby's endpoint for the shard map (docs/shards.md, "A node-hosted shard's standby").
  if (c.role == "node" &&
      (!c.replication_listen.empty() || !c.node_central_shard_standby.empty()) &&
      (c.node_central_shard == 0 || c.replication_listen.empty() ||
       c.node_central_shard_standby.empty())) {
    return invalidArgument(
        "a node's central shard has a standby with node_central_shard K, replication_listen "
        "(where the standby follows it) and node_central_shard_standby (where the standby "
        "serves once promoted): all three or none of the last two");
  }
  if (!c.node_central_shard_standby.empty() && c.role != "node") {
    return invalidArgument("node_central_shard_standby is for role node (with node_central_shard)");
  }
  if (!(c.central_cut_interval_s >= 0)) {
    return invalidArgument("central_cut_interval_s must be >= 0 (0 = no cuts)");
  }
  if (c.central_cut_interval_s > 0 && c.checkpoint_dir.empty()) {
    return invalidArgument("central_cut_interval_s needs checkpoint_dir (the cut's files)");
  }
  if (c.central_shards == 1 && c.role != "central-shard") {
    if (!c.central_shard_endpoints.empty()) {
      return invalidArgument("central_shard_endpoints needs central_shards > 1");
    }
    if (c.node_central_shard != 0) {
      return invalidArgument("node_central_shard needs central_shards > 1");
    }
    return Status::ok();
  }
  // A node without a shard takes the shard map from the head whatever its central_shards.
  if (c.role == "node" && c.node_central_shard == 0) return Status::ok();
  if (c.role == "node" && c.node_central_shard >= c.central_shards) {
    return invalidArgument("node_central_shard " + std::to_string(c.node_central_shard) +
                           " is not between 1 and central_shards-1 (" +
                           std::to_string(c.central_shards - 1) + ")");
  }
  if (c.role == "node" && !c.curve_server_key_file.empty()) {
    return invalidArgument(
        "node_central_shard: the shard map names no key, so a node hosting a shard serves it "
        "with the head's key pair (no curve.server_key_file)");
  }
  if (c.external_model || c.serve) {
    return invalidArgument(
        "central_shards > 1 (or role central-shard) is for a single run of a built-in model "
        "headed by role all or coordinator (or its standby), not model external or serve");
  }
  // A sharded head's standby reconnects to shards 1..S-1 on takeover: from the list, or,
  // without one, gathering them from the node daemons hosting them again.
  if (!c.compress_deltas.empty() && c.compress_deltas != "none" && c.compress_deltas != "dense") {
    return invalidArgument("central_shards > 1 sends dense deltas (compress_deltas none)");
  }
  if (c.role == "node") return Status::ok();  // hosting node_central_shard
  if (c.role == "central-shard") {
    if (!c.primary.empty() && c.shard_index == 0) {
      return invalidArgument(
          "role central-shard with --primary (a shard's standby) needs --shard-index between 1 "
          "and central_shards-1: shard 0 is the head's (its standby is role standby)");
    }
    if (c.shard_index == 0 || c.shard_index >= c.central_shards) {
      return invalidArgument(
          "role central-shard needs --shard-index between 1 and central_shards-1");
    }
    return Status::ok();
  }
  // None listed: the head gathers them from node daemons hosting them (node_central_shard).
  std::size_t listed = c.central_shard_endpoints.empty() ? 0 : 1;
  for (char ch : c.central_shard_endpoints) listed += ch == ',';
  if (listed != 0 && listed != c.central_shards - 1) {
    return invalidArgument("central_shards " + std::to_string(c.central_shards) + " needs " +
                           std::to_string(c.central_shards - 1) +
                           " central_shard_endpoints (shards 1..S-1), got " +
                           std::to_string(listed));
  }
  return Status::ok();
}

}  // namespace

bool gradientCompressionChosenPerGroup(const DaemonConfig& cfg) {
  return cfg.compress_gradients == "auto" && cfg.mode == Mode::kAdaptive;
}

std::string fixedGradientCompression(const DaemonConfig& cfg) {
  return cfg.compress_gradients == "auto" ? "dense" : cfg.compress_gradients;
}

Status validate(const DaemonConfig& c) {
  if (c.role != "all" && c.role != "coordinator" && c.role != "node" && c.role != "standby" &&
      c.role != "central-shard") {
    return invalidArgument("role '" + c.role +
                           "' is not one of all, coordinator, node, standby, central-shard");
  }
  GSGD_RETURN_IF_ERROR(validateCentralShards(c));
  if (c.role == "standby" && c.primary.empty()) {
    return invalidArgument(
        "role standby needs --primary ENDPOINT (the primary's replication_listen)");
  }
  if (c.role == "standby" && !c.replication_listen.empty() && c.replication_listen == c.primary) {
    return invalidArgument(
        "role standby: its own replication_listen (opened once it takes over) must differ "
        "from --primary (the primary's)");
  }
  // With serve: a --serve daemon's standby (docs/jobs.md, "Standby"); model external
  // jobs may still be submitted to it (they are not followed).
  if (c.role == "standby" && c.external_model && !c.serve) {
    return invalidArgument(
        "role standby follows a single-run head of a built-in model (not model external)");
  }
  if (!c.replication_listen.empty() && c.role == "node" && c.node_central_shard == 0) {
    return invalidArgument(
        "replication_listen is for a head (role all, coordinator or standby, one run or "
        "--serve), a central shard, or a node hosting one");
  }
  if (c.ps_placement != "hosts" && c.ps_placement != "order") {
    return invalidArgument("ps_placement '" + c.ps_placement + "' is not one of hosts, order");
  }
  // Single-option bounds come from the option table; below are the checks across options.
  GSGD_RETURN_IF_ERROR(checkRanges(c));
  if (c.role == "node" &&
      (c.coordinator.empty() || (c.node_groups == 0 && c.node_central_shard == 0))) {
    return invalidArgument(
        "role node needs --coordinator ENDPOINT and --node-groups >= 1 (0 only with "
        "--node-central-shard)");
  }
  if (c.serve && (c.state_dir.empty() || c.control_socket.empty() ||
                  (c.role != "all" && c.role != "standby"))) {
    return invalidArgument("serve needs state_dir and control_socket, and role all (or standby)");
  }
  if (c.external_model && (!c.optimizer_decay_1d || !c.outer_optimizer_decay_1d)) {
    return invalidArgument(
        "optimizer.decay_1d / outer_optimizer.decay_1d false needs a built-in model: with model "
        "external the daemon does not know which tensors are 1-D (keep it true, or set "
        "weight_decay 0)");
  }
  if (!c.external_model_file.empty() && !c.external_model) {
    return invalidArgument("external_model_file needs model external");
  }
  if (c.mode == Mode::kGrouped && (c.groups == 0 || c.groups > c.workers)) {
    return invalidArgument("groups must be between 1 and workers (" + std::to_string(c.workers) +
                           ")");
  }
  for (const auto* spec : {&c.compress_gradients, &c.compress_deltas}) {
    if (spec == &c.compress_gradients && *spec == "auto") continue;  // chosen per group
    if (auto parsed = parseCompressionSpec(*spec); !parsed) return parsed.status();
  }
  if (const std::string p = groupps::lrScheduleProblem(lrScheduleOf(c)); !p.empty()) {
    return invalidArgument("optimizer: " + p);
  }
  const adaptive::AdaptiveConfig& a = c.adaptive;
  if (a.min_samples > a.estimator_window) {
    return invalidArgument("adaptive: min_samples must be in [1, estimator_window]");
  }
  if (c.mode == Mode::kAdaptive &&
      (a.min_batch == 0 || a.min_batch > c.batch_size || a.max_batch < c.batch_size)) {
    return invalidArgument("adaptive: need 0 < min_batch <= batch_size <= max_batch");
  }
  if (a.step_cutoff != 0 && !(a.step_cutoff >= 1.0 && a.step_cutoff <= 100.0)) {
    return invalidArgument("adaptive: step_cutoff must be 0 (off) or in [1, 100]");
  }
  if (a.straggler.exit_ratio > a.straggler.enter_ratio) {
    return invalidArgument("adaptive: straggler_exit_ratio must not exceed straggler_enter_ratio");
  }
  if (a.straggler.erratic_window > 0 &&
      (a.straggler.erratic_clear_window < a.straggler.erratic_window ||
       a.straggler.erratic_spikes > a.straggler.erratic_window)) {
    return invalidArgument(
        "adaptive: need straggler_erratic_spikes <= straggler_erratic_window <= "
        "straggler_erratic_clear_window");
  }
  if (a.straggler.erratic_window > 0 && a.straggler.erratic_early_window > 0 &&
      (a.straggler.erratic_early_window > a.straggler.erratic_window ||
       a.straggler.erratic_early_ratio < a.straggler.enter_ratio ||
       a.straggler.erratic_spikes > a.straggler.erratic_early_window)) {
    return invalidArgument(
        "adaptive: need straggler_erratic_spikes <= straggler_erratic_early_window <= "
        "straggler_erratic_window and straggler_erratic_early_ratio >= straggler_enter_ratio");
  }
  if (!c.metrics_listen.empty()) {
    const auto colon = c.metrics_listen.rfind(':');
    const std::string port = colon == std::string::npos ? "" : c.metrics_listen.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535) {
      return invalidArgument("metrics_listen must be HOST:PORT with a port 0-65535");
    }
  }
  if (c.curve_secret_key_file.empty() != c.curve_allow_file.empty()) {
    return invalidArgument("curve needs both secret_key_file and allow_file (or neither)");
  }
  if (!c.curve_server_key_file.empty() && c.role != "node") {
    return invalidArgument("curve.server_key_file is for role node (the head's public key)");
  }
  if (!c.curve_server_key_file.empty() && c.curve_secret_key_file.empty()) {
    return invalidArgument(
        "curve.server_key_file needs curve.secret_key_file (the node's own pair)");
  }
  return Status::ok();
}

json toJson(const DaemonConfig& c) {
  json j = json::object();
  for (const auto& o : daemonOptions()) j[pointerTo(o.key)] = o.write(c);
  // The effective values: what the mode makes of groups and exchange_period.
  j["groups"] = c.groupCount();
  j["exchange_period"] = c.exchangePeriod();
  return j;
}

namespace {

std::string defaultText(const OptionSpec& o) {
  const json v = o.write(DaemonConfig{});
  if (o.type == OptionType::kBool || (v.is_string() && v.get<std::string>().empty())) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  return v.dump();
}

// Appends "  FLAG VALUE   help (default X)", wrapping the help at 100 columns.
void appendUsageLine(const OptionSpec& o, std::string* out) {
  constexpr std::size_t kHelpColumn = 27, kWidth = 100;
  std::string head = "  " + o.flag + (o.value_name.empty() ? "" : " " + o.value_name);
  std::string text = o.help;
  if (const std::string d = defaultText(o); !d.empty()) text += " (default " + d + ")";
  std::string line = head.size() + 1 < kHelpColumn
                         ? head + std::string(kHelpColumn - head.size(), ' ')
                         : head + "\n" + std::string(kHelpColumn, ' ');
  std::size_t column = line.size() - line.rfind('\n') - 1;
  std::size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    if (!first && column + 1 + word.size() > kWidth) {
      line += "\n" + std::string(kHelpColumn, ' ');
      column = kHelpColumn;
    } else if (!first) {
      line += ' ';
      ++column;
    }
    line += word;
    column += word.size();
    first = false;
    pos = end + 1;
  }
  *out += line + "\n";
}

}  // namespace

const char* daemonUsage() {
  static const std::string text = [] {
    std::string t =
        "usage: groupsgdd [--config FILE] [options]\n"
        "Runs groupsgd: the coordinator, the central parameter server and the group parameter\n"
        "servers (--role all). Workers (groupsgd-worker) connect to --listen. Every option is\n"
        "also a key of the JSON configuration file (docs/config.md); --flag=value works too.\n\n"
        "  --config FILE            JSON configuration; flags override it\n";
    for (const auto& o : daemonOptions()) {
      if (!o.flag.empty()) appendUsageLine(o, &t);
    }
    t += "  --help                   this text\n";
    return t;
  }();
  return text.c_str();
}

}  // namespace groupsgd::daemon
