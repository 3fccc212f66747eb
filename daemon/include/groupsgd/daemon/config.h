// The daemon's configuration: one table of every option (JSON file, then command-line
// flags on top), validated as a whole. docs/config.md documents each field.
// Thread rule: a plain value; built on the main thread, copied into each role.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "groupsgd/adaptive/adaptive_config.h"
#include "groupsgd/centralps/staleness.h"
#include "groupsgd/common/status.h"
#include "groupsgd/groupps/lr_schedule.h"
#include "groupsgd/groupps/optimizer_placement.h"
#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/optimizer.h"

namespace groupsgd::daemon {

enum class Mode { kSync, kAsync, kGrouped, kAdaptive };

bool parseMode(const std::string& text, Mode* out);
const char* modeName(Mode mode);

// The group optimizer's lr schedule as configured (optimizer.schedule and the keys after
// it); lrScheduleOf() (group_server_setup.h) makes the schedule of it.
struct LrScheduleOptions {
  groupps::LrScheduleKind kind = groupps::LrScheduleKind::kConstant;
  std::uint64_t warmup_samples = 0;
  std::uint64_t schedule_samples = 0;  // end of the decay; 0 = max_samples
  double min_lr = 0;
  std::uint64_t step_samples = 0;
  double step_gamma = 0.1;
};

struct DaemonConfig {
  std::uint64_t job_id = 1;
  std::string job_name = "default";  // the run's name; a worker naming another is refused
  // Multi-job daemon (docs/jobs.md): stay up and host the jobs submitted over the control
  // socket; their table and checkpoints live in state_dir.
  bool serve = false;
  std::string state_dir;
  std::uint32_t max_group_slots = 16;  // serve: group PSes of all jobs together
  std::string role = "all";            // all | coordinator | node | standby | central-shard
  std::string coordinator;             // role node: the coordinator's endpoint
  std::uint32_t node_groups = 1;       // role node: group PSes this node hosts
  // role node: a call to the head unanswered this long tries the next --coordinator endpoint
  std::uint32_t coordinator_timeout_ms = 5000;
  // Standby head (docs/reliability.md, "Standby head"). A head with replication_listen
  // accepts one standby there; role standby follows the head whose replication_listen is
  // `primary` and takes over (on its own --listen) when it is silent standby_takeover_ms.
  std::string replication_listen;            // "" = no standby
  std::string primary;                       // role standby: the primary's replication_listen
  bool standby_async = false;                // ship updates without waiting for the ack
  std::uint32_t standby_takeover_ms = 1000;  // silence that promotes / loses the standby
  // Central shards (docs/shards.md): the head serves shard 0 and is told where shards
  // 1..S-1 listen (comma-separated), or gathers them from node daemons hosting them; role
  // central-shard serves shard `shard_index` at listen.
  std::uint32_t central_shards = 1;
  std::string central_shard_endpoints;
  std::string central_shard_split = "tensors";  // tensors | even (docs/shards.md)
  double central_cut_interval_s = 0;  // head: a consistent cut every S seconds (0 = never)
  std::uint32_t shard_index = 0;
  std::uint32_t node_central_shard = 0;  // role node: the central shard it hosts (0 = none)
  // role node with node_central_shard and replication_listen: where that shard's standby
  // serves once promoted (offered with the shard as its failover list EP|STANDBY).
  std::string node_central_shard_standby;
  std::uint32_t standby_alone_ms = 0;  // a head without its standby commits after this (0 = never)
  Mode mode = Mode::kGrouped;
  std::uint32_t workers = 4;          // expected trainers: number of data shards (async: groups)
  std::uint32_t groups = 2;           // grouped mode: G
  std::uint32_t exchange_period = 1;  // grouped mode: K
  std::uint32_t batch_size = 32;      // per worker
  kernels::ModelKind model = kernels::ModelKind::kMlp;
  bool external_model = false;  // model "external": learnt from the first worker (groupsgd.torch)
  std::string external_model_file;  // model external: from this file instead (save_model_file)
  std::uint64_t seed = 1;
  std::string listen = "tcp://127.0.0.1:5555";  // coordinator endpoint (port 0 = any)
  std::string bind_host = "127.0.0.1";          // central / group PSes bind here, any port
  std::string endpoint_file;                    // write the coordinator endpoint here
  kernels::OptimizerConfig optimizer{kernels::OptimizerKind::kMomentum, 0.05f, 0.9f, 0.0f};
  LrScheduleOptions lr_schedule;  // of `optimizer`, by the run's samples applied
  // Who steps the group (inner) optimizer: the group PS, or every member (optimizer.placement).
  groupps::OptimizerPlacement optimizer_placement = groupps::OptimizerPlacement::kServer;
  kernels::OptimizerConfig outer_optimizer{kernels::OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f};
  // false: no weight decay on the built-in model's 1-D tensors (biases); model external
  // has no shapes here, so validate() refuses false with it.
  bool optimizer_decay_1d = true;
  bool outer_optimizer_decay_1d = true;
  centralps::StalenessConfig staleness;
  std::uint32_t step_deadline_ms = 5000;
  std::uint32_t exchange_timeout_ms = 10000;  // a group PS's unanswered exchange: resynchronise
  std::uint32_t heartbeat_ms = 1000;
  std::uint32_t heartbeat_misses = 3;
  double max_grad_norm = 1e4;
  double max_delta_norm = 1e4;
  double target_acc = 0;             // stop when the evaluator reports this (0 = never)
  double target_loss = 0;            // stop when its validation loss is <= this (0 = never)
  double max_seconds = 0;            // stop after this long (0 = never)
  std::uint64_t max_samples = 0;     // stop after this many samples trained (0 = never)
  std::uint32_t progress_ms = 1000;  // progress line period (0 = none)
  std::string summary_file;          // write the closing summary JSON here
  bool json = false;                 // print the summary as one JSON line on stdout
  std::string log_level = "info";
  std::string control_socket;           // Unix socket for groupsgdctl ("" = none)
  std::int64_t control_admin_gid = -1;  // group allowed admin methods (-1 = none)
  std::string metrics_listen;           // "HOST:PORT" for /metrics ("" = none)
  // The device arbiter hosted by this daemon (docs/arbiter.md); "" = none.
  std::string arbiter_listen;
  std::string arbiter_policy = "crossover";  // none | fifo | crossover
  std::string arbiter_weights;               // "JOB=W,..." (crossover)
  std::uint32_t arbiter_lease_timeout_ms = 10000;
  std::string checkpoint_dir;  // "" = no checkpoints
  std::uint32_t checkpoint_keep = 3;
  std::uint64_t checkpoint_every_versions = 0;  // 0 = not by versions
  double checkpoint_interval_s = 60;            // 0 = not by time
  // With checkpoint_dir: the best-evaluated model goes to checkpoint_dir/best.ckpt.
  bool keep_best = true;
  // Where a group's members go (docs/cluster.md, "Placement"): "hosts" puts a group on the
  // slot whose PS runs on the host of most of its members; "order": slots in plan order.
  std::string ps_placement = "hosts";
  std::string config_file;                  // set from --config (SIGHUP reloads it)
  std::string compress_gradients = "auto";  // worker -> group encoding (CompressionSpec, or
                                            // "auto": fp16 per group on slow links)
  double compression_auto_mbit = 1000;      // auto: fp16 below this measured link speed
  std::string compress_deltas = "dense";    // group -> central encoding
  adaptive::AdaptiveConfig adaptive;
  // data_allocation (docs/protocol.md, "Sample ranges"): false = "shards" (each trainer
  // samples its own equal shard), true = "ranges" (trainers claim ranges of each epoch's
  // permutation from the coordinator as they go).
  bool data_ranges = false;
  // Failure handling (docs/reliability.md).
  std::uint32_t quarantine_after = 5;  // bad updates within the window (0 = never)
  double quarantine_window_s = 60;
  double give_up_s = 600;  // role node: how long to keep re-registering with a lost head
  // A restarted head whose run ends before every expected trainer came back answers
  // registrations with `finished` this much longer, so a trainer still in its back-off
  // stops instead of retrying until its --give-up-s (0 = exit at once).
  double finish_linger_s = 30;
  // CURVE on every TCP link (docs/operations.md, "Securing the links"): this daemon's
  // secret key file (mode 0600; every daemon of a cluster shares the pair) and the file of
  // client public keys it admits. Both empty = plain links.
  std::string curve_secret_key_file;
  std::string curve_allow_file;
  std::string curve_server_key_file;  // role node: the head's public key ("" = shared pair)

  // Groups (group PS slots) and exchange period implied by the mode.
  std::uint32_t groupCount() const;
  std::uint32_t exchangePeriod() const;
};

// Fills cfg from a JSON object; unknown keys are an error (typos must not pass silently).
Status applyJson(const nlohmann::json& j, DaemonConfig* cfg);
Status loadConfigFile(const std::string& path, DaemonConfig* cfg);
// Applies command-line flags; sets *help when --help was given.
Status applyFlags(const std::vector<std::string>& args, DaemonConfig* cfg, bool* help);
Status validate(const DaemonConfig& cfg);
// compress_gradients auto in mode adaptive: its controller chooses each group's encoding.
// Other modes have no controller: there auto means dense.
bool gradientCompressionChosenPerGroup(const DaemonConfig& cfg);
// The encoding every trainer uses when it is not chosen per group.
std::string fixedGradientCompression(const DaemonConfig& cfg);
nlohmann::json toJson(const DaemonConfig& cfg);
const char* daemonUsage();

}  // namespace groupsgd::daemon
