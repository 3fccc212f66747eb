#include "groupsgd/daemon/config.h"

#include "groupsgd/common/compression_spec.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <nlohmann/json.hpp>

namespace groupsgd::daemon {
namespace {

using nlohmann::json;

// Thrown inside the parser only; applyJson turns it into a Status.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// nlohmann's get<unsigned>() silently wraps -1 and truncates 2.5; options must not.
template <typename T>
T unsignedValue(const json& v, const std::string& key) {
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > std::numeric_limits<T>::max()) {
    throw ConfigError(key + " must be a non-negative integer, got " + v.dump());
  }
  return static_cast<T>(v.get<std::uint64_t>());
}

// A finite float (get<float>() would take true as 1 and 1e39 as infinity).
float floatValue(const json& v, const std::string& key) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) ||
      std::fabs(v.get<double>()) > std::numeric_limits<float>::max()) {
    throw ConfigError(key + " must be a finite number, got " + v.dump());
  }
  return v.get<float>();
}

Status parseOptimizer(const json& j, const std::string& where, kernels::OptimizerConfig* out) {
  if (!j.is_object()) return invalidArgument(where + " must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "kind") {
      if (!it->is_string() || !kernels::parseOptimizerKind(it->get<std::string>(), &out->kind)) {
        return invalidArgument(where + ".kind must be sgd, momentum or nesterov");
      }
    } else if (k == "lr") {
      out->lr = floatValue(*it, where + ".lr");
    } else if (k == "momentum") {
      out->momentum = floatValue(*it, where + ".momentum");
    } else if (k == "weight_decay") {
      out->weight_decay = floatValue(*it, where + ".weight_decay");
    } else {
      return invalidArgument("unknown option " + where + "." + k);
    }
  }
  return Status::ok();
}

Status parseStaleness(const json& j, centralps::StalenessConfig* out) {
  if (!j.is_object()) return invalidArgument("staleness must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "rule") {
      if (!it->is_string() || !centralps::parseStalenessRule(it->get<std::string>(), &out->rule)) {
        return invalidArgument("staleness.rule must be inverse, constant or grace");
      }
    } else if (it.key() == "max") {
      out->max_staleness = unsignedValue<std::uint64_t>(*it, "staleness.max");
    } else if (it.key() == "grace") {
      out->grace = unsignedValue<std::uint64_t>(*it, "staleness.grace");
    } else {
      return invalidArgument("unknown option staleness." + it.key());
    }
  }
  return Status::ok();
}

Status parseAdaptive(const json& j, AdaptiveConfig* a) {
  if (!j.is_object()) return invalidArgument("adaptive must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string k = "adaptive." + it.key();
    const json& v = *it;
    const std::string& f = it.key();
    if (f == "control_ms") a->control_ms = unsignedValue<std::uint32_t>(v, k);
    else if (f == "estimator_window") a->estimator_window = unsignedValue<std::uint32_t>(v, k);
    else if (f == "min_samples") a->min_samples = unsignedValue<std::uint32_t>(v, k);
    else if (f == "min_batch") a->min_batch = unsignedValue<std::uint32_t>(v, k);
    else if (f == "max_batch") a->max_batch = unsignedValue<std::uint32_t>(v, k);
    else if (f == "staleness_penalty") a->staleness_penalty = floatValue(v, k);
    else if (f == "staleness_bound") a->staleness_bound = floatValue(v, k);
    else if (f == "min_gain") a->min_gain = floatValue(v, k);
    else if (f == "min_regroup_interval_ms") a->min_regroup_interval_ms = unsignedValue<std::uint32_t>(v, k);
    else if (f == "max_period_factor") a->max_period_factor = unsignedValue<std::uint32_t>(v, k);
    else if (f == "straggler_enter_ratio") a->straggler.enter_ratio = floatValue(v, k);
    else if (f == "straggler_enter_windows") a->straggler.enter_windows = unsignedValue<std::uint32_t>(v, k);
    else if (f == "straggler_exit_ratio") a->straggler.exit_ratio = floatValue(v, k);
    else if (f == "straggler_exit_windows") a->straggler.exit_windows = unsignedValue<std::uint32_t>(v, k);
    else if (f == "profile_steps") a->stages.profile_steps = unsignedValue<std::uint32_t>(v, k);
    else if (f == "coarse_period") a->stages.coarse_period = unsignedValue<std::uint32_t>(v, k);
    else if (f == "coarse_max_groups") a->stages.coarse_max_groups = unsignedValue<std::uint32_t>(v, k);
    else if (f == "fine_period") a->stages.fine_period = unsignedValue<std::uint32_t>(v, k);
    else if (f == "fine_max_groups") a->stages.fine_max_groups = unsignedValue<std::uint32_t>(v, k);
    else if (f == "loss_window") a->stages.loss_window = unsignedValue<std::uint32_t>(v, k);
    else if (f == "flat_threshold") a->stages.flat_threshold = floatValue(v, k);
    else if (f == "fine_at_fraction") a->stages.fine_at_fraction = floatValue(v, k);
    else return invalidArgument("unknown option " + k);
  }
  return Status::ok();
}

Status parseCurve(const json& j, DaemonConfig* c) {
  if (!j.is_object()) return invalidArgument("curve must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "secret_key_file") c->curve_secret_key_file = it->get<std::string>();
    else if (it.key() == "allow_file") c->curve_allow_file = it->get<std::string>();
    else return invalidArgument("unknown option curve." + it.key());
  }
  return Status::ok();
}

Status applyJsonUnchecked(const json& j, DaemonConfig* c) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = *it;
    if (k == "job_id") c->job_id = unsignedValue<std::uint64_t>(v, k);
    else if (k == "role") c->role = v.get<std::string>();
    else if (k == "coordinator") c->coordinator = v.get<std::string>();
    else if (k == "node_groups") c->node_groups = unsignedValue<std::uint32_t>(v, k);
    else if (k == "mode") {
      if (!parseMode(v.get<std::string>(), &c->mode)) {
        return invalidArgument("mode must be sync, async, grouped or adaptive");
      }
    }
    else if (k == "workers") c->workers = unsignedValue<std::uint32_t>(v, k);
    else if (k == "groups") c->groups = unsignedValue<std::uint32_t>(v, k);
    else if (k == "exchange_period") c->exchange_period = unsignedValue<std::uint32_t>(v, k);
    else if (k == "batch_size") c->batch_size = unsignedValue<std::uint32_t>(v, k);
    else if (k == "model") {
      c->external_model = v.get<std::string>() == "external";
      if (!c->external_model && !kernels::parseModelKind(v.get<std::string>(), &c->model)) {
        return invalidArgument("model must be softmax, mlp, cnn or external");
      }
    }
    else if (k == "external_model_file") c->external_model_file = v.get<std::string>();
    else if (k == "seed") c->seed = unsignedValue<std::uint64_t>(v, k);
    else if (k == "listen") c->listen = v.get<std::string>();
    else if (k == "bind_host") c->bind_host = v.get<std::string>();
    else if (k == "endpoint_file") c->endpoint_file = v.get<std::string>();
    else if (k == "optimizer") GSGD_RETURN_IF_ERROR(parseOptimizer(v, "optimizer", &c->optimizer));
    else if (k == "outer_optimizer") {
      GSGD_RETURN_IF_ERROR(parseOptimizer(v, "outer_optimizer", &c->outer_optimizer));
    }
    else if (k == "staleness") GSGD_RETURN_IF_ERROR(parseStaleness(v, &c->staleness));
    else if (k == "step_deadline_ms") c->step_deadline_ms = unsignedValue<std::uint32_t>(v, k);
    else if (k == "heartbeat_ms") c->heartbeat_ms = unsignedValue<std::uint32_t>(v, k);
    else if (k == "heartbeat_misses") c->heartbeat_misses = unsignedValue<std::uint32_t>(v, k);
    else if (k == "max_grad_norm") c->max_grad_norm = v.get<double>();
    else if (k == "max_delta_norm") c->max_delta_norm = v.get<double>();
    else if (k == "target_acc") c->target_acc = v.get<double>();
    else if (k == "max_seconds") c->max_seconds = v.get<double>();
    else if (k == "max_samples") c->max_samples = unsignedValue<std::uint64_t>(v, k);
    else if (k == "progress_ms") c->progress_ms = unsignedValue<std::uint32_t>(v, k);
    else if (k == "summary_file") c->summary_file = v.get<std::string>();
    else if (k == "json") c->json = v.get<bool>();
    else if (k == "log_level") c->log_level = v.get<std::string>();
    else if (k == "adaptive") GSGD_RETURN_IF_ERROR(parseAdaptive(v, &c->adaptive));
    else if (k == "curve") GSGD_RETURN_IF_ERROR(parseCurve(v, c));
    else if (k == "compress_gradients") c->compress_gradients = v.get<std::string>();
    else if (k == "control_socket") c->control_socket = v.get<std::string>();
    else if (k == "control_admin_gid") {
      if (!v.is_number_integer()) throw ConfigError("control_admin_gid must be an integer");
      c->control_admin_gid = v.get<std::int64_t>();
    }
    else if (k == "metrics_listen") c->metrics_listen = v.get<std::string>();
    else if (k == "checkpoint_dir") c->checkpoint_dir = v.get<std::string>();
    else if (k == "checkpoint_keep") c->checkpoint_keep = unsignedValue<std::uint32_t>(v, k);
    else if (k == "checkpoint_every_versions") c->checkpoint_every_versions = unsignedValue<std::uint64_t>(v, k);
    else if (k == "checkpoint_interval_s") c->checkpoint_interval_s = floatValue(v, k);
    else if (k == "compress_deltas") c->compress_deltas = v.get<std::string>();
    else if (k == "quarantine_after") c->quarantine_after = unsignedValue<std::uint32_t>(v, k);
    else if (k == "quarantine_window_s") c->quarantine_window_s = floatValue(v, k);
    else if (k == "give_up_s") c->give_up_s = floatValue(v, k);
    else return invalidArgument("unknown option '" + k + "'");
  }
  return Status::ok();
}

// Command-line flag -> (JSON key, is the value a string). Flags are applied as a JSON
// patch so files and flags share one parser.
struct Flag {
  const char* flag;
  const char* key;
  bool is_string;
};
constexpr Flag kFlags[] = {
    {"--job-id", "job_id", false},        {"--role", "role", true},
    {"--mode", "mode", true},             {"--workers", "workers", false},
    {"--groups", "groups", false},        {"--exchange-period", "exchange_period", false},
    {"--batch-size", "batch_size", false}, {"--model", "model", true},
    {"--external-model-file", "external_model_file", true},
    {"--seed", "seed", false},            {"--listen", "listen", true},
    {"--bind-host", "bind_host", true},   {"--endpoint-file", "endpoint_file", true},
    {"--step-deadline-ms", "step_deadline_ms", false},
    {"--heartbeat-ms", "heartbeat_ms", false},
    {"--heartbeat-misses", "heartbeat_misses", false},
    {"--target-acc", "target_acc", false}, {"--max-seconds", "max_seconds", false},
    {"--max-samples", "max_samples", false}, {"--progress-ms", "progress_ms", false},
    {"--summary-file", "summary_file", true}, {"--log-level", "log_level", true},
    // Nested keys are JSON pointers.
    {"--coordinator", "coordinator", true},
    {"--node-groups", "node_groups", false},
    {"--control-socket", "control_socket", true},
    {"--metrics-listen", "metrics_listen", true},
    {"--checkpoint-dir", "checkpoint_dir", true},
    {"--checkpoint-every-versions", "checkpoint_every_versions", false},
    {"--checkpoint-interval-s", "checkpoint_interval_s", false},
    {"--compress-gradients", "compress_gradients", true},
    {"--compress-deltas", "compress_deltas", true},
    {"--quarantine-after", "quarantine_after", false},
    {"--quarantine-window-s", "quarantine_window_s", false},
    {"--give-up-s", "give_up_s", false},
    {"--lr", "/optimizer/lr", false},
    {"--momentum", "/optimizer/momentum", false},
    {"--control-ms", "/adaptive/control_ms", false},
    {"--profile-steps", "/adaptive/profile_steps", false},
    {"--min-regroup-interval-ms", "/adaptive/min_regroup_interval_ms", false},
    {"--curve-secret-key-file", "/curve/secret_key_file", true},
    {"--curve-allow-file", "/curve/allow_file", true},
};

}  // namespace

bool parseMode(const std::string& text, Mode* out) {
  if (text == "sync") *out = Mode::kSync;
  else if (text == "async") *out = Mode::kAsync;
  else if (text == "grouped") *out = Mode::kGrouped;
  else if (text == "adaptive") *out = Mode::kAdaptive;
  else return false;
  return true;
}

const char* modeName(Mode mode) {
  switch (mode) {
    case Mode::kSync: return "sync";
    case Mode::kAsync: return "async";
    case Mode::kGrouped: return "grouped";
    case Mode::kAdaptive: return "adaptive";
  }
  return "unknown";
}

std::uint32_t DaemonConfig::groupCount() const {
  switch (mode) {
    case Mode::kSync: return 1;
    case Mode::kAsync: return workers;
    case Mode::kGrouped: return groups;
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
    return applyJsonUnchecked(j, cfg);
  } catch (const ConfigError& e) {
    return invalidArgument(e.what());
  } catch (const json::exception& e) {
    return invalidArgument(std::string("configuration value of the wrong type: ") + e.what());
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

Status applyFlags(const std::vector<std::string>& args, DaemonConfig* cfg, bool* help) {
  // --config is applied first wherever it appears, so flags override the file.
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return invalidArgument("--config needs a file");
      GSGD_RETURN_IF_ERROR(loadConfigFile(args[i + 1], cfg));
      cfg->config_file = args[i + 1];
    }
  }
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
    if (a == "--json") {
      patch["json"] = true;
      continue;
    }
    const Flag* f = nullptr;
    for (const auto& candidate : kFlags) {
      if (a == candidate.flag) f = &candidate;
    }
    if (f == nullptr) return invalidArgument("unknown option '" + a + "' (see --help)");
    if (i + 1 >= args.size()) return invalidArgument(a + " needs a value");
    const std::string& v = args[++i];
    json value = v;
    if (!f->is_string) {
      value = json::parse(v, nullptr, false);
      if (!value.is_number()) return invalidArgument(a + " expects a number, got '" + v + "'");
    }
    if (f->key[0] == '/') {
      patch[json::json_pointer(f->key)] = value;
    } else {
      patch[f->key] = value;
    }
  }
  return applyJson(patch, cfg);
}

Status validate(const DaemonConfig& c) {
  if (c.role != "all" && c.role != "coordinator" && c.role != "node") {
    return invalidArgument("role '" + c.role + "' is not one of all, coordinator, node");
  }
  if (c.role == "node" && (c.coordinator.empty() || c.node_groups == 0)) {
    return invalidArgument("role node needs --coordinator ENDPOINT and --node-groups >= 1");
  }
  if (!c.external_model_file.empty() && !c.external_model) {
    return invalidArgument("external_model_file needs model external");
  }
  if (c.external_model && c.role != "all") {
    return invalidArgument("model external needs role all (the group PSes learn the model size at start)");
  }
  if (c.workers == 0) return invalidArgument("workers must be at least 1");
  if (c.mode == Mode::kGrouped && (c.groups == 0 || c.groups > c.workers)) {
    return invalidArgument("groups must be between 1 and workers (" + std::to_string(c.workers) + ")");
  }
  if (c.exchange_period == 0) return invalidArgument("exchange_period must be at least 1");
  for (const auto* spec : {&c.compress_gradients, &c.compress_deltas}) {
    if (auto parsed = parseCompressionSpec(*spec); !parsed) return parsed.status();
  }
  const AdaptiveConfig& a = c.adaptive;
  if (a.control_ms == 0 || a.estimator_window == 0 || a.min_samples == 0 ||
      a.min_samples > a.estimator_window) {
    return invalidArgument("adaptive: control_ms, estimator_window > 0 and min_samples in [1, estimator_window]");
  }
  if (c.mode == Mode::kAdaptive &&
      (a.min_batch == 0 || a.min_batch > c.batch_size || a.max_batch < c.batch_size)) {
    return invalidArgument("adaptive: need 0 < min_batch <= batch_size <= max_batch");
  }
  if (a.stages.coarse_period == 0 || a.stages.fine_period == 0 ||
      a.stages.coarse_max_groups == 0 || a.stages.fine_max_groups == 0) {
    return invalidArgument("adaptive: stage periods and group limits must be at least 1");
  }
  if (a.max_period_factor == 0) return invalidArgument("adaptive: max_period_factor must be at least 1");
  if (a.straggler.exit_ratio > a.straggler.enter_ratio) {
    return invalidArgument("adaptive: straggler_exit_ratio must not exceed straggler_enter_ratio");
  }
  if (c.batch_size == 0 || c.batch_size > 65536) {
    return invalidArgument("batch_size must be between 1 and 65536");
  }
  if (!(c.optimizer.lr > 0) || !(c.outer_optimizer.lr > 0)) {
    return invalidArgument("learning rates must be > 0");
  }
  if (c.heartbeat_ms == 0 || c.heartbeat_misses == 0) {
    return invalidArgument("heartbeat_ms and heartbeat_misses must be > 0");
  }
  if (c.step_deadline_ms == 0) return invalidArgument("step_deadline_ms must be > 0");
  if (c.target_acc < 0 || c.target_acc > 1) return invalidArgument("target_acc must be in [0, 1]");
  if (!c.metrics_listen.empty()) {
    const auto colon = c.metrics_listen.rfind(':');
    const std::string port = colon == std::string::npos ? "" : c.metrics_listen.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(port) > 65535) {
      return invalidArgument("metrics_listen must be HOST:PORT with a port 0-65535");
    }
  }
  if (c.checkpoint_keep == 0) return invalidArgument("checkpoint_keep must be at least 1");
  if (!(c.quarantine_window_s > 0) || c.quarantine_window_s > 86400) {
    return invalidArgument("quarantine_window_s must be in (0, 86400]");
  }
  if (!(c.give_up_s > 0)) return invalidArgument("give_up_s must be > 0");
  if (c.curve_secret_key_file.empty() != c.curve_allow_file.empty()) {
    return invalidArgument("curve needs both secret_key_file and allow_file (or neither)");
  }
  return Status::ok();
}

json toJson(const DaemonConfig& c) {
  auto opt = [](const kernels::OptimizerConfig& o) {
    return json{{"kind", kernels::optimizerKindName(o.kind)},
                {"lr", o.lr},
                {"momentum", o.momentum},
                {"weight_decay", o.weight_decay}};
  };
  return json{{"job_id", c.job_id},
              {"role", c.role},
              {"mode", modeName(c.mode)},
              {"workers", c.workers},
              {"groups", c.groupCount()},
              {"exchange_period", c.exchangePeriod()},
              {"batch_size", c.batch_size},
              {"model", c.external_model ? "external" : kernels::modelKindName(c.model)},
              {"external_model_file", c.external_model_file},
              {"seed", c.seed},
              {"optimizer", opt(c.optimizer)},
              {"outer_optimizer", opt(c.outer_optimizer)},
              {"staleness",
               {{"rule", centralps::stalenessRuleName(c.staleness.rule)},
                {"max", c.staleness.max_staleness},
                {"grace", c.staleness.grace}}},
              {"step_deadline_ms", c.step_deadline_ms},
              {"target_acc", c.target_acc},
              {"max_seconds", c.max_seconds},
              {"max_samples", c.max_samples},
              {"progress_ms", c.progress_ms},
              {"log_level", c.log_level},
              {"heartbeat_ms", c.heartbeat_ms},
              {"heartbeat_misses", c.heartbeat_misses},
              {"compress_gradients", c.compress_gradients},
              {"compress_deltas", c.compress_deltas},
              {"quarantine_after", c.quarantine_after},
              {"quarantine_window_s", c.quarantine_window_s},
              {"give_up_s", c.give_up_s},
              {"curve",
               {{"secret_key_file", c.curve_secret_key_file},
                {"allow_file", c.curve_allow_file}}},
              {"adaptive",
               {{"control_ms", c.adaptive.control_ms},
                {"min_batch", c.adaptive.min_batch},
                {"max_batch", c.adaptive.max_batch},
                {"staleness_penalty", c.adaptive.staleness_penalty},
                {"staleness_bound", c.adaptive.staleness_bound},
                {"min_gain", c.adaptive.min_gain},
                {"min_regroup_interval_ms", c.adaptive.min_regroup_interval_ms},
                {"max_period_factor", c.adaptive.max_period_factor},
                {"profile_steps", c.adaptive.stages.profile_steps},
                {"coarse_period", c.adaptive.stages.coarse_period},
                {"coarse_max_groups", c.adaptive.stages.coarse_max_groups},
                {"fine_period", c.adaptive.stages.fine_period},
                {"fine_max_groups", c.adaptive.stages.fine_max_groups}}}};
}

const char* daemonUsage() {
  return R"(usage: groupsgdd [--config FILE] [options]
Runs groupsgd: the coordinator, the central parameter server and the group parameter
servers (--role all). Workers (groupsgd-worker) connect to --listen.

  --config FILE            JSON configuration (docs/config.md); flags override it
  --role R                 all (one machine: coordinator, central PS, group PSes),
                           coordinator (coordinator + central PS; group PSes come from nodes)
                           or node (hosts group PSes for the coordinator at --coordinator)
  --coordinator EP         role node: the coordinator's endpoint
  --node-groups N          role node: how many group PSes this node hosts (default 1)
  --mode M                 sync | async | grouped | adaptive (default grouped)
  --workers N              expected trainers = data shards (default 4; async: groups)
  --groups G               grouped mode: number of groups (default 2)
  --exchange-period K      grouped mode: group steps between central exchanges (default 1)
  --batch-size B           samples per worker step (default 32)
  --model M                softmax | mlp | cnn | external (default mlp; external: the
                           first worker's model, e.g. groupsgd.torch, docs/pytorch.md)
  --external-model-file F  model external: the initial model from this file instead
  --seed S                 model initialisation and shuffling seed (default 1)
  --listen EP              coordinator endpoint (default tcp://127.0.0.1:5555; port 0 = any)
  --bind-host H            host the parameter servers bind on (default 127.0.0.1)
  --endpoint-file F        write the coordinator's bound endpoint to F
  --step-deadline-ms MS    a group step closes this long after its first push (default 5000)
  --heartbeat-ms MS        worker heartbeat period (default 1000)
  --heartbeat-misses N     missed heartbeats before a worker is dead (default 3)
  --quarantine-after N     bad updates within the window that quarantine a worker
                           (default 5; 0 = never)
  --quarantine-window-s S  that window (default 60)
  --give-up-s S            role node: stop re-registering with a lost head after S (600)
  --target-acc A           stop when the evaluator reports test accuracy >= A
  --max-seconds S          stop after S seconds of training
  --max-samples N          stop after N samples trained
  --progress-ms MS         progress line period on stdout (default 1000; 0 = none)
  --summary-file F         write the closing summary JSON to F
  --json                   print the closing summary as one JSON line on stdout
  --log-level L            debug | info | warn | error (default info)
  --control-socket PATH    serve the JSON control socket here (groupsgdctl --socket PATH)
  --metrics-listen H:P     serve Prometheus /metrics on HOST:PORT (127.0.0.1:0 = any port)
  --checkpoint-dir DIR     write central checkpoints here; resume from the newest at start
  --checkpoint-every-versions N  also checkpoint every N central versions
  --checkpoint-interval-s S      and every S seconds (default 60; 0 = off)
  --compress-gradients C   worker -> group encoding: dense | fp16 | sign | topk:RATIO
  --compress-deltas C      group -> central encoding (same forms; default dense)
  --lr X                   group optimizer learning rate (default 0.05)
  --momentum X             group optimizer momentum (default 0.9)
  --control-ms MS          adaptive: control window (default 1000)
  --profile-steps N        adaptive: steps every worker runs before the first plan (default 20)
  --min-regroup-interval-ms MS  adaptive: least time between regroups (default 5000)
  --curve-secret-key-file F  CURVE on every TCP link with this secret key (mode 0600;
                           from groupsgdctl keygen); needs --curve-allow-file
  --curve-allow-file F     public keys of the workers and nodes to admit, one per line
  --help                   this text
)";
}

}  // namespace groupsgd::daemon
