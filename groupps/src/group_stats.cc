#include "groupsgd/groupps/group_stats.h"

namespace groupsgd::groupps {

void toProto(const GroupStats& s, proto::GroupStats::Builder out) {
  out.setGroupId(s.group_id);
  out.setStep(s.step);
  out.setSamplesReceived(s.samples_received);
  out.setSamplesDropped(s.samples_dropped);
  out.setSamplesPending(s.samples_pending);
  out.setSamplesInFlight(s.samples_in_flight);
  out.setLateGradients(s.late_gradients);
  out.setBadMessages(s.bad_messages);
  out.setExchanges(s.exchanges);
  out.setRefusedExchanges(s.refused_exchanges);
  out.setLastLoss(s.last_loss);
  out.setMembers(s.members);
  auto ack = out.initAcknowledged(static_cast<unsigned>(s.acknowledged.size()));
  unsigned i = 0;
  for (const auto& [worker, samples] : s.acknowledged) {
    ack[i].setWorkerId(worker);
    ack[i].setSamples(samples);
    ++i;
  }
  out.setIdentityRefused(s.identity_refused);
  auto q = out.initQuarantined(static_cast<unsigned>(s.quarantined.size()));
  i = 0;
  for (std::uint64_t worker : s.quarantined) q.set(i++, worker);
  out.setReplayedPushes(s.replayed_pushes);
  out.setQuarantineRefusals(s.quarantine_refusals);
  out.setBadParts(s.bad_parts);
  out.setPushesWaited(s.pushes_waited);
  out.setStepsCut(s.steps_cut);
  out.setLearningRate(s.learning_rate);
  out.setRunSamples(s.run_samples);
}

GroupStats fromProto(proto::GroupStats::Reader in) {
  GroupStats s;
  s.group_id = in.getGroupId();
  s.step = in.getStep();
  s.samples_received = in.getSamplesReceived();
  s.samples_dropped = in.getSamplesDropped();
  s.samples_pending = in.getSamplesPending();
  s.samples_in_flight = in.getSamplesInFlight();
  s.late_gradients = in.getLateGradients();
  s.bad_messages = in.getBadMessages();
  s.exchanges = in.getExchanges();
  s.refused_exchanges = in.getRefusedExchanges();
  s.last_loss = in.getLastLoss();
  s.members = in.getMembers();
  // A worker listed twice counts twice (the daemon summed them before this type).
  for (auto a : in.getAcknowledged()) s.acknowledged[a.getWorkerId()] += a.getSamples();
  s.identity_refused = in.getIdentityRefused();
  for (std::uint64_t worker : in.getQuarantined()) s.quarantined.push_back(worker);
  s.replayed_pushes = in.getReplayedPushes();
  s.quarantine_refusals = in.getQuarantineRefusals();
  s.bad_parts = in.getBadParts();
  s.pushes_waited = in.getPushesWaited();
  s.steps_cut = in.getStepsCut();
  s.learning_rate = in.getLearningRate();
  s.run_samples = in.getRunSamples();
  return s;
}

}  // namespace groupsgd::groupps
