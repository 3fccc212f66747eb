// Model "external": the daemon trains a model it has no code for (a PyTorch nn.Module
// through groupsgd.torch). Before the central PS exists, the intake serves registrations
// on the coordinator's socket until one states a parameter count, a layout fingerprint and
// the initial parameters; the central PS starts from those, and from then on every trainer
// and evaluator must state the same count and fingerprint (checkWorkerModel).
// Thread rule: plain functions; awaitExternalModel runs on the thread that owns the socket
// (main's for a single run, the job's runner for a submitted job) until it returns.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/status.h"
#include "groupsgd/coordinator/topology.h"
#include "groupsgd/daemon/config.h"
#include "worker.capnp.h"

namespace groupsgd::coordinator {

// The daemon configuration this room is built from (daemon/).
using daemon::DaemonConfig;

struct ExternalModel {
  std::vector<float> initial;
  std::string fingerprint;
  std::string layout;    // Register.modelLayout of the worker that brought it ("" = none)
  std::string supplier;  // "name (host pid N)", for the log
};

// Answers every request on sock (a ROUTER bound to the coordinator endpoint) until a
// registration brings a valid model: that worker is told to retry (it then registers with
// the coordinator proper), the others are told what is missing. Nodes (and the tool
// registration a node probes with) are told to retry: they learn the model's size once a
// worker has brought it. kAborted when stopped() turns true (checked every 100 ms).
Result<ExternalModel> awaitExternalModel(zmq::socket_t& sock, const DaemonConfig& cfg,
                                         const std::function<bool()>& stopped);

// The model from a file written by groupsgd.torch.save_model_file: the text line
// "groupsgd-model 1 <param_count> <fingerprint>\n", then param_count little-endian float32.
Result<ExternalModel> loadExternalModelFile(const std::string& path);

// Writes a model in that format, atomically (a submitted job keeps the model its first
// worker brought beside its checkpoints, so that it resumes without waiting for one).
Status saveExternalModelFile(const std::string& path, const ExternalModel& model);

// The first parameter where two layouts (Register.modelLayout text) differ, in words:
// "parameter 'fc.weight' is 9x784 in this worker, 8x784 in the daemon's model" (or
// missing on one side); "" when they are the same or either is empty.
std::string firstLayoutDifference(const std::string& daemon_layout,
                                  const std::string& worker_layout);

// Whether a registration states the model this daemon trains. Built-in models: a worker
// that states a different parameter count is refused. External: trainers and evaluators
// must state the same count and fingerprint. Tools and nodes are not checked.
Status checkWorkerModel(const DaemonConfig& cfg, const Topology& topo, proto::Register::Reader reg);

}  // namespace groupsgd::coordinator
