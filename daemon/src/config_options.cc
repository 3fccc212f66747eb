// The table of daemon options. One line per option: FIELD names the DaemonConfig member.
#include "groupsgd/daemon/config_options.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "groupsgd/arbiter/lease_table.h"

namespace groupsgd::daemon {
namespace {

using nlohmann::json;

// nlohmann's get<unsigned>() silently wraps -1 and truncates 2.5; options must not.
template <typename T>
T countValue(const json& v, const std::string& key) {
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > std::numeric_limits<T>::max()) {
    throw OptionError(key + " must be a non-negative integer, got " + v.dump());
  }
  return static_cast<T>(v.get<std::uint64_t>());
}

// A finite number that fits T (get<float>() would take true as 1 and 1e39 as infinity).
template <typename T>
T realValue(const json& v, const std::string& key) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) ||
      std::fabs(v.get<double>()) > std::numeric_limits<T>::max()) {
    throw OptionError(key + " must be a finite number, got " + v.dump());
  }
  return static_cast<T>(v.get<double>());
}

// What every option states, whatever its type; the builders below add how it is read.
OptionSpec describe(const char* key, const char* flag, const char* value_name, OptionType type,
                    Range range, Live live, std::string help) {
  OptionSpec o;
  o.key = key;
  o.flag = flag;
  o.value_name = value_name;
  o.type = type;
  o.range = range;
  o.live = live;
  o.help = std::move(help);
  return o;
}

// A JSON value of one kind (is_kind), stored as T: bool, string and signed options.
template <typename T, typename Access>
std::function<void(const json&, DaemonConfig*)> readAs(Access access, std::string key,
                                                       bool (json::*is_kind)() const noexcept,
                                                       const char* expected) {
  return [access, key = std::move(key), is_kind, expected](const json& v, DaemonConfig* c) {
    if (!(v.*is_kind)()) throw OptionError(key + " must be " + expected + ", got " + v.dump());
    access(*c) = v.get<T>();
  };
}

// Reads and writes one field of type T; Access is a generic lambda naming the member.
template <typename Access>
OptionSpec field(const char* key, const char* flag, const char* value_name, Access access,
                 Range range, Live live, const char* help) {
  using T = std::remove_reference_t<decltype(access(std::declval<DaemonConfig&>()))>;
  OptionSpec o = describe(key, flag, value_name, OptionType::kCount, range, live, help);
  const std::string k = key;
  if constexpr (std::is_same_v<T, bool>) {
    o.type = OptionType::kBool;
    o.read = readAs<bool>(access, k, &json::is_boolean, "true or false");
  } else if constexpr (std::is_same_v<T, std::string>) {
    o.type = OptionType::kString;
    o.read = readAs<std::string>(access, k, &json::is_string, "a string");
  } else if constexpr (std::is_floating_point_v<T>) {
    o.type = OptionType::kReal;
    o.read = [access, k](const json& v, DaemonConfig* c) { access(*c) = realValue<T>(v, k); };
  } else if constexpr (std::is_signed_v<T>) {
    o.type = OptionType::kInteger;
    o.read = readAs<T>(access, k, &json::is_number_integer, "an integer");
  } else {
    o.type = OptionType::kCount;
    o.read = [access, k](const json& v, DaemonConfig* c) { access(*c) = countValue<T>(v, k); };
  }
  o.write = [access](const DaemonConfig& c) { return json(access(c)); };
  return o;
}

// An enumeration written as one of a few names.
template <typename Access, typename Parse, typename Name>
OptionSpec choice(const char* key, const char* flag, const char* choices, Access access,
                  Parse parse, Name name, const char* help) {
  OptionSpec o = describe(key, flag, "NAME", OptionType::kChoice, Range{}, Live::kRestart,
                          std::string(choices) + ": " + help);
  const std::string k = key, names = choices;
  o.read = [access, parse, k, names](const json& v, DaemonConfig* c) {
    if (!v.is_string() || !parse(v.get<std::string>(), &access(*c))) {
      throw OptionError(k + " must be one of " + names + ", got " + v.dump());
    }
  };
  o.write = [access, name](const DaemonConfig& c) { return json(name(access(c))); };
  return o;
}

// "model" is a built-in kind or "external" (the first worker's model, e.g. groupsgd.torch),
// which sets external_model instead of the kind.
OptionSpec modelOption() {
  OptionSpec o = choice(
      "model", "--model", "softmax|mlp|cnn|external", [](auto& c) -> auto& { return c.model; },
      kernels::parseModelKind, kernels::modelKindName,
      "the model trained (external: the first registering worker's, "
      "docs/pytorch.md)");
  o.read = [](const json& v, DaemonConfig* c) {
    const bool external = v.is_string() && v.get<std::string>() == "external";
    if (!external &&
        (!v.is_string() || !kernels::parseModelKind(v.get<std::string>(), &c->model))) {
      throw OptionError("model must be one of softmax|mlp|cnn|external, got " + v.dump());
    }
    c->external_model = external;
  };
  o.write = [](const DaemonConfig& c) {
    return json(c.external_model ? std::string("external") : kernels::modelKindName(c.model));
  };
  return o;
}

// An arbiter option's text is checked when read, so a bad policy or weight list is a
// configuration error like any other.
OptionSpec arbiterOption(OptionSpec o) {
  auto plain = o.read;
  const std::string key = o.key;
  o.read = [plain, key](const json& v, DaemonConfig* c) {
    plain(v, c);
    Status s = Status::ok();
    if (key == "arbiter_policy") s = arbiter::parsePolicy(c->arbiter_policy).status();
    if (key == "arbiter_weights") s = arbiter::parseJobWeights(c->arbiter_weights).status();
    if (!s) throw OptionError(key + ": " + s.message());
  };
  return o;
}

// Marks an option the group PS reads (groupServerConfig() and configureGroup() read it).
OptionSpec groupPs(GroupPs reads, OptionSpec o) {
  o.group_ps = reads;
  return o;
}

// The member named by PATH, for the const and the non-const config alike.
#define FIELD(PATH) ([](auto& c) -> auto& { return c.PATH; })

constexpr Range kAny{};
constexpr Range atLeast(double min) { return Range{min}; }
constexpr Range above(double min) {
  return Range{min, std::numeric_limits<double>::infinity(), true};
}
constexpr Range between(double min, double max) { return Range{min, max}; }
constexpr Range fromUpTo(double min, double max_excluded) {  // [min, max)
  return Range{min, max_excluded, false, true};
}
constexpr Live kRestart = Live::kRestart, kSet = Live::kSet, kHup = Live::kSetAndReload;

std::vector<OptionSpec> buildTable() {
  const auto optimizerKind = [](const std::string& s, kernels::OptimizerKind* k) {
    return kernels::parseOptimizerKind(s, k);
  };
  const auto optimizerName = [](kernels::OptimizerKind k) { return kernels::optimizerKindName(k); };
  const auto lrScheduleKind = [](const std::string& s, groupps::LrScheduleKind* k) {
    return groupps::parseLrScheduleKind(s, k);
  };
  const auto lrScheduleName = [](groupps::LrScheduleKind k) {
    return groupps::lrScheduleKindName(k);
  };
  return {
      field("job_id", "--job-id", "N", FIELD(job_id), kAny, kRestart,
            "job id in every header; messages of other jobs are refused"),
      field("job_name", "--job-name", "NAME", FIELD(job_name), kAny, kRestart,
            "the run's name; a worker naming another job (--job) is refused"),
      field("serve", "--serve", "", FIELD(serve), kAny, kRestart,
            "stay up and host the jobs submitted over the control socket (docs/jobs.md)"),
      field("state_dir", "--state-dir", "DIR", FIELD(state_dir), kAny, kRestart,
            "serve: the job table and each job's checkpoints (DIR/jobs/NAME) live here"),
      field("max_group_slots", "--max-group-slots", "N", FIELD(max_group_slots), kAny, kRestart,
            "serve: group PSes all running jobs may run in this daemon together (0: only node "
            "daemons')"),
      field("role", "--role", "R", FIELD(role), kAny, kRestart,
            "all (one machine: coordinator, central PS, group PSes), coordinator (coordinator"
            " + central PS; group PSes come from nodes), node (hosts group PSes for the"
            " coordinator at --coordinator) or standby (follows the head, or with --serve the"
            " serve daemon, at --primary and takes over), or central-shard (serves central"
            " shard --shard-index at --listen)"),
      field("central_shards", "--central-shards", "S", FIELD(central_shards), between(1, 64),
            kRestart,
            "central PS shards: the head serves shard 0, processes of role "
            "central-shard or node daemons (node_central_shard) the others (docs/shards.md)"),
      field("central_shard_endpoints", "--central-shard-endpoints", "EPS",
            FIELD(central_shard_endpoints), kAny, kRestart,
            "central_shards > 1: comma-separated endpoints of shards 1..S-1 (a shard with a "
            "standby: PRIMARY|STANDBY; \"\" = gathered from node daemons hosting them)"),
      field("central_shard_split", "--central-shard-split", "HOW", FIELD(central_shard_split), kAny,
            kRestart,
            "tensors (whole tensors per shard, balanced by bytes) or even (equal element "
            "ranges); the same on the head and every shard"),
      field("central_cut_interval_s", "--central-cut-interval-s", "S",
            FIELD(central_cut_interval_s), kAny, kRestart,
            "central_shards > 1 with checkpoint_dir: take a consistent cut of every shard's "
            "model every S seconds (0 = never; docs/shards.md)"),
      field("shard_index", "--shard-index", "K", FIELD(shard_index), kAny, kRestart,
            "role central-shard: which shard this process serves (1..S-1)"),
      field("node_central_shard", "--node-central-shard", "K", FIELD(node_central_shard), kAny,
            kRestart,
            "role node: also serve central shard K (1..S-1) and offer it to the head (0 = "
            "none; docs/shards.md)"),
      field("node_central_shard_standby", "--node-central-shard-standby", "EP",
            FIELD(node_central_shard_standby), kAny, kRestart,
            "role node with node_central_shard and replication_listen: the listen endpoint of "
            "that shard's standby, offered with the shard as its failover list (\"\" = none)"),
      field("coordinator", "--coordinator", "EP", FIELD(coordinator), kAny, kRestart,
            "role node: the coordinator's endpoint, or a comma-separated list tried in turn (a "
            "head that may restart elsewhere)"),
      field("node_groups", "--node-groups", "N", FIELD(node_groups), kAny, kRestart,
            "role node: how many group PSes this node hosts"),
      field("coordinator_timeout_ms", "--coordinator-timeout-ms", "MS",
            FIELD(coordinator_timeout_ms), between(50, 600000), kRestart,
            "role node: a call to the head unanswered this long tries the next endpoint"),
      field("replication_listen", "--replication-listen", "EP", FIELD(replication_listen), kAny,
            kRestart,
            "role all/coordinator, one run or --serve (or central-shard): accept a standby "
            "(serve daemon, shard) at this endpoint; role standby (one run or --serve): opened "
            "once it takes over (\"\" = none)"),
      field("primary", "--primary", "EP", FIELD(primary), kAny, kRestart,
            "role standby (or central-shard, its standby): the primary's replication_listen"),
      field("standby_async", "--standby-async", "", FIELD(standby_async), kAny, kRestart,
            "ship updates to the standby without waiting for its acknowledgement"),
      field("standby_takeover_ms", "--standby-takeover-ms", "MS", FIELD(standby_takeover_ms),
            between(20, 600000), kRestart,
            "a primary silent this long is taken over by its standby; a standby silent this "
            "long is lost to the primary"),
      field("standby_alone_ms", "--standby-alone-ms", "MS", FIELD(standby_alone_ms), kAny, kRestart,
            "a head that lost its standby commits again, alone, after this long (0 = never: "
            "no split possible)"),
      groupPs(GroupPs::kBoth, choice("mode", "--mode", "sync|async|grouped|adaptive", FIELD(mode),
                                     parseMode, modeName, "how trainers are grouped")),
      field("workers", "--workers", "N", FIELD(workers), atLeast(1), kRestart,
            "expected trainers = data shards (async: groups)"),
      field("groups", "--groups", "G", FIELD(groups), kAny, kRestart,
            "grouped mode: number of groups"),
      groupPs(GroupPs::kAtStart,
              field("exchange_period", "--exchange-period", "K", FIELD(exchange_period), atLeast(1),
                    kRestart, "grouped mode: group steps between central exchanges")),
      field("batch_size", "--batch-size", "B", FIELD(batch_size), between(1, 65536), kRestart,
            "samples per worker step"),
      groupPs(GroupPs::kAtStart, modelOption()),
      field("seed", "--seed", "S", FIELD(seed), kAny, kRestart,
            "model initialisation and shuffling seed"),
      field("listen", "--listen", "EP", FIELD(listen), kAny, kRestart,
            "coordinator endpoint (port 0 = any)"),
      field("bind_host", "--bind-host", "H", FIELD(bind_host), kAny, kRestart,
            "host the parameter servers bind on"),
      field("endpoint_file", "--endpoint-file", "F", FIELD(endpoint_file), kAny, kRestart,
            "write the coordinator's bound endpoint to F"),
      groupPs(GroupPs::kAtStart,
              choice("optimizer.kind", "", "sgd|momentum|nesterov|adam|adamw",
                     FIELD(optimizer.kind), optimizerKind, optimizerName, "group optimizer")),
      groupPs(GroupPs::kBoth, field("optimizer.lr", "--lr", "X", FIELD(optimizer.lr), above(0),
                                    kSet, "group optimizer learning rate (the schedule's base)")),
      groupPs(GroupPs::kAtStart,
              field("optimizer.momentum", "--momentum", "X", FIELD(optimizer.momentum), kAny,
                    kRestart, "group optimizer momentum")),
      groupPs(GroupPs::kAtStart,
              field("optimizer.weight_decay", "", "X", FIELD(optimizer.weight_decay), kAny,
                    kRestart, "group optimizer weight decay")),
      groupPs(GroupPs::kAtStart,
              field("optimizer.beta1", "", "X", FIELD(optimizer.beta1), fromUpTo(0, 1), kRestart,
                    "group adam/adamw: first-moment decay")),
      groupPs(GroupPs::kAtStart,
              field("optimizer.beta2", "", "X", FIELD(optimizer.beta2), fromUpTo(0, 1), kRestart,
                    "group adam/adamw: second-moment decay")),
      groupPs(GroupPs::kAtStart, field("optimizer.eps", "", "X", FIELD(optimizer.eps), above(0),
                                       kRestart, "group adam/adamw: denominator epsilon")),
      groupPs(GroupPs::kAtStart,
              field("optimizer.decay_1d", "", "", FIELD(optimizer_decay_1d), kAny, kRestart,
                    "group optimizer: weight decay on 1-D tensors (biases) too; false needs a "
                    "built-in model")),
      // The lr schedule (docs/config.md, "Learning-rate schedules"): sent with every
      // GroupConfig, so a live optimizer.lr (or max_samples) reaches the groups.
      groupPs(GroupPs::kInGroupConfig,
              choice("optimizer.schedule", "--lr-schedule", "constant|warmup_linear|cosine|step",
                     FIELD(lr_schedule.kind), lrScheduleKind, lrScheduleName,
                     "group optimizer lr by the run's samples applied")),
      groupPs(GroupPs::kInGroupConfig, field("optimizer.warmup_samples", "--warmup-samples", "N",
                                             FIELD(lr_schedule.warmup_samples), kAny, kRestart,
                                             "lr rises linearly from 0 over the first N samples")),
      groupPs(GroupPs::kInGroupConfig,
              field("optimizer.schedule_samples", "--schedule-samples", "N",
                    FIELD(lr_schedule.schedule_samples), kAny, kRestart,
                    "warmup_linear, cosine: lr reaches min_lr at N samples (0 = max_samples)")),
      groupPs(GroupPs::kInGroupConfig,
              field("optimizer.min_lr", "--min-lr", "X", FIELD(lr_schedule.min_lr), atLeast(0),
                    kRestart, "the schedule's floor")),
      groupPs(GroupPs::kInGroupConfig,
              field("optimizer.step_samples", "", "N", FIELD(lr_schedule.step_samples), kAny,
                    kRestart, "step: lr x step_gamma every N samples")),
      groupPs(GroupPs::kInGroupConfig,
              field("optimizer.step_gamma", "", "X", FIELD(lr_schedule.step_gamma),
                    Range{0, 1, true}, kRestart, "step: the factor")),
      groupPs(GroupPs::kAtStart,
              choice("optimizer.placement", "", "server|workers", FIELD(optimizer_placement),
                     groupps::parseOptimizerPlacement, groupps::optimizerPlacementName,
                     "who steps the group optimizer: the group PS (server), or every trainer "
                     "its own torch optimizer on the group's mean gradient (workers, "
                     "docs/pytorch.md)")),
      choice("outer_optimizer.kind", "", "sgd|momentum|nesterov|adam|adamw",
             FIELD(outer_optimizer.kind), optimizerKind, optimizerName, "central optimizer"),
      field("outer_optimizer.lr", "", "X", FIELD(outer_optimizer.lr), above(0), kRestart,
            "central optimizer learning rate"),
      field("outer_optimizer.momentum", "", "X", FIELD(outer_optimizer.momentum), kAny, kRestart,
            "central optimizer momentum"),
      field("outer_optimizer.weight_decay", "", "X", FIELD(outer_optimizer.weight_decay), kAny,
            kRestart, "central optimizer weight decay"),
      field("outer_optimizer.beta1", "", "X", FIELD(outer_optimizer.beta1), fromUpTo(0, 1),
            kRestart, "central adam/adamw: first-moment decay"),
      field("outer_optimizer.beta2", "", "X", FIELD(outer_optimizer.beta2), fromUpTo(0, 1),
            kRestart, "central adam/adamw: second-moment decay"),
      field("outer_optimizer.eps", "", "X", FIELD(outer_optimizer.eps), above(0), kRestart,
            "central adam/adamw: denominator epsilon"),
      field("outer_optimizer.decay_1d", "", "", FIELD(outer_optimizer_decay_1d), kAny, kRestart,
            "central optimizer: weight decay on 1-D tensors (biases) too; false needs a built-in "
            "model"),
      choice("staleness.rule", "", "inverse|constant|grace", FIELD(staleness.rule),
             centralps::parseStalenessRule, centralps::stalenessRuleName,
             "weight f(tau) of a delta"),
      choice(
          "staleness.measure", "--staleness-measure", "samples|versions", FIELD(staleness.measure),
          centralps::parseStalenessMeasure, centralps::stalenessMeasureName,
          "what tau counts in f(tau): samples merged since the base (in mean deltas) or versions"),
      field("staleness.max", "", "N", FIELD(staleness.max_staleness), kAny, kRestart,
            "deltas staler than this are refused"),
      field("staleness.grace", "", "N", FIELD(staleness.grace), kAny, kRestart,
            "rule grace: staleness with full weight"),
      groupPs(GroupPs::kBoth,
              field("step_deadline_ms", "--step-deadline-ms", "MS", FIELD(step_deadline_ms),
                    atLeast(1), kHup, "a group step closes this long after its first push")),
      groupPs(GroupPs::kAtStart,
              field("exchange_timeout_ms", "--exchange-timeout-ms", "MS",
                    FIELD(exchange_timeout_ms), between(100, 600000), kRestart,
                    "a group PS's exchange unanswered this long is given up and resynchronised "
                    "(a central shard with a standby: its next endpoint is tried)")),
      field("heartbeat_ms", "--heartbeat-ms", "MS", FIELD(heartbeat_ms), atLeast(1), kRestart,
            "worker heartbeat period"),
      field("heartbeat_misses", "--heartbeat-misses", "N", FIELD(heartbeat_misses), atLeast(1),
            kSet, "missed heartbeats before a worker is dead"),
      groupPs(GroupPs::kAtStart,
              field("max_grad_norm", "", "X", FIELD(max_grad_norm), kAny, kRestart,
                    "group PSes refuse gradients with a larger L2 norm")),
      field("max_delta_norm", "", "X", FIELD(max_delta_norm), kAny, kRestart,
            "the central PS refuses deltas with a larger L2 norm"),
      field("compress_gradients", "--compress-gradients", "C", FIELD(compress_gradients), kAny,
            kRestart, "worker -> group encoding: dense | fp16 | sign | topk:RATIO | auto"),
      field("compression_auto_mbit", "--compression-auto-mbit", "MBIT",
            FIELD(compression_auto_mbit), between(1, 1e6), kRestart,
            "compress_gradients auto: fp16 for a group whose slowest link measures below MBIT"),
      groupPs(GroupPs::kAtStart,
              field("compress_deltas", "--compress-deltas", "C", FIELD(compress_deltas), kAny,
                    kRestart, "group -> central encoding (same forms)")),
      field("target_acc", "--target-acc", "A", FIELD(target_acc), between(0, 1), kHup,
            "stop when the evaluator reports test accuracy >= A (0 = never)"),
      field("target_loss", "--target-loss", "L", FIELD(target_loss), atLeast(0), kHup,
            "stop when the evaluator reports validation loss <= L (0 = never)"),
      field("max_seconds", "--max-seconds", "S", FIELD(max_seconds), kAny, kHup,
            "stop after S seconds of training (0 = never)"),
      groupPs(GroupPs::kInGroupConfig,
              field("max_samples", "--max-samples", "N", FIELD(max_samples), kAny, kHup,
                    "stop after N samples trained (0 = never)")),
      field("progress_ms", "--progress-ms", "MS", FIELD(progress_ms), kAny, kSet,
            "progress line period on stdout (0 = none)"),
      field("summary_file", "--summary-file", "F", FIELD(summary_file), kAny, kRestart,
            "write the closing summary JSON to F"),
      field("json", "--json", "", FIELD(json), kAny, kRestart,
            "print the closing summary as one JSON line on stdout"),
      field("log_level", "--log-level", "L", FIELD(log_level), kAny, kHup,
            "debug | info | warn | error"),
      field("control_socket", "--control-socket", "PATH", FIELD(control_socket), kAny, kRestart,
            "serve the JSON control socket here (groupsgdctl --socket PATH)"),
      field("control_admin_gid", "", "GID", FIELD(control_admin_gid), kAny, kRestart,
            "a group allowed the admin control methods (-1 = none)"),
      field("metrics_listen", "--metrics-listen", "H:P", FIELD(metrics_listen), kAny, kRestart,
            "serve Prometheus /metrics on HOST:PORT (127.0.0.1:0 = any port)"),
      arbiterOption(field("arbiter_listen", "--arbiter-listen", "EP", FIELD(arbiter_listen), kAny,
                          kRestart, "host the device arbiter at EP (\"\" = none)")),
      arbiterOption(field("arbiter_policy", "--arbiter-policy", "P", FIELD(arbiter_policy), kAny,
                          kRestart, "none | fifo | crossover")),
      arbiterOption(field("arbiter_weights", "--arbiter-weights", "J=W,..", FIELD(arbiter_weights),
                          kAny, kRestart, "crossover: weight per job id (default 1)")),
      field("arbiter_lease_timeout_ms", "", "MS", FIELD(arbiter_lease_timeout_ms), atLeast(1),
            kRestart, "take back a device lease held longer than this"),
      field("external_model_file", "--external-model-file", "F", FIELD(external_model_file), kAny,
            kRestart, "model external: the initial model from this file (save_model_file)"),
      field("checkpoint_dir", "--checkpoint-dir", "DIR", FIELD(checkpoint_dir), kAny, kRestart,
            "write central checkpoints here; resume from the newest at start"),
      field("checkpoint_keep", "", "N", FIELD(checkpoint_keep), atLeast(1), kRestart,
            "checkpoint files kept"),
      field("checkpoint_every_versions", "--checkpoint-every-versions", "N",
            FIELD(checkpoint_every_versions), kAny, kRestart,
            "also checkpoint every N central versions (0 = not by versions)"),
      field("checkpoint_interval_s", "--checkpoint-interval-s", "S", FIELD(checkpoint_interval_s),
            kAny, kRestart, "and every S seconds (0 = not by time)"),
      field("keep_best", "", "", FIELD(keep_best), kAny, kRestart,
            "with checkpoint_dir: keep the best-evaluated model in checkpoint_dir/best.ckpt"),
      field("ps_placement", "--ps-placement", "hosts|order", FIELD(ps_placement), kAny, kSet,
            "hosts: a group goes to the slot whose PS runs on most of its members' host; "
            "order: slots in plan order"),
      choice(
          "data_allocation", "--data-allocation", "shards|ranges", FIELD(data_ranges),
          [](const std::string& s, bool* ranges) {
            if (s != "shards" && s != "ranges") return false;
            *ranges = s == "ranges";
            return true;
          },
          [](bool ranges) { return ranges ? "ranges" : "shards"; },
          "shards: each trainer samples an equal shard; ranges: trainers claim ranges of each "
          "epoch's permutation as they go, so an epoch visits every sample once"),
      groupPs(
          GroupPs::kAtStart,
          field("quarantine_after", "--quarantine-after", "N", FIELD(quarantine_after), kAny,
                kRestart, "bad updates within the window that quarantine a worker (0 = never)")),
      groupPs(GroupPs::kAtStart,
              field("quarantine_window_s", "--quarantine-window-s", "S", FIELD(quarantine_window_s),
                    Range{0, 86400, true}, kRestart, "that window")),
      field("give_up_s", "--give-up-s", "S", FIELD(give_up_s), above(0), kRestart,
            "role node: stop re-registering with a lost head after S"),
      field("finish_linger_s", "--finish-linger-s", "S", FIELD(finish_linger_s), between(0, 3600),
            kRestart,
            "a restarted head whose run ends before all trainers came back tells late ones"
            " `finished` for up to S more seconds (0 = exit at once)"),
      field("curve.secret_key_file", "--curve-secret-key-file", "F", FIELD(curve_secret_key_file),
            kAny, kRestart,
            "CURVE on every TCP link with this secret key (mode 0600; from groupsgdctl keygen);"
            " needs --curve-allow-file"),
      field("curve.allow_file", "--curve-allow-file", "F", FIELD(curve_allow_file), kAny, kRestart,
            "public keys of the workers and nodes to admit, one per line (a node's labelled"
            " `node`)"),
      field("curve.server_key_file", "--curve-server-key-file", "F", FIELD(curve_server_key_file),
            kAny, kRestart,
            "role node: the head's public key; the node then uses its own key pair"),
      // The adaptive coordinator (docs/adaptive.md, "Tunables").
      field("adaptive.control_ms", "--control-ms", "MS", FIELD(adaptive.control_ms), atLeast(1),
            kHup, "adaptive: control window"),
      field("adaptive.estimator_window", "", "N", FIELD(adaptive.estimator_window), atLeast(1),
            kHup, "adaptive: heartbeat samples per worker speed estimate"),
      field("adaptive.min_samples", "", "N", FIELD(adaptive.min_samples), atLeast(1), kHup,
            "adaptive: samples before a worker's estimate is used"),
      field("adaptive.min_batch", "", "B", FIELD(adaptive.min_batch), kAny, kHup,
            "adaptive: smallest batch"),
      field("adaptive.max_batch", "", "B", FIELD(adaptive.max_batch), kAny, kHup,
            "adaptive: largest batch"),
      field("adaptive.staleness_penalty", "", "X", FIELD(adaptive.staleness_penalty), kAny, kHup,
            "adaptive: lambda in useful = X / (1 + lambda E[tau])"),
      field("adaptive.staleness_bound", "", "X", FIELD(adaptive.staleness_bound), kAny, kHup,
            "adaptive: max expected staleness of a plan"),
      field("adaptive.min_gain", "", "X", FIELD(adaptive.min_gain), kAny, kHup,
            "adaptive: predicted gain needed to regroup"),
      field("adaptive.min_regroup_interval_ms", "--min-regroup-interval-ms", "MS",
            FIELD(adaptive.min_regroup_interval_ms), kAny, kHup,
            "adaptive: least time between regroups"),
      field("adaptive.max_period_factor", "", "N", FIELD(adaptive.max_period_factor), atLeast(1),
            kHup, "adaptive: cap on a faster group's exchange period, x the slowest group's"),
      field("adaptive.straggler_enter_ratio", "", "X", FIELD(adaptive.straggler.enter_ratio), kAny,
            kHup, "adaptive: slowdown that marks a straggler"),
      field("adaptive.straggler_enter_steps", "", "N", FIELD(adaptive.straggler.enter_steps), kAny,
            kHup, "adaptive: consecutive steps it must last"),
      field("adaptive.straggler_exit_ratio", "", "X", FIELD(adaptive.straggler.exit_ratio), kAny,
            kHup, "adaptive: slowdown below which a straggler recovers"),
      field("adaptive.straggler_exit_steps", "", "N", FIELD(adaptive.straggler.exit_steps), kAny,
            kHup, "adaptive: consecutive steps it must last"),
      field("adaptive.straggler_erratic_window", "", "N", FIELD(adaptive.straggler.erratic_window),
            kAny, kHup,
            "adaptive: steps whose mean can mark an erratic straggler (0: no such rule)"),
      field("adaptive.straggler_erratic_clear_window", "", "N",
            FIELD(adaptive.straggler.erratic_clear_window), atLeast(1), kHup,
            "adaptive: steps whose mean clears an erratic straggler"),
      field("adaptive.straggler_erratic_spikes", "", "N", FIELD(adaptive.straggler.erratic_spikes),
            kAny, kHup, "adaptive: slow steps the erratic window must hold"),
      field("adaptive.straggler_erratic_early_window", "", "N",
            FIELD(adaptive.straggler.erratic_early_window), kAny, kHup,
            "adaptive: steps whose mean can mark an erratic straggler early (0: none)"),
      field("adaptive.straggler_erratic_early_ratio", "", "X",
            FIELD(adaptive.straggler.erratic_early_ratio), kAny, kHup,
            "adaptive: slowdown the early window must show"),
      groupPs(GroupPs::kInGroupConfig,
              field("adaptive.step_cutoff", "--step-cutoff", "X", FIELD(adaptive.step_cutoff), kAny,
                    kHup,
                    "adaptive: a step with its quorum in waits at most this x the median"
                    " release-to-quorum time for the rest (0: off)")),
      groupPs(GroupPs::kInGroupConfig,
              field("adaptive.step_cutoff_late_fraction", "", "X",
                    FIELD(adaptive.step_cutoff_late_fraction), between(0, 0.5), kHup,
                    "adaptive: the fraction of a group's members a cut step may leave behind")),
      field("adaptive.profile_steps", "--profile-steps", "N", FIELD(adaptive.stages.profile_steps),
            kAny, kHup, "adaptive: a profiling stage of N steps (0: none)"),
      field("adaptive.coarse_period", "", "K", FIELD(adaptive.stages.coarse_period), atLeast(1),
            kHup, "adaptive: exchange period in the coarse stage"),
      field("adaptive.coarse_max_groups", "", "G", FIELD(adaptive.stages.coarse_max_groups),
            atLeast(1), kHup, "adaptive: group limit in the coarse stage"),
      field("adaptive.fine_period", "", "K", FIELD(adaptive.stages.fine_period), atLeast(1), kHup,
            "adaptive: exchange period in the fine stage"),
      field("adaptive.fine_max_groups", "", "G", FIELD(adaptive.stages.fine_max_groups), atLeast(1),
            kHup, "adaptive: group limit in the fine stage"),
      field("adaptive.loss_window", "", "N", FIELD(adaptive.stages.loss_window), kAny, kHup,
            "adaptive: loss samples compared for the coarse -> fine switch"),
      field("adaptive.flat_threshold", "", "X", FIELD(adaptive.stages.flat_threshold), kAny, kHup,
            "adaptive: coarse -> fine below this relative improvement"),
      field("adaptive.fine_at_fraction", "", "X", FIELD(adaptive.stages.fine_at_fraction), kAny,
            kHup, "adaptive: ... or at this fraction of the sample budget"),
  };
}

#undef FIELD

bool isLive(const OptionSpec& o) { return o.live != Live::kRestart; }

bool under(const std::string& key, const std::string& prefix) {
  return key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
         key[prefix.size()] == '.';
}

json::json_pointer pointerTo(const std::string& key) {
  std::string p = "/" + key;
  for (char& ch : p) {
    if (ch == '.') ch = '/';
  }
  return json::json_pointer(p);
}

std::string formatBound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

const std::vector<OptionSpec>& daemonOptions() {
  static const std::vector<OptionSpec> table = buildTable();
  return table;
}

const OptionSpec* findOption(const std::string& key) {
  for (const auto& o : daemonOptions()) {
    if (o.key == key) return &o;
  }
  return nullptr;
}

const OptionSpec* findFlag(const std::string& flag) {
  for (const auto& o : daemonOptions()) {
    if (!o.flag.empty() && o.flag == flag) return &o;
  }
  return nullptr;
}

bool isOptionObject(const std::string& prefix) {
  for (const auto& o : daemonOptions()) {
    if (under(o.key, prefix)) return true;
  }
  return false;
}

namespace {

// Why `key` = `value` of a `set` cannot apply ("" when it can): a live option's key (also
// written "a.b"), or an object of options whose given members are all live.
std::string notSettable(const std::string& key, const json& value) {
  if (const OptionSpec* o = findOption(key)) return isLive(*o) ? "" : key;
  if (!isOptionObject(key)) return key;
  if (!value.is_object()) {  // not an object of options: applyJson says why
    for (const auto& o : daemonOptions()) {
      if (under(o.key, key) && !isLive(o)) return key;
    }
    return "";
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (std::string bad = notSettable(key + "." + it.key(), it.value()); !bad.empty()) return bad;
  }
  return "";
}

}  // namespace

Status checkSettable(const json& values) {
  std::string live_keys;
  for (const auto& o : daemonOptions()) {
    if (isLive(o)) live_keys += (live_keys.empty() ? "" : ", ") + o.key;
  }
  for (auto it = values.begin(); it != values.end(); ++it) {
    if (const std::string bad = notSettable(it.key(), it.value()); !bad.empty()) {
      return invalidArgument("'" + bad +
                             "' cannot be changed at run time (runtime keys: " + live_keys + ")");
    }
  }
  return Status::ok();
}

json nestedSettings(const json& values) {
  json out = json::object();
  for (auto it = values.begin(); it != values.end(); ++it) {
    if (it.key().find('.') == std::string::npos || findOption(it.key()) == nullptr) {
      out[it.key()] = it.value();
    } else {
      out[pointerTo(it.key())] = it.value();
    }
  }
  return out;
}

json reloadableSettings(const DaemonConfig& fresh) {
  json patch = json::object();
  for (const auto& o : daemonOptions()) {
    if (o.live == Live::kSetAndReload) patch[pointerTo(o.key)] = o.write(fresh);
  }
  return patch;
}

Status checkRanges(const DaemonConfig& cfg) {
  for (const auto& o : daemonOptions()) {
    if (!o.range.any()) continue;
    const double v = o.write(cfg).get<double>();
    const Range& r = o.range;
    const bool low = r.min_open ? !(v > r.min) : !(v >= r.min);
    const bool high = r.max_open ? !(v < r.max) : !(v <= r.max);
    if (!low && !high) continue;
    const bool bounded = r.max < std::numeric_limits<double>::infinity();
    std::string want;
    if (!bounded) {
      want = r.min_open ? "> " + formatBound(r.min) : "at least " + formatBound(r.min);
    } else {
      want = std::string("in ") + (r.min_open ? "(" : "[") + formatBound(r.min) + ", " +
             formatBound(r.max) + (r.max_open ? ")" : "]");
    }
    return invalidArgument(o.key + " must be " + want + ", got " + formatBound(v));
  }
  return Status::ok();
}

json groupPsStartSettings(const DaemonConfig& cfg) {
  const json all = toJson(cfg);  // its effective exchange_period, as groupServerConfig() reads
  json out = json::object();
  for (const auto& o : daemonOptions()) {
    if (readAtStart(o.group_ps)) out[pointerTo(o.key)] = all[pointerTo(o.key)];
  }
  return out;
}

bool groupConfigSettingsDiffer(const DaemonConfig& a, const DaemonConfig& b) {
  for (const auto& o : daemonOptions()) {
    if (readInGroupConfig(o.group_ps) && o.write(a) != o.write(b)) return true;
  }
  return false;
}

}  // namespace groupsgd::daemon
