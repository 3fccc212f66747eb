// data_allocation ranges (docs/protocol.md, "Sample ranges"): trainers claim ranges of
// each epoch's permutation from the coordinator's epoch ledger as they go, acknowledging
// what they trained with each claim; ranges of a trainer gone without saying are issued
// again.
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

void Coordinator::onDataClaim(const zmq::message_t& from, const InMessage& msg,
                              const std::string& key) {
  auto h = msg.header();
  if (!cfg_.data_ranges) {
    return refuse(from, failedPrecondition("this run's data_allocation is shards: trainers "
                                           "sample their own shard and claim no ranges"));
  }
  WorkerRecord* w = registry_.find(h.getSenderId());
  if (w == nullptr || w->role != WorkerRole::kTrainer) {
    return refuse(from, notFound("no trainer " + std::to_string(h.getSenderId())));
  }
  if (!ownsId(from, *w, key)) return;
  auto c = h.getBody().getDataClaim();
  std::vector<LedgerRange> acks;
  for (auto r : c.getAcks()) acks.push_back({r.getEpoch(), r.getBegin(), r.getEnd()});
  // Declared dead (or quarantined) meanwhile: its ranges went to others. Its
  // acknowledgements are stale (the ledger counts them); it is told to register again
  // unless it is stopping anyway.
  const bool active = w->state == WorkerState::kActive && (h.getEpoch() >> 32) == (epoch_ >> 32);
  if (!active && !c.getDone()) {
    (void)data_ledger_.claim(w->id, c.getDatasetSize(), acks, true);
    return refuse(from, failedPrecondition("worker " + std::to_string(w->id) + " is " +
                                           workerStateName(w->state) + ": register again"));
  }
  if (active) w->last_seen = Clock::now();
  auto granted = data_ledger_.claim(w->id, c.getDatasetSize(), acks, c.getDone());
  if (!granted) return refuse(from, granted.status());
  OutMessage out(cfg_.job_id, 0);
  out.header().setEpoch(h.getEpoch());
  auto grant = out.header().getBody().initDataGrant();
  auto list = grant.initRanges(granted->has_value() ? 1 : 0);
  if (granted->has_value()) {
    list[0].setEpoch((*granted)->epoch);
    list[0].setBegin((*granted)->begin);
    list[0].setEnd((*granted)->end);
  }
  (void)replyTo(sock_, from, std::move(out));
}

void Coordinator::releaseData(const WorkerRecord& w, const char* why) {
  if (!cfg_.data_ranges) return;
  if (const std::uint64_t n = data_ledger_.release(w.id); n > 0) {
    GSGD_INFO("worker " << w.id << " " << why << ": its " << n
                        << " unacknowledged samples are issued again");
  }
}

}  // namespace groupsgd::coordinator
