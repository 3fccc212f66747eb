#include "groupsgd/worker/options.h"

#include "groupsgd/common/compression_spec.h"
#include "groupsgd/worker/endpoint_list.h"

#include <cerrno>
#include <cmath>
#include <limits>
#include <cstdlib>

namespace groupsgd::worker {
namespace {

template <typename T>
Status parseUnsigned(const std::string& flag, const std::string& v, T* out) {
  char* end = nullptr;
  errno = 0;
  // Digits only: strtoull would accept leading blanks and negate a '-'.
  const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
  unsigned long long x = digits ? std::strtoull(v.c_str(), &end, 10) : 0;
  if (!digits || end != v.c_str() + v.size() || errno != 0 ||
      x > std::numeric_limits<T>::max()) {
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
  --job-id N              training job id (default 1)
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
)";
}

Result<WorkerOptions> parseWorkerOptions(const std::vector<std::string>& args) {
  WorkerOptions o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* out) -> Status {
      if (i + 1 >= args.size()) return invalidArgument(a + " needs a value");
      *out = args[++i];
      return Status::ok();
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--evaluate") {
      o.evaluate = true;
    } else if (a == "--coordinator") {
      GSGD_RETURN_IF_ERROR(value(&o.coordinator));
      if (auto list = EndpointList::parse(o.coordinator); !list) return list.status();
    } else if (a == "--data") {
      GSGD_RETURN_IF_ERROR(value(&o.data_dir));
    } else if (a == "--schedule") {
      GSGD_RETURN_IF_ERROR(value(&o.schedule_text));
    } else if (a == "--name") {
      GSGD_RETURN_IF_ERROR(value(&o.name));
    } else if (a == "--log-level") {
      GSGD_RETURN_IF_ERROR(value(&o.log_level));
    } else if (a == "--curve-secret-key-file") {
      GSGD_RETURN_IF_ERROR(value(&o.curve_secret_key_file));
    } else if (a == "--curve-server-key-file") {
      GSGD_RETURN_IF_ERROR(value(&o.curve_server_key_file));
    } else if (a == "--job-id") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.job_id));
    } else if (a == "--max-steps") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.max_steps));
    } else if (a == "--eval-interval-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.eval_interval_ms));
    } else if (a == "--timeout-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.timeout_ms));
    } else if (a == "--connect-timeout-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.connect_timeout_ms));
    } else if (a == "--give-up-s") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseDouble(a, v, &o.give_up_s));
      if (!(o.give_up_s > 0)) return invalidArgument("--give-up-s must be > 0");
    } else if (a == "--backoff-initial-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.backoff_initial_ms));
      if (o.backoff_initial_ms == 0) return invalidArgument("--backoff-initial-ms must be > 0");
    } else if (a == "--backoff-max-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.backoff_max_ms));
    } else if (a == "--slowdown") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseDouble(a, v, &o.speed.slowdown));
      if (o.speed.slowdown <= 0) return invalidArgument("--slowdown must be > 0");
    } else if (a == "--stall-prob") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseDouble(a, v, &o.stall_prob));
      if (o.stall_prob < 0 || o.stall_prob > 1) return invalidArgument("--stall-prob must be in [0, 1]");
    } else if (a == "--stall-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseDouble(a, v, &o.stall_ms));
      if (o.stall_ms < 0) return invalidArgument("--stall-ms must be >= 0");
    } else if (a == "--compress") {
      GSGD_RETURN_IF_ERROR(value(&o.compress));
      auto spec = parseCompressionSpec(o.compress);
      if (!spec) return spec.status();
    } else if (a == "--device") {
      GSGD_RETURN_IF_ERROR(value(&v));
      if (kernels::KernelStatus st = kernels::parseModelDevice(v, &o.device); !st.ok()) {
        return invalidArgument("--device: " + st.message);
      }
    } else if (a == "--seed") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseUnsigned(a, v, &o.seed));
    } else if (a == "--link-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseDouble(a, v, &o.speed.link_ms));
      if (o.speed.link_ms < 0) return invalidArgument("--link-ms must be >= 0");
    } else if (a == "--device-ms") {
      GSGD_RETURN_IF_ERROR(value(&v));
      GSGD_RETURN_IF_ERROR(parseDouble(a, v, &o.speed.device_ms));
      if (o.speed.device_ms < 0) return invalidArgument("--device-ms must be >= 0");
    } else {
      return invalidArgument("unknown option '" + a + "' (see --help)");
    }
  }
  if (o.backoff_max_ms < o.backoff_initial_ms) {
    return invalidArgument("--backoff-max-ms must be at least --backoff-initial-ms");
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
