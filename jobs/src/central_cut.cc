#include "groupsgd/jobs/central_cut.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "groupsgd/client/client.h"
#include "groupsgd/common/log.h"

namespace groupsgd::jobs {
namespace {

using centralps::ExchangeMarks;

constexpr auto kFreezeTimeout = std::chrono::milliseconds(2000);
// A commit waits for deltas still on the wire (the shard gives up after 5 s) and the write.
constexpr auto kCommitTimeout = std::chrono::seconds(30);

ExchangeMarks marksOf(capnp::List<proto::ExchangeMark>::Reader list) {
  ExchangeMarks marks;
  for (auto m : list) marks[m.getGroupId()] = m.getSeq();
  return marks;
}

// A cut answer's CheckpointDone, or why there is none.
Result<proto::CheckpointDone::Reader> doneOf(const InMessage& msg) {
  if (msg.kind() == BodyKind::ERROR) return statusFromError(msg);
  if (msg.kind() != BodyKind::CHECKPOINT_DONE) {
    return invalidArgument(std::string("unexpected answer '") + bodyKindName(msg.kind()) + "'");
  }
  auto d = msg.header().getBody().getCheckpointDone();
  if (!d.getOk()) return unavailable(d.getError().cStr());
  return d;
}

}  // namespace

CentralCutTaker::CentralCutTaker(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                                 const CurveKeys& keys, std::vector<std::string> endpoints,
                                 std::vector<centralps::ShardRange> ranges, std::uint64_t last_cut,
                                 bool fresh_marks)
    : cfg_(cfg),
      ranges_(std::move(ranges)),
      last_cut_(last_cut),
      next_cut_(last_cut + 1),
      fresh_marks_(fresh_marks) {
  MessageLimits limits;
  limits.job_id = cfg.job_id;
  for (const auto& ep : endpoints) shards_.emplace_back(ctx, ep, limits, clientSocketOptions(keys));
}

Result<InMessage> CentralCutTaker::callShard(std::size_t k, int phase,
                                             std::chrono::milliseconds timeout) {
  OutMessage out(cfg_.job_id, 0);
  out.header().getBody().initCheckpointRequest().setCutPhase(static_cast<std::uint8_t>(phase));
  return shards_[k].callRaw(std::move(out), timeout);
}

void CentralCutTaker::releaseAll() {
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    shards_[k].reset();  // an answer still coming must not be taken for the release's
    auto r = callShard(k, 3, kFreezeTimeout);
    if (!r)
      GSGD_WARN("cut: could not release central shard " << k << ": " << r.status().toString());
  }
}

Result<centralps::ShardCut> CentralCutTaker::takeCut() {
  const auto started = std::chrono::steady_clock::now();
  std::uint64_t number = next_cut_;  // or higher, once the shards said which cuts they have
  waiting_ = false;
  const auto fail = [&](std::size_t k, const std::string& step, const Status& why) {
    releaseAll();
    ++failed_;
    return Status(why.code(), "cut " + std::to_string(number) + ": central shard " +
                                  std::to_string(k) + " " + step + ": " + why.message());
  };
  // 1. Freeze every shard; the highest mark per group is where the cut lies.
  ExchangeMarks target, shard0;
  std::uint64_t newest = 0;  // the newest cut any shard wrote (an old head's, after a takeover)
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    auto answer = callShard(k, 1, kFreezeTimeout);
    if (!answer) return fail(k, "freeze", answer.status());
    auto done = doneOf(*answer);
    if (!done) return fail(k, "freeze", done.status());
    const ExchangeMarks marks = marksOf(done->getCutMarks());
    if (k == 0) shard0 = marks;
    newest = std::max<std::uint64_t>(newest, done->getNewestCut());
    for (const auto& [group, seq] : marks) target[group] = std::max(target[group], seq);
  }
  // A promoted head's shard 0 knows the exchanges since the takeover only. A group the
  // others know and it does not has not exchanged with this head yet: its next exchange
  // (from a group PS of this head, numbered above all before) would be held beyond the
  // old mark, which shard 0 could never reach. Release at once and try again later.
  if (fresh_marks_) {
    for (const auto& [group, seq] : target) {
      if (shard0.count(group) != 0) continue;
      releaseAll();
      waiting_ = true;
      return unavailable("cut: group " + std::to_string(group) +
                         " has not exchanged with this head yet (shard 0 of a promoted head "
                         "starts without exchange marks)");
    }
  }
  // Never a number a shard already has a file of (a promoted head goes on above its old
  // head's cuts, whose files the shards keep).
  number = std::max(next_cut_, newest + 1);
  next_cut_ = number + 1;
  const std::uint64_t keep = last_cut_ != 0 ? last_cut_ : newest;
  // 2. Commit on every shard at once; each answers when its file is durable.
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    OutMessage out(cfg_.job_id, 0);
    auto req = out.header().getBody().initCheckpointRequest();
    req.setCutPhase(2);
    req.setCutNumber(number);
    req.setCutKeep(keep);
    auto list = req.initCutMarks(static_cast<unsigned>(target.size()));
    std::size_t i = 0;
    for (const auto& [group, seq] : target) {
      list[i].setGroupId(group);
      list[i].setSeq(seq);
      ++i;
    }
    if (Status s = shards_[k].send(std::move(out).toFrames()); !s) return fail(k, "commit", s);
  }
  centralps::ShardCut cut;
  cut.number = number;
  cut.model = kernels::modelKindName(cfg_.model);
  cut.split = cfg_.central_shard_split;
  cut.seed = cfg_.seed;
  const auto deadline = std::chrono::steady_clock::now() + kCommitTimeout;
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    auto answer = shards_[k].receive(deadline);
    if (!answer) return fail(k, "commit", answer.status());
    auto done = doneOf(*answer);
    if (!done) return fail(k, "commit", done.status());
    const ExchangeMarks marks = marksOf(done->getCutMarks());
    if (k == 0) {
      cut.marks = marks;
      cut.run_samples = done->getRunSamples();
    } else if (marks != cut.marks) {
      // Never happens while every group sends every shard the same exchanges; a manifest
      // naming files with different exchanges in them would be worse than none.
      return fail(k, "commit", failedPrecondition("its marks differ from shard 0's"));
    }
    cut.pause_ms = std::max(cut.pause_ms, static_cast<double>(done->getPauseMs()));
    cut.shards.push_back(
        {ranges_[k].begin, ranges_[k].end, done->getVersion(), centralps::cutFileFor(k, number)});
  }
  // 3. The manifest names the new cut: from now on a restart loads it.
  if (Status s = centralps::writeShardCut(cfg_.checkpoint_dir, cut); !s) {
    ++failed_;
    return Status(s.code(), "cut " + std::to_string(number) + ": manifest: " + s.message());
  }
  last_cut_ = number;
  fresh_marks_ = false;  // every group's mark is in shard 0 now
  pauses_ms_.push_back(cut.pause_ms);
  std::string versions;
  for (const auto& s : cut.shards)
    versions += (versions.empty() ? "" : ",") + std::to_string(s.version);
  const double whole_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  GSGD_INFO("shard cut " << number << " taken: versions " << versions << ", " << cut.marks.size()
                         << " groups' marks equal, deltas held at most " << cut.pause_ms
                         << " ms, the whole cut " << whole_ms << " ms");
  return cut;
}

void CentralCutTaker::run(const std::atomic<bool>& stop) {
  log::setThreadTag("cut");
  const auto every =
      std::chrono::milliseconds(static_cast<std::int64_t>(cfg_.central_cut_interval_s * 1000));
  auto next = std::chrono::steady_clock::now() + every;
  while (!stop.load()) {
    if (std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    auto cut = takeCut();
    if (!cut && waiting_) {  // not a failure: the groups have not all exchanged yet
      if (waits_logged_++ == 0) GSGD_INFO(cut.status().message() << ": waiting");
      next = std::chrono::steady_clock::now() + every;
      continue;
    }
    // A cut that keeps failing (a stalled group's marks never agree) is tried less often:
    // each try holds the shards' deltas for up to 5 s.
    failed_in_a_row_ = cut ? 0 : std::min<std::size_t>(failed_in_a_row_ + 1, 6);
    if (!cut) {
      GSGD_WARN(cut.status().toString()
                << " (the manifest still names cut " << last_cut_ << "; next try in "
                << (every * (1u << failed_in_a_row_)).count() / 1000.0 << " s)");
    }
    next = std::chrono::steady_clock::now() + every * (1u << failed_in_a_row_);
  }
  std::vector<double> sorted = pauses_ms_;
  std::sort(sorted.begin(), sorted.end());
  GSGD_INFO("shard cuts: " << sorted.size() << " taken, " << failed_ << " failed; deltas held "
                           << (sorted.empty() ? 0.0 : sorted[sorted.size() / 2]) << " ms median, "
                           << (sorted.empty() ? 0.0 : sorted.back()) << " ms at most");
}

Result<std::optional<centralps::CentralConfig::CutResume>> cutResumeFor(
    const daemon::DaemonConfig& cfg, const std::vector<centralps::ShardRange>& ranges,
    std::size_t k, centralps::ShardCut* cut_out) {
  if (cfg.checkpoint_dir.empty()) return std::optional<centralps::CentralConfig::CutResume>();
  const std::string who = "central shard " + std::to_string(k) + " cannot resume from " +
                          cfg.checkpoint_dir + "/" + centralps::kShardCutFile + ": ";
  auto cut = centralps::readShardCut(cfg.checkpoint_dir);
  if (!cut) {
    if (cut.status().code() == Code::kNotFound) {
      return std::optional<centralps::CentralConfig::CutResume>();
    }
    return Status(cut.status().code(), who + cut.status().message());
  }
  if (Status s = centralps::checkShardCut(*cut, kernels::modelKindName(cfg.model), cfg.seed,
                                          cfg.central_shard_split, ranges);
      !s) {
    return Status(s.code(), who + s.message() + " (nothing was deleted)");
  }
  auto path = centralps::shardCutFilePath(cfg.checkpoint_dir, *cut, k);
  if (!path) return Status(path.status().code(), who + path.status().message());
  centralps::CentralConfig::CutResume resume{*path, cut->number, cut->run_samples, cut->marks};
  if (cut_out != nullptr) *cut_out = std::move(*cut);
  return std::optional<centralps::CentralConfig::CutResume>(std::move(resume));
}

Status restoreShardsToCut(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                          const CurveKeys& keys, const std::vector<std::string>& endpoints,
                          const centralps::ShardCut& cut) {
  MessageLimits limits;
  limits.job_id = cfg.job_id;
  for (std::size_t k = 1; k < cut.shards.size() && k <= endpoints.size(); ++k) {
    const std::string who = "central shard " + std::to_string(k) + " at " + endpoints[k - 1];
    RpcClient rpc(ctx, endpoints[k - 1], limits, clientSocketOptions(keys));
    OutMessage out(cfg.job_id, 0);
    auto req = out.header().getBody().initCheckpointRequest();
    req.setCutPhase(4);
    req.setCutNumber(cut.number);
    auto list = req.initCutMarks(static_cast<unsigned>(cut.marks.size()));
    std::size_t i = 0;
    for (const auto& [group, seq] : cut.marks) {
      list[i].setGroupId(group);
      list[i].setSeq(seq);
      ++i;
    }
    auto answer = rpc.callRaw(std::move(out), std::chrono::milliseconds(30000));
    if (!answer) {
      return Status(answer.status().code(), who + ": " + answer.status().toString());
    }
    auto done = doneOf(*answer);
    if (!done) {
      return Status(done.status().code(),
                    who + ": " + done.status().message() + " (nothing was deleted)");
    }
    if (done->getVersion() != cut.shards[k].version) {
      return failedPrecondition(who + " holds version " + std::to_string(done->getVersion()) +
                                " in its file of shard cut " + std::to_string(cut.number) +
                                ", the manifest names " + std::to_string(cut.shards[k].version));
    }
    GSGD_INFO(who << " is back at shard cut " << cut.number << " (version " << done->getVersion()
                  << ")");
  }
  return Status::ok();
}

}  // namespace groupsgd::jobs
