#include "groupsgd/coordinator/external_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::coordinator {
namespace {

Status checkFinite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return invalidArgument("the initial parameters are not all finite");
  }
  return Status::ok();
}

bool checkedRole(proto::Role r) { return r == proto::Role::TRAINER || r == proto::Role::EVALUATOR; }

// A node daemon (and its probe, a tool registration) needs the model's size, not its own.
bool waitsForTheModel(proto::Role r) { return r == proto::Role::NODE || r == proto::Role::TOOL; }

// The model a registration brings, or why it cannot be used.
Result<ExternalModel> modelFrom(const InMessage& msg) {
  auto r = msg.header().getBody().getRegister();
  if (waitsForTheModel(r.getRole())) {
    return unavailable("no worker has brought the external model yet; register again");
  }
  if (!checkedRole(r.getRole()) || r.getParamCount() == 0 || r.getModelFingerprint().size() == 0) {
    return failedPrecondition(
        "this daemon trains an external model and has none yet: the first trainer must state "
        "its parameter count, layout fingerprint and initial parameters (groupsgd.torch)");
  }
  if (msg.tensorCount() < 1) {
    return invalidArgument("the registration carries no initial parameters");
  }
  ExternalModel m;
  m.initial.resize(r.getParamCount());
  GSGD_RETURN_IF_ERROR(msg.readTensor(0, m.initial, decodePayload));
  GSGD_RETURN_IF_ERROR(checkFinite(m.initial));
  m.fingerprint = r.getModelFingerprint().cStr();
  m.layout = r.getModelLayout().cStr();
  m.supplier = std::string(r.getName().cStr()) + " (" + r.getHost().cStr() + " pid " +
               std::to_string(r.getPid()) + ")";
  return m;
}

}  // namespace

Result<ExternalModel> loadExternalModelFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return notFound("cannot open the model file " + path);
  std::string line;
  std::getline(f, line);
  std::istringstream head(line);
  std::string magic;
  int version = 0;
  std::uint64_t count = 0;
  ExternalModel m;
  head >> magic >> version >> count >> m.fingerprint;
  if (magic != "groupsgd-model" || version != 1 || count == 0 || m.fingerprint.empty() ||
      count > (std::uint64_t{1} << 32)) {
    return invalidArgument(path +
                           " is not a groupsgd model file (\"groupsgd-model 1 COUNT "
                           "FINGERPRINT\" then COUNT float32)");
  }
  m.initial.resize(count);
  f.read(reinterpret_cast<char*>(m.initial.data()),
         static_cast<std::streamsize>(count * sizeof(float)));
  if (static_cast<std::uint64_t>(f.gcount()) != count * sizeof(float) || f.peek() != EOF) {
    return invalidArgument(path + ": the header says " + std::to_string(count) +
                           " parameters, the file holds a different amount");
  }
  GSGD_RETURN_IF_ERROR(checkFinite(m.initial));
  m.supplier = path;
  return m;
}

Status saveExternalModelFile(const std::string& path, const ExternalModel& model) {
  const std::string head =
      "groupsgd-model 1 " + std::to_string(model.initial.size()) + " " + model.fingerprint + "\n";
  const std::string_view floats(reinterpret_cast<const char*>(model.initial.data()),
                                model.initial.size() * sizeof(float));
  return writeFileAtomically(path, {head, floats});
}

Result<ExternalModel> awaitExternalModel(zmq::socket_t& sock, const DaemonConfig& cfg,
                                         const std::function<bool()>& stopped) {
  MessageLimits limits;
  limits.job_id = cfg.job_id;
  GSGD_INFO("model external: waiting for the first worker to bring its model");
  while (!stopped()) {
    auto readable = pollReadable(sock, std::chrono::milliseconds(100));
    if (!readable) return readable.status();
    if (!*readable) continue;
    auto routed = recvRouted(sock);
    if (!routed) continue;
    auto msg = decodeMessage(std::move(routed->frames), limits);
    Status answer;
    std::optional<ExternalModel> model;
    if (!msg) {
      answer = msg.status();
    } else if (msg->kind() != BodyKind::REGISTER) {
      answer = unavailable("the daemon is starting (no model yet); register again");
    } else if (auto got = modelFrom(*msg); !got) {
      answer = got.status();
    } else {
      model = std::move(*got);
      // The worker retries at once and meets the coordinator proper.
      answer = unavailable("the daemon is starting with this worker's model; retry");
    }
    if (!model && answer.code() != Code::kUnavailable) {
      GSGD_WARN("external model intake: " << answer.toString());
    }
    (void)replyTo(sock, routed->routing_id, makeErrorReply(cfg.job_id, 0, answer));
    if (model) {
      GSGD_INFO("model external: " << model->initial.size() << " parameters, fingerprint "
                                   << model->fingerprint << ", from " << model->supplier);
      return std::move(*model);
    }
  }
  return aborted("stopped before any worker brought a model");
}

namespace {

struct LayoutEntry {
  std::string name, shape;
};

// "name:shape:dtype" lines (a name may hold ':' in principle: split from the right).
std::vector<LayoutEntry> parseLayout(const std::string& text) {
  std::vector<LayoutEntry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto dtype_at = line.rfind(':');
    const auto shape_at = dtype_at == std::string::npos || dtype_at == 0
                              ? std::string::npos
                              : line.rfind(':', dtype_at - 1);
    if (shape_at == std::string::npos) {
      out.push_back({line, "?"});
      continue;
    }
    std::string shape = line.substr(shape_at + 1, dtype_at - shape_at - 1);
    const std::string dtype = line.substr(dtype_at + 1);
    if (shape.empty()) shape = "scalar";
    if (dtype != "float32") shape += " " + dtype;
    out.push_back({line.substr(0, shape_at), shape});
  }
  return out;
}

}  // namespace

std::string firstLayoutDifference(const std::string& daemon_layout,
                                  const std::string& worker_layout) {
  if (daemon_layout.empty() || worker_layout.empty()) return "";
  const auto ours = parseLayout(daemon_layout);
  const auto theirs = parseLayout(worker_layout);
  for (std::size_t i = 0; i < std::max(ours.size(), theirs.size()); ++i) {
    if (i >= theirs.size()) {
      return "parameter '" + ours[i].name + "' (" + ours[i].shape +
             ") of the daemon's model is missing in this worker";
    }
    if (i >= ours.size()) {
      return "parameter '" + theirs[i].name + "' (" + theirs[i].shape +
             ") of this worker is not in the daemon's model";
    }
    if (ours[i].name != theirs[i].name) {
      return "parameter " + std::to_string(i) + " is '" + theirs[i].name + "' (" + theirs[i].shape +
             ") in this worker, '" + ours[i].name + "' (" + ours[i].shape +
             ") in the daemon's model";
    }
    if (ours[i].shape != theirs[i].shape) {
      return "parameter '" + theirs[i].name + "' is " + theirs[i].shape + " in this worker, " +
             ours[i].shape + " in the daemon's model";
    }
  }
  return "";
}

Status checkWorkerModel(const DaemonConfig& cfg, const Topology& topo,
                        proto::Register::Reader reg) {
  if (!checkedRole(reg.getRole())) return Status::ok();
  const std::uint64_t count = reg.getParamCount();
  const std::string fingerprint = reg.getModelFingerprint().cStr();
  if (!cfg.external_model) {
    if (count == 0 || count == topo.param_count) return Status::ok();
    return failedPrecondition("this daemon trains the built-in model '" +
                              std::string(kernels::modelKindName(cfg.model)) + "' (" +
                              std::to_string(topo.param_count) + " parameters), not a model of " +
                              std::to_string(count));
  }
  if (count == 0) {
    return failedPrecondition("this daemon trains an external model (" +
                              std::to_string(topo.param_count) +
                              " parameters); this worker states none (use groupsgd.torch)");
  }
  if (count != topo.param_count || fingerprint != topo.model_fingerprint) {
    const std::string first = firstLayoutDifference(topo.model_layout, reg.getModelLayout().cStr());
    return failedPrecondition("model mismatch: " + (first.empty() ? "" : first + "; ") +
                              "the daemon trains " + std::to_string(topo.param_count) +
                              " parameters with layout " + "fingerprint " + topo.model_fingerprint +
                              ", this worker has " + std::to_string(count) + " with fingerprint " +
                              fingerprint);
  }
  return Status::ok();
}

}  // namespace groupsgd::coordinator
