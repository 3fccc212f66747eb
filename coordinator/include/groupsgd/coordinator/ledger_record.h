// The epoch ledger kept beside the checkpoints (DIR/epoch_ledger.json), so a restarted head
// goes on with the epoch's coverage where the checkpoint was instead of starting epoch 0
// again (docs/seeds.md, "Coverage across a head restart"). Like run_samples.json a file of
// its own, keyed by checkpoint version: the ledger lives in the coordinator, the checkpoint
// is the central PS's. Written when the coordinator sees a new durable checkpoint (so the
// ledger is a little ahead of that model, as it always is of the central model: coverage
// counts what trainers trained). Format {"format": 1, "checkpoints": [{"version": V,
// "ledger": EpochLedger::state()}]}; a directory without the file (older heads) resumes
// with a fresh ledger.
// Thread rule: plain functions of their arguments; small blocking disk writes.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"

namespace groupsgd::coordinator {

inline constexpr char kEpochLedgerFile[] = "epoch_ledger.json";
inline constexpr std::uint32_t kEpochLedgerFormat = 1;

// Records `ledger` at checkpoint `version` in dir's file (atomically replaced), keeping the
// newest keep_last records (>= 1).
Status recordLedger(const std::string& dir, std::uint64_t version, const nlohmann::json& ledger,
                    std::size_t keep_last);

struct LedgerAt {
  nlohmann::json ledger;
  std::uint64_t version = 0;  // the record's version: `version` asked, or the newest older
};

// The record for checkpoint `version`, or else the newest at an older one. NotFound when
// there is no file or no such record; DataLoss when the file is unreadable or of a newer
// format.
Result<LedgerAt> ledgerAt(const std::string& dir, std::uint64_t version);

}  // namespace groupsgd::coordinator
