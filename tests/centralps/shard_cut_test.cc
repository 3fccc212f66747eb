// Consistent cuts across central shards: the manifest (written, read, checked against the
// run and the disk) and one central PS's side of a cut over a real socket (a delta held
// while frozen, taken up to the commit's marks, the cut file written).
#include "groupsgd/centralps/shard_cut.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/testbed/server_thread.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using namespace std::chrono_literals;
using groupsgd::testbed::ServerThread;
using groupsgd::testing::TempDir;

namespace {

// A cut of 2 shards over [0, 10) + [10, 16), with both files on disk.
ShardCut writtenCut(const std::string& dir) {
  ShardCut cut;
  cut.number = 3;
  cut.model = "mlp";
  cut.split = "tensors";
  cut.seed = 7;
  cut.shards = {{0, 10, 41, cutFileFor(0, 3)}, {10, 16, 40, cutFileFor(1, 3)}};
  cut.marks = {{0, 1000017}, {1, 2000005}};
  cut.run_samples = 123456;
  cut.pause_ms = 1.25;
  std::filesystem::create_directories(dir + "/shard-1");
  REQUIRE(
      writeCheckpointFile(dir + "/" + cut.shards[0].file, 41, std::vector<float>(10, 0.5f)).isOk());
  REQUIRE(
      writeCheckpointFile(dir + "/" + cut.shards[1].file, 40, std::vector<float>(6, 0.25f)).isOk());
  REQUIRE(writeShardCut(dir, cut).isOk());
  return cut;
}

const std::vector<ShardRange> kRanges = {{0, 10}, {10, 16}};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("shard cut manifest: written and read back whole") {
  TempDir dir;
  CHECK(readShardCut(dir.path()).status().code() == Code::kNotFound);
  const ShardCut cut = writtenCut(dir.path());
  CHECK(cutFileName(3) == "cut-00000000000000000003.gsgd");
  CHECK(cutFileFor(2, 3) == "shard-2/cut-00000000000000000003.gsgd");
  auto read = readShardCut(dir.path());
  REQUIRE_MESSAGE(read.isOk(), read.status().toString());
  CHECK(read->number == 3);
  CHECK(read->model == "mlp");
  CHECK(read->seed == 7);
  CHECK(read->run_samples == 123456);
  CHECK(read->pause_ms == doctest::Approx(1.25));
  CHECK(read->marks == cut.marks);
  REQUIRE(read->shards.size() == 2);
  CHECK(read->shards[1].version == 40);
  CHECK(read->shards[1].file == cut.shards[1].file);
  CHECK(checkShardCut(*read, "mlp", 7, "tensors", kRanges).isOk());
  auto p0 = shardCutFilePath(dir.path(), *read, 0);
  REQUIRE_MESSAGE(p0.isOk(), p0.status().toString());
  CHECK(*p0 == dir.path() + "/" + cut.shards[0].file);
  CHECK(shardCutFilePath(dir.path(), *read, 1).isOk());
}

TEST_CASE("shard cut manifest: an edited, torn or malformed manifest is refused as data loss") {
  TempDir dir;
  writtenCut(dir.path());
  const std::string path = dir.path() + "/" + kShardCutFile;
  const std::string good = slurp(path);
  SUBCASE("a version edited") {
    std::string edited = good;
    const auto at = edited.find("\"version\": 40");
    REQUIRE(at != std::string::npos);
    edited.replace(at, 13, "\"version\": 39");
    std::ofstream(path) << edited;
  }
  SUBCASE("torn") { std::ofstream(path) << good.substr(0, good.size() / 2); }
  SUBCASE("a field missing, crc recomputed by nobody") {
    std::string edited = good;
    const auto at = edited.find("\"run_samples\"");
    REQUIRE(at != std::string::npos);
    edited.replace(at, 13, "\"run_sampels\"");
    std::ofstream(path) << edited;
  }
  auto read = readShardCut(dir.path());
  REQUIRE_FALSE(read.isOk());
  CHECK(read.status().code() == Code::kDataLoss);
  CHECK(read.status().message().find(kShardCutFile) != std::string::npos);
  // Nothing was deleted: both shards' files are still there.
  CHECK(std::filesystem::exists(dir.path() + "/" + cutFileFor(0, 3)));
  CHECK(std::filesystem::exists(dir.path() + "/" + cutFileFor(1, 3)));
}

TEST_CASE("shard cut manifest: another run's cut, or a shard's file missing or another, is named") {
  TempDir dir;
  const ShardCut cut = writtenCut(dir.path());
  SUBCASE("another model, seed or split") {
    auto s = checkShardCut(cut, "cnn", 7, "tensors", kRanges);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("model mlp") != std::string::npos);
    CHECK_FALSE(checkShardCut(cut, "mlp", 8, "tensors", kRanges).isOk());
    CHECK_FALSE(checkShardCut(cut, "mlp", 7, "even", kRanges).isOk());
  }
  SUBCASE("another shard count") {
    auto s = checkShardCut(cut, "mlp", 7, "tensors", {{0, 5}, {5, 10}, {10, 16}});
    CHECK(s.message().find("has 2 shards, central_shards is 3") != std::string::npos);
  }
  SUBCASE("another range") {
    auto s = checkShardCut(cut, "mlp", 7, "tensors", {{0, 9}, {9, 16}});
    CHECK(s.message().find("shard 0 holds 0-10") != std::string::npos);
  }
  SUBCASE("a shard pointed at another cut's file") {
    ShardCut other = cut;
    other.shards[1].file = cutFileFor(1, 2);
    auto s = checkShardCut(other, "mlp", 7, "tensors", kRanges);
    CHECK(s.message().find("shard 1 names shard-1/cut-00000000000000000002.gsgd") !=
          std::string::npos);
  }
  SUBCASE("a shard's file missing") {
    std::filesystem::remove(dir.path() + "/" + cutFileFor(1, 3));
    auto p = shardCutFilePath(dir.path(), cut, 1);
    REQUIRE_FALSE(p.isOk());
    CHECK(p.status().code() == Code::kNotFound);
    CHECK(p.status().message().find("shard 1") != std::string::npos);
    CHECK(p.status().message().find("file missing") != std::string::npos);
    CHECK(shardCutFilePath(dir.path(), cut, 0).isOk());  // the other shard's is fine
  }
  SUBCASE("a shard's file of another version or size") {
    ShardCut other = cut;
    other.shards[1].version = 44;
    auto p = shardCutFilePath(dir.path(), other, 1);
    CHECK(p.status().message().find("holds version 40, the manifest says 44") != std::string::npos);
    other = cut;
    other.shards[1].end = 17;  // a 7-element range: the 6-element file does not fit
    CHECK_FALSE(shardCutFilePath(dir.path(), other, 1).isOk());
  }
}

TEST_CASE("shard cut files: pruning keeps the cut just written and the one the manifest names") {
  TempDir dir;
  for (std::uint64_t n : {1, 2, 3, 4}) {
    REQUIRE(writeCheckpointFile(dir.path() + "/" + cutFileName(n), n, std::vector<float>(4, 1.0f))
                .isOk());
  }
  REQUIRE(writeCheckpoint(dir.path(), 9, std::vector<float>(4, 1.0f), 3).isOk());
  CHECK(pruneCutFiles(dir.path(), 4, 2).empty());
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/" + cutFileName(1)));
  CHECK(std::filesystem::exists(dir.path() + "/" + cutFileName(2)));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/" + cutFileName(3)));
  CHECK(std::filesystem::exists(dir.path() + "/" + cutFileName(4)));
  CHECK(std::filesystem::exists(dir.path() + "/" + checkpointFileName(9)));  // not a cut's
  // A directory's loader never takes a cut file for its newest checkpoint.
  auto newest = loadNewestCheckpoint(dir.path(), 4);
  REQUIRE(newest.isOk());
  CHECK(newest->version == 9);
}

namespace {

constexpr auto kTimeout = 5000ms;

OutMessage cutRequest(std::uint64_t job, int phase) {
  OutMessage out(job, 0);
  out.header().getBody().initCheckpointRequest().setCutPhase(static_cast<std::uint8_t>(phase));
  return out;
}

OutMessage deltaPush(std::uint64_t job, std::uint32_t group, std::uint64_t seq,
                     std::uint64_t base) {
  OutMessage out(job, group);
  out.header().setModelVersion(base);
  auto body = out.header().getBody().initDeltaPush();
  body.setGroupId(group);
  body.setSamples(10);
  body.setSteps(1);
  body.setExchangeSeq(seq);
  out.addTensor(std::make_shared<const std::vector<float>>(16, 0.01f));
  return out;
}

}  // namespace

TEST_CASE("central server cut: a delta is held while frozen, taken up to the marks, then cut") {
  TempDir dir;
  zmq::context_t ctx{1};
  CentralConfig cfg;
  cfg.param_count = 16;
  cfg.checkpoint_dir = dir.path();
  cfg.checkpoint_interval_s = 0;
  auto made = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
  REQUIRE(made.isOk());
  const std::string ep = (*made)->endpoint();
  ServerThread<CentralServer> server(std::move(*made));
  const std::uint64_t job = cfg.limits.job_id;
  RpcClient head(ctx, ep, cfg.limits), group(ctx, ep, cfg.limits);
  // Group 1's exchange 5 is merged; the marks say so.
  auto r = group.call(deltaPush(job, 1, 5, 0), kTimeout);
  REQUIRE(r.isOk());
  auto frozen = head.call(cutRequest(job, 1), kTimeout);
  REQUIRE_MESSAGE(frozen.isOk(), frozen.status().toString());
  auto f = frozen->header().getBody().getCheckpointDone();
  CHECK(f.getVersion() == 1);
  REQUIRE(f.getCutMarks().size() == 1);
  CHECK(f.getCutMarks()[0].getSeq() == 5);
  // A second freeze while one is under way is refused.
  CHECK_FALSE(head.call(cutRequest(job, 1), kTimeout).isOk());
  // Exchange 6 arrives while frozen: held, unanswered.
  REQUIRE(group.send(deltaPush(job, 1, 6, 1).toFrames()).isOk());
  CHECK_FALSE(group.receive(std::chrono::steady_clock::now() + 300ms).isOk());
  // (the timeout reset the group's socket: its answer will be dropped, the delta is held)
  // Commit at mark 6 (another shard took exchange 6 already): 6 is merged, then cut.
  OutMessage commit(job, 0);
  auto req = commit.header().getBody().initCheckpointRequest();
  req.setCutPhase(2);
  req.setCutNumber(1);
  auto marks = req.initCutMarks(1);
  marks[0].setGroupId(1);
  marks[0].setSeq(6);
  auto done = head.call(std::move(commit), kTimeout);
  REQUIRE_MESSAGE(done.isOk(), done.status().toString());
  auto d = done->header().getBody().getCheckpointDone();
  CHECK(d.getOk());
  CHECK(d.getVersion() == 2);
  CHECK(d.getRunSamples() == 20);
  CHECK(d.getPauseMs() >= 250.0f);  // frozen through the group's 300 ms wait
  REQUIRE(d.getCutMarks().size() == 1);
  CHECK(d.getCutMarks()[0].getSeq() == 6);
  auto file = readCheckpointFile(dir.path() + "/" + cutFileName(1), 16);
  REQUIRE_MESSAGE(file.isOk(), file.status().toString());
  CHECK(file->version == 2);
  // Unfrozen: the next exchange is answered at once.
  auto next = group.call(deltaPush(job, 1, 7, 2), kTimeout);
  REQUIRE(next.isOk());
  CHECK(next->header().getBody().getModelReply().getApplied());
  // A restore (a restarted head's) brings the model back to the cut's version and marks.
  OutMessage restore(job, 0);
  auto back = restore.header().getBody().initCheckpointRequest();
  back.setCutPhase(4);
  back.setCutNumber(1);
  auto cut_marks = back.initCutMarks(1);
  cut_marks[0].setGroupId(1);
  cut_marks[0].setSeq(6);
  auto restored = head.call(std::move(restore), kTimeout);
  REQUIRE_MESSAGE(restored.isOk(), restored.status().toString());
  CHECK(restored->header().getBody().getCheckpointDone().getVersion() == 2);
  OutMessage fetch(job, 0);
  fetch.header().getBody().initFetch();
  auto model = group.call(std::move(fetch), kTimeout);
  REQUIRE(model.isOk());
  CHECK(model->header().getModelVersion() == 2);  // not 3: the cut's
  OutMessage missing(job, 0);
  auto gone = missing.header().getBody().initCheckpointRequest();
  gone.setCutPhase(4);
  gone.setCutNumber(9);
  auto refused = head.call(std::move(missing), kTimeout);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.status().message().find("cannot return to shard cut 9") != std::string::npos);
  // A commit without a freeze is refused; a release is always answered.
  OutMessage stray(job, 0);
  stray.header().getBody().initCheckpointRequest().setCutPhase(2);
  CHECK_FALSE(head.call(std::move(stray), kTimeout).isOk());
  CHECK(head.call(cutRequest(job, 3), kTimeout).isOk());
}

TEST_CASE("central server cut: a freeze never committed is released within 5 s") {
  TempDir dir;
  zmq::context_t ctx{1};
  CentralConfig cfg;
  cfg.param_count = 16;
  cfg.checkpoint_dir = dir.path();
  cfg.checkpoint_interval_s = 0;
  auto made = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
  REQUIRE(made.isOk());
  const std::string ep = (*made)->endpoint();
  ServerThread<CentralServer> server(std::move(*made));
  RpcClient head(ctx, ep, cfg.limits), group(ctx, ep, cfg.limits);
  REQUIRE(head.call(cutRequest(cfg.limits.job_id, 1), kTimeout).isOk());
  const auto sent = std::chrono::steady_clock::now();
  auto r = group.call(deltaPush(cfg.limits.job_id, 1, 1, 0), 10000ms);
  REQUIRE(r.isOk());
  const auto held = std::chrono::steady_clock::now() - sent;
  CHECK(held >= 4000ms);  // held until the release...
  CHECK(held < 8000ms);
  CHECK(r->header().getBody().getModelReply().getApplied());  // ...then merged
}
