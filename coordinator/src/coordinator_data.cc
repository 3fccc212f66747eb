// data_allocation ranges (docs/protocol.md, "Sample ranges"): trainers claim ranges of
// each epoch's permutation from the coordinator's epoch ledger as they go, acknowledging
// what they trained with each claim; ranges of a trainer gone without saying are issued
// again.
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/coordinator/ledger_record.h"

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
    publishState();
    return refuse(from, failedPrecondition("worker " + std::to_string(w->id) + " is " +
                                           workerStateName(w->state) + ": register again"));
  }
  if (active) w->last_seen = Clock::now();
  auto granted = data_ledger_.claim(w->id, c.getDatasetSize(), acks, c.getDone());
  if (!granted) return refuse(from, granted.status());
  publishState();
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
    publishState();
    GSGD_INFO("worker " << w.id << " " << why << ": its " << n
                        << " unacknowledged samples are issued again");
  }
}

void Coordinator::resumeLedger() {
  const HeadStart& start = head_.start();
  if (!cfg_.data_ranges || cfg_.checkpoint_dir.empty() || start.resumed_from.empty()) return;
  auto record = ledgerAt(cfg_.checkpoint_dir, start.resumed_version);
  auto ledger = record ? EpochLedger::fromState(record->ledger, data_ledger_.chunk())
                       : Result<EpochLedger>(record.status());
  if (!ledger) {
    // A checkpoint of an older head (no record) or a damaged record: the epochs start over.
    GSGD_WARN("epoch ledger not resumed (" << ledger.status().toString()
                                           << "): epochs start again from 0");
    ledger_resumed_ = {{"error", ledger.status().toString()}};
    return;
  }
  std::uint64_t acknowledged = 0, held = 0;
  for (const auto& e : ledger->epochs()) acknowledged += e.acknowledged;
  for (const auto& h : record->ledger["held"])
    held += h[2].get<std::uint64_t>() - h[1].get<std::uint64_t>();
  data_ledger_ = std::move(*ledger);
  ledger_recorded_version_ = record->version;
  ledger_resumed_ = {
      {"version", record->version}, {"acknowledged", acknowledged}, {"held_reissued", held}};
  GSGD_INFO("epoch ledger resumed from checkpoint version "
            << record->version << ": " << acknowledged << " positions acknowledged, " << held
            << " held by the previous head's trainers issued again");
}

void Coordinator::recordLedgerAt(std::uint64_t checkpoint_version) {
  if (!cfg_.data_ranges || cfg_.checkpoint_dir.empty() ||
      checkpoint_version <= ledger_recorded_version_) {
    return;
  }
  ledger_recorded_version_ = checkpoint_version;
  // A small file, written on this thread like the head's state file.
  if (Status s = recordLedger(cfg_.checkpoint_dir, checkpoint_version, data_ledger_.state(),
                              cfg_.checkpoint_keep);
      !s) {
    GSGD_WARN("checkpoint version " << checkpoint_version
                                    << ": its epoch ledger not recorded: " << s.toString());
  }
}

}  // namespace groupsgd::coordinator
