#include "groupsgd/worker/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

#include <CLI/CLI.hpp>

#include "groupsgd/arbiter/device_lock.h"
#include "groupsgd/client/endpoint_list.h"
#include "groupsgd/codec/compression_spec.h"

namespace groupsgd::worker {
namespace {

template <typename T>
Status parseUnsigned(const std::string& flag, const std::string& v, T* out) {
  char* end = nullptr;
  errno = 0;
  // Digits only: strtoull would accept leading blanks and negate a '-'.
  const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
  unsigned long long x = digits ? std::strtoull(v.c_str(), &end, 10) : 0;
  if (!digits || end != v.c_str() + v.size() || errno != 0 || x > std::numeric_limits<T>::max()) {
    return invalidArgument(flag + " expects a non-negative integer that fits, got '" + v + "'");
  }
  *out = static_cast<T>(x);
  return Status::ok();
}

Status parseDouble(const std::string& flag, const std::string& v, double* out) {
  char* end = nullptr;
  *out = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(*out)) {
    return invalidArgument(flag + " expects a number, got '" + v + "'");
  }
  return Status::ok();
}

}  // namespace

const char* workerUsage() {
  return R"(usage: groupsgd-worker [options]
Trains with a groupsgd daemon (or, with --evaluate, measures the central model's test
accuracy and reports it).

  --coordinator EP        coordinator endpoint (default tcp://127.0.0.1:5555), or a
                          comma-separated list tried in turn (a head that may restart
                          elsewhere)
  --job NAME              the job to join on a daemon hosting several (docs/jobs.md;
                          default: the only job running)
  --job-id N              training job id (default 1; a multi-job daemon sets it)
  --data DIR              MNIST-format IDX files, gzipped or not
                          (default /usr/share/datasets/fashion-mnist)
  --slowdown F            every step takes F times as long (default 1)
  --device-ms D           emulated device time per step at the assigned batch, scaled
                          with the batch when the daemon resizes it (default 0)
  --link-ms L             emulated link delay added to every push (default 0)
  --stall-prob P          erratic worker: chance per step of a random pause (default 0)
  --stall-ms S            mean length of such a pause, exponentially distributed
  --seed N                seed for the pauses (default: from the process id)
  --compress SPEC         gradient encoding: dense | fp16 | sign | topk:RATIO
                          (default: what the daemon assigns)
  --schedule S            change speed mid-run: "AT:key=value[:key=value],..." with AT a
                          step or Ns seconds, keys slowdown, device-ms, link-ms
                          e.g. "200:slowdown=4,60s:slowdown=1"
  --device D              where the gradients are computed: cpu | cuda | cuda:N
                          (default cpu; cuda runs the mlp and cnn models on GPU N
                          through cuBLAS/cuDNN; the evaluator always uses the CPU)
  --shared-device NAME    the device this trainer shares with other jobs' workers
                          (e.g. gpu0): each step's compute (--device-ms included)
                          holds it exclusively (a file lock in --device-lock-dir)
  --arbiter EP            the device arbiter (groupsgd-arbiter, or a daemon with
                          arbiter_listen) that orders the jobs on the shared device;
                          needs --shared-device (docs/arbiter.md)
  --arbiter-timeout-ms MS an arbiter silent this long is taken for dead: the worker
                          computes unarbitrated and says so once (default 1000)
  --arbiter-handoff on|off  on (default): the next worker may be granted the device
                          ahead and waits on its lock file, so the holder's unlock hands
                          it over without a round trip through the arbiter (fifo and
                          crossover); off: every grant waits for the holder's release
  --device-lock-dir DIR   where the shared devices' lock files are (default
                          $XDG_RUNTIME_DIR/groupsgd-devices or /tmp/groupsgd-devices-UID)
  --device-sharing M      how steps of several workers share an emulated device:
                          exclusive (default: one step at a time, a file lock) or
                          timeslice (each of n steps on it runs at 1/n speed, like a GPU
                          running several processes' kernels)
  --evaluate              run as the evaluator
  --eval-interval-ms MS   evaluator: how often to fetch the central model (default 500)
  --name NAME             a name for operators
  --max-steps N           stop after N steps (default: until the daemon says stop)
  --timeout-ms MS         deadline of one request (default 15000)
  --connect-timeout-ms MS keep retrying registration this long (default 30000)
  --give-up-s S           after losing the daemon (head restart), keep registering
                          again this long before exiting 1 (default 600)
  --backoff-initial-ms MS registration retries: first delay (default 100), doubling
  --backoff-max-ms MS     up to this (default 8000), each shortened by up to 20% jitter
  --log-level L           debug|info|warn|error (default info)
  --curve-secret-key-file F  CURVE: this worker's secret key (mode 0600, groupsgdctl keygen);
                          its public key must be in the daemon's allow-list
  --curve-server-key-file F  CURVE: the daemons' public key file
  --help                  this text
Options also take --flag=value.
)";
}

namespace {

// Converts the text of a numeric (or otherwise checked) flag into its field.
using Convert =
    std::function<Status(const std::string& flag, const std::string& v, WorkerOptions&)>;

template <typename T, typename Access>
Convert count(Access access) {
  return [access](const std::string& flag, const std::string& v, WorkerOptions& o) {
    return parseUnsigned(flag, v, &access(o));
  };
}

// The same, refusing 0.
template <typename T, typename Access>
Convert positiveCount(Access access) {
  return [access](const std::string& flag, const std::string& v, WorkerOptions& o) {
    GSGD_RETURN_IF_ERROR(parseUnsigned(flag, v, &access(o)));
    if (access(o) == 0) return invalidArgument(flag + " must be > 0");
    return Status::ok();
  };
}

// A finite number; check(x) says whether it is in range, `want` how it must be.
template <typename Access, typename Check>
Convert number(Access access, Check check, const char* want) {
  return [access, check, want](const std::string& flag, const std::string& v, WorkerOptions& o) {
    GSGD_RETURN_IF_ERROR(parseDouble(flag, v, &access(o)));
    if (!check(access(o))) return invalidArgument(flag + " must be " + want);
    return Status::ok();
  };
}

#define WORKER_FIELD(PATH) ([](WorkerOptions & o) -> auto& { return o.PATH; })

struct CheckedFlag {
  const char* flag;
  Convert convert;
};

const std::vector<CheckedFlag>& checkedFlags() {
  static const std::vector<CheckedFlag> flags = {
      {"--job-id", count<std::uint64_t>(WORKER_FIELD(job_id))},
      {"--max-steps", count<std::uint64_t>(WORKER_FIELD(max_steps))},
      {"--eval-interval-ms", count<std::uint32_t>(WORKER_FIELD(eval_interval_ms))},
      {"--timeout-ms", count<std::uint32_t>(WORKER_FIELD(timeout_ms))},
      {"--connect-timeout-ms", count<std::uint32_t>(WORKER_FIELD(connect_timeout_ms))},
      {"--backoff-initial-ms", positiveCount<std::uint32_t>(WORKER_FIELD(backoff_initial_ms))},
      {"--backoff-max-ms", count<std::uint32_t>(WORKER_FIELD(backoff_max_ms))},
      {"--arbiter-timeout-ms", positiveCount<std::uint32_t>(WORKER_FIELD(arbiter_timeout_ms))},
      {"--arbiter-handoff",
       [](const std::string& flag, const std::string& v, WorkerOptions& o) {
         if (v != "on" && v != "off")
           return invalidArgument(flag + " must be on or off, got '" + v + "'");
         o.arbiter_handoff = v == "on";
         return Status::ok();
       }},
      {"--device-sharing",
       [](const std::string& flag, const std::string& v, WorkerOptions& o) {
         if (v != "exclusive" && v != "timeslice") {
           return invalidArgument(flag + " must be exclusive or timeslice, got '" + v + "'");
         }
         o.device_sharing = v;
         return Status::ok();
       }},
      {"--shared-device",
       [](const std::string& flag, const std::string& v, WorkerOptions& o) {
         o.shared_device = v;
         Status s = arbiter::checkDeviceName(v);
         return s ? s : invalidArgument(flag + ": " + s.message());
       }},
      {"--seed", count<std::uint64_t>(WORKER_FIELD(seed))},
      {"--give-up-s", number(
                          WORKER_FIELD(give_up_s), [](double x) { return x > 0; }, "> 0")},
      {"--slowdown", number(
                         WORKER_FIELD(speed.slowdown), [](double x) { return x > 0; }, "> 0")},
      {"--stall-prob",
       number(
           WORKER_FIELD(stall_prob), [](double x) { return x >= 0 && x <= 1; }, "in [0, 1]")},
      {"--stall-ms", number(
                         WORKER_FIELD(stall_ms), [](double x) { return x >= 0; }, ">= 0")},
      {"--link-ms", number(
                        WORKER_FIELD(speed.link_ms), [](double x) { return x >= 0; }, ">= 0")},
      {"--device-ms", number(
                          WORKER_FIELD(speed.device_ms), [](double x) { return x >= 0; }, ">= 0")},
      {"--compress",
       [](const std::string&, const std::string& v, WorkerOptions& o) {
         o.compress = v;
         auto spec = parseCompressionSpec(v);
         return spec ? Status::ok() : spec.status();
       }},
      {"--device",
       [](const std::string& flag, const std::string& v, WorkerOptions& o) {
         if (kernels::KernelStatus st = kernels::parseModelDevice(v, &o.device); !st.ok()) {
           return invalidArgument(flag + ": " + st.message);
         }
         return Status::ok();
       }},
  };
  return flags;
}

#undef WORKER_FIELD

// CLI11's "--flag: 1 required TEXT missing" as this program has always said it.
std::string parseErrorText(const CLI::ParseError& e) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    return what.substr(0, what.find(':')) + " needs a value";
  }
  return what + " (see --help)";
}

}  // namespace

Result<WorkerOptions> parseWorkerOptions(const std::vector<std::string>& args) {
  WorkerOptions o;
  CLI::App app("groupsgd-worker");
  app.set_help_flag();  // workerUsage() is the help
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("-h,--help", o.help);
  app.add_flag("--evaluate", o.evaluate);
  for (auto [flag, field] : {std::pair{"--coordinator", &o.coordinator},
                             {"--data", &o.data_dir},
                             {"--schedule", &o.schedule_text},
                             {"--name", &o.name},
                             {"--job", &o.job},
                             {"--log-level", &o.log_level},
                             {"--arbiter", &o.arbiter},
                             {"--device-lock-dir", &o.device_lock_dir},
                             {"--curve-secret-key-file", &o.curve_secret_key_file},
                             {"--curve-server-key-file", &o.curve_server_key_file}}) {
    app.add_option(flag, *field);
  }
  std::vector<std::string> texts(checkedFlags().size());
  for (std::size_t i = 0; i < texts.size(); ++i) app.add_option(checkedFlags()[i].flag, texts[i]);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return invalidArgument(parseErrorText(e));
  }
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const CheckedFlag& f = checkedFlags()[i];
    if (app.count(f.flag) > 0) GSGD_RETURN_IF_ERROR(f.convert(f.flag, texts[i], o));
  }
  if (auto list = client::EndpointList::parse(o.coordinator); !o.coordinator.empty() && !list) {
    return list.status();
  }
  if (o.backoff_max_ms < o.backoff_initial_ms) {
    return invalidArgument("--backoff-max-ms must be at least --backoff-initial-ms");
  }
  if (!o.arbiter.empty() && o.shared_device.empty()) {
    return invalidArgument("--arbiter needs --shared-device (the device to ask it for)");
  }
  auto sched = SpeedSchedule::parse(o.schedule_text);
  if (!sched) return sched.status();
  if (o.curve_secret_key_file.empty() != o.curve_server_key_file.empty()) {
    return invalidArgument("CURVE needs both --curve-secret-key-file and --curve-server-key-file");
  }
  if (!o.curve_secret_key_file.empty() && !o.help) {
    auto own = loadSecretKeyFile(o.curve_secret_key_file);
    if (!own) return own.status();
    auto server = loadPublicKeyFile(o.curve_server_key_file);
    if (!server) return server.status();
    o.curve = CurveKeys{own->public_key, own->secret_key, *server};
  }
  return o;
}

}  // namespace groupsgd::worker
