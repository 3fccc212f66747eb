// The coordinator's evaluator supervision hooks (docs/reliability.md,
// "Evaluator loss"): a lost evaluator is reported at once (event, progress
// line, WARN line, status, metrics) and a replacement's registration closes the
// gap. Runs on the coordinator thread.
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

void Coordinator::evaluatorJoined(const WorkerRecord& w) {
  // A new evaluator under the name and host of an active one that has gone
  // quiet is its restart (a supervisor's): the old process is gone, so say so
  // now rather than at its heartbeat limit. (Two live evaluators need distinct
  // names.)
  const auto quiet = std::chrono::milliseconds(cfg_.heartbeat_ms);
  for (const auto& [id, other] : registry_.all()) {
    if (id == w.id || other.role != WorkerRole::kEvaluator || other.state != WorkerState::kActive ||
        other.name != w.name || other.host != w.host || w.name.empty() ||
        Clock::now() - other.last_seen < quiet) {
      continue;
    }
    registry_.find(id)->state = WorkerState::kDead;
    evaluatorLost(other, "replaced by evaluator " + std::to_string(w.id) + " of the same name");
  }
  const bool replacing = evaluators_.unmeasuredSince().has_value();
  const Accuracy last = latestAccuracy();
  const std::string text =
      evaluators_.joined(w.id, w.name, run_log_.uptimeS(), {last.value, last.version});
  if (replacing) {
    event("evaluator_back", text);
  } else {
    GSGD_INFO(text);
  }
}

void Coordinator::noteEvaluation(const WorkerRecord& w) {
  const Evaluation e{w.test_accuracy, w.test_loss, w.evaluated_version};
  if (best_.offer(e, cfg_.target_loss > 0) && keepingBest()) keepBest(e.version);
}

void Coordinator::keepBest(std::uint64_t version) {
  OutMessage out(cfg_.job_id, 0);
  auto req = out.header().getBody().initCheckpointRequest();
  req.setBest(true);
  req.setBestVersion(version);
  const std::string path = cfg_.checkpoint_dir + "/best.ckpt";
  req.setBestPath(path);
  // Off the loop like every central call; a newer best's write is queued behind this one
  // at the central PS, and the summary names the file only once the best's is written.
  calls_->start("keep best", central_, std::move(out), std::chrono::milliseconds(60000),
                [this, version](Result<InMessage> reply) {
                  std::string why;
                  if (!reply) {
                    why = reply.status().toString();
                  } else if (reply->kind() == BodyKind::CHECKPOINT_DONE) {
                    auto d = reply->header().getBody().getCheckpointDone();
                    if (d.getOk()) return best_.written(version, d.getPath().cStr());
                    why = d.getError().cStr();
                  } else if (reply->kind() == BodyKind::ERROR) {
                    why = reply->header().getBody().getError().getMessage().cStr();
                  } else {
                    why = "unexpected answer";
                  }
                  best_.notWritten(version, why);
                  GSGD_WARN("the best model (version " << version << ") was not kept: " << why);
                });
}

void Coordinator::evaluatorLost(const WorkerRecord& w, const std::string& why) {
  const Accuracy last = latestAccuracy();
  const std::string text =
      evaluators_.lost(w.id, w.name, why, run_log_.uptimeS(), {last.value, last.version});
  if (text.empty()) return;
  GSGD_WARN(text);
  event("evaluator_lost", text);
}

}  // namespace groupsgd::coordinator
