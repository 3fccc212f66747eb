#include "groupsgd/coordinator/epoch_ledger.h"

#include <algorithm>

namespace groupsgd::coordinator {

EpochLedger::EpochLedger(std::uint64_t chunk) : chunk_(std::max<std::uint64_t>(1, chunk)) {}

Result<std::optional<LedgerRange>> EpochLedger::claim(std::uint64_t worker,
                                                      std::uint64_t dataset_size,
                                                      const std::vector<LedgerRange>& acks,
                                                      bool done) {
  if (dataset_size == 0) return invalidArgument("a data claim must state its training set size");
  if (size_ == 0) size_ = dataset_size;
  if (dataset_size != size_) {
    return invalidArgument("data claim for a training set of " + std::to_string(dataset_size) +
                           " samples; this run's trainers sample " + std::to_string(size_));
  }
  auto& held = held_[worker];
  for (const LedgerRange& a : acks) {
    auto it = std::find_if(held.begin(), held.end(), [&](const LedgerRange& h) {
      return h.epoch == a.epoch && h.begin == a.begin && a.end > a.begin && a.end <= h.end;
    });
    if (it == held.end()) {
      ++stale_acks_;
      continue;
    }
    epochs_[a.epoch].acknowledged += a.size();
    if (a.end == it->end) {
      held.erase(it);
    } else {
      it->begin = a.end;  // the rest is still held
    }
  }
  if (done) {
    for (const LedgerRange& h : held) {
      epochs_[h.epoch].returned += h.size();
      giveBack(h);
    }
    held_.erase(worker);
    return std::optional<LedgerRange>();
  }
  std::optional<LedgerRange> r = next();
  if (r) held.push_back(*r);
  return r;
}

std::optional<LedgerRange> EpochLedger::next() {
  if (!reissue_.empty()) {
    LedgerRange r = *reissue_.begin();
    reissue_.erase(reissue_.begin());
    return r;
  }
  if (size_ == 0) return std::nullopt;
  if (cut_pos_ == size_) {  // epoch rollover: every position of this one is out
    ++cut_epoch_;
    cut_pos_ = 0;
  }
  LedgerRange r{cut_epoch_, cut_pos_, std::min(size_, cut_pos_ + chunk_)};
  cut_pos_ = r.end;
  epochs_[r.epoch].epoch = r.epoch;
  return r;
}

void EpochLedger::giveBack(const LedgerRange& r) { reissue_.insert(r); }

std::uint64_t EpochLedger::release(std::uint64_t worker) {
  auto it = held_.find(worker);
  if (it == held_.end()) return 0;
  std::uint64_t n = 0;
  for (const LedgerRange& h : it->second) {
    epochs_[h.epoch].duplicates += h.size();
    n += h.size();
    giveBack(h);
  }
  held_.erase(it);
  return n;
}

std::uint64_t EpochLedger::heldBy(std::uint64_t worker) const {
  auto it = held_.find(worker);
  if (it == held_.end()) return 0;
  std::uint64_t n = 0;
  for (const LedgerRange& h : it->second) n += h.size();
  return n;
}

std::vector<EpochCoverage> EpochLedger::epochs() const {
  std::vector<EpochCoverage> out;
  for (const auto& [e, c] : epochs_) out.push_back(c);
  return out;
}

nlohmann::json EpochLedger::summary() const {
  nlohmann::json list = nlohmann::json::array();
  for (const EpochCoverage& c : epochs()) {
    list.push_back(
        {{"epoch", c.epoch},
         {"samples", size_},
         {"acknowledged", c.acknowledged},
         {"coverage",
          size_ ? static_cast<double>(c.acknowledged) / static_cast<double>(size_) : 0.0},
         {"duplicates", c.duplicates},
         {"returned", c.returned},
         {"finished", size_ > 0 && c.acknowledged == size_}});
  }
  return list;
}

namespace {

nlohmann::json rangeJson(const LedgerRange& r) { return {r.epoch, r.begin, r.end}; }

bool readRange(const nlohmann::json& j, std::uint64_t size, LedgerRange* r) {
  if (!j.is_array() || j.size() != 3) return false;
  for (const auto& x : j)
    if (!x.is_number_unsigned()) return false;
  *r = {j[0].get<std::uint64_t>(), j[1].get<std::uint64_t>(), j[2].get<std::uint64_t>()};
  return r->begin < r->end && r->end <= size;
}

}  // namespace

nlohmann::json EpochLedger::state() const {
  nlohmann::json reissue = nlohmann::json::array(), held = nlohmann::json::array(),
                 epochs = nlohmann::json::array();
  for (const LedgerRange& r : reissue_) reissue.push_back(rangeJson(r));
  for (const auto& [worker, ranges] : held_) {
    for (const LedgerRange& r : ranges) held.push_back(rangeJson(r));
  }
  for (const auto& [e, c] : epochs_) {
    epochs.push_back({c.epoch, c.acknowledged, c.duplicates, c.returned});
  }
  return {{"samples", size_},
          {"cut_epoch", cut_epoch_},
          {"cut_pos", cut_pos_},
          {"reissue", reissue},
          {"held", held},
          {"epochs", epochs},
          {"stale_acks", stale_acks_}};
}

Result<EpochLedger> EpochLedger::fromState(const nlohmann::json& s, std::uint64_t chunk) {
  const auto bad = [](const std::string& what) { return dataLoss("epoch ledger state: " + what); };
  for (const char* k : {"samples", "cut_epoch", "cut_pos", "stale_acks"}) {
    if (!s.contains(k) || !s[k].is_number_unsigned()) return bad(std::string(k) + " missing");
  }
  for (const char* k : {"reissue", "held", "epochs"}) {
    if (!s.contains(k) || !s[k].is_array()) return bad(std::string(k) + " missing");
  }
  EpochLedger l(chunk);
  l.size_ = s["samples"].get<std::uint64_t>();
  l.cut_epoch_ = s["cut_epoch"].get<std::uint64_t>();
  l.cut_pos_ = s["cut_pos"].get<std::uint64_t>();
  l.stale_acks_ = s["stale_acks"].get<std::uint64_t>();
  if (l.cut_pos_ > l.size_) return bad("cut_pos beyond the training set");
  for (const auto& e : s["epochs"]) {
    if (!e.is_array() || e.size() != 4) return bad("an epoch is not [epoch, acked, dup, ret]");
    for (const auto& x : e)
      if (!x.is_number_unsigned()) return bad("an epoch count is not a count");
    EpochCoverage c{e[0].get<std::uint64_t>(), e[1].get<std::uint64_t>(), e[2].get<std::uint64_t>(),
                    e[3].get<std::uint64_t>()};
    if (c.acknowledged > l.size_ || c.epoch > l.cut_epoch_) return bad("an epoch out of range");
    l.epochs_[c.epoch] = c;
  }
  LedgerRange r;
  for (const auto& j : s["reissue"]) {
    if (!readRange(j, l.size_, &r)) return bad("a range to issue again is malformed");
    l.reissue_.insert(r);
  }
  // The previous head's trainers held these: they may have trained them without saying.
  for (const auto& j : s["held"]) {
    if (!readRange(j, l.size_, &r)) return bad("a held range is malformed");
    l.epochs_[r.epoch].epoch = r.epoch;
    l.epochs_[r.epoch].duplicates += r.size();
    l.reissue_.insert(r);
  }
  return l;
}

}  // namespace groupsgd::coordinator
