// The standby head's replication stream: the encoding round-trips, bad input (truncated,
// mis-sized, unknown) is refused with a clear error, and a replica advanced by updates
// equals the primary's store bit for bit, refusing out-of-order or foreign-term updates
// without changing its state.
#include "groupsgd/centralps/replication.h"

#include <doctest/doctest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "centralps_test_util.h"
#include "groupsgd/centralps/central_store.h"
#include "groupsgd/centralps/standby_replica.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using groupsgd::centralps::testing::bitIdentical;
using groupsgd::centralps::testing::randomVector;
using kernels::OptimizerConfig;
using kernels::OptimizerKind;

namespace {

const OptimizerConfig kAdam{OptimizerKind::kAdam, 0.01f, 0.0f, 0.0f};

std::vector<float> paramsOf(const CentralStore& s) {
  std::vector<float> out(s.paramCount());
  s.snapshotInto(out);
  return out;
}

ReplicationMessage snapshotOf(const CentralStore& s, std::uint64_t term) {
  ReplicationMessage m;
  m.kind = ReplicationKind::kSnapshot;
  m.term = term;
  m.version = s.version();
  m.run_samples = 640;
  m.mean_samples = 32;
  m.param_count = s.paramCount();
  m.tensor = paramsOf(s);
  m.optimizer = s.optimizerState();
  m.text = "coordinator";
  return m;
}

ReplicationMessage updateOf(std::uint64_t term, std::uint64_t version, std::vector<float> delta,
                            float weight) {
  ReplicationMessage m;
  m.kind = ReplicationKind::kUpdate;
  m.term = term;
  m.version = version;
  m.samples = 64;
  m.run_samples = 640 + 64 * version;
  m.tau = 1;
  m.weight = weight;
  m.param_count = delta.size();
  m.tensor = std::move(delta);
  return m;
}

// A copy of frames (zmq messages move only).
std::vector<zmq::message_t> copyOf(const std::vector<zmq::message_t>& frames) {
  std::vector<zmq::message_t> out;
  for (const auto& f : frames) out.emplace_back(f.data(), f.size());
  return out;
}

}  // namespace

TEST_CASE("replication: a snapshot and an update round-trip through the encoding") {
  std::mt19937 rng(3);
  CentralStore store(randomVector(1000, rng), kAdam, 3, {});
  REQUIRE(store.applyDelta(randomVector(1000, rng, 0.1f), 0.5f));
  const ReplicationMessage snap = snapshotOf(store, 7);
  auto back = decodeReplication(encodeReplication(snap));
  REQUIRE(back);
  CHECK(back->kind == ReplicationKind::kSnapshot);
  CHECK(back->term == 7);
  CHECK(back->version == 1);
  CHECK(back->run_samples == 640);
  CHECK(back->mean_samples == 32);
  CHECK(back->text == "coordinator");
  CHECK(bitIdentical(back->tensor, snap.tensor));
  CHECK(back->optimizer.kind == OptimizerKind::kAdam);
  CHECK(back->optimizer.buffers == 2);
  CHECK(back->optimizer.steps == 1);
  CHECK(bitIdentical(back->optimizer.values, snap.optimizer.values));

  const ReplicationMessage up = updateOf(7, 2, randomVector(1000, rng), 0.25f);
  auto u = decodeReplication(encodeReplication(up));
  REQUIRE(u);
  CHECK(u->kind == ReplicationKind::kUpdate);
  CHECK(u->version == 2);
  CHECK(u->weight == 0.25f);
  CHECK(u->samples == 64);
  CHECK(bitIdentical(u->tensor, up.tensor));

  // The same update with its delta seen in place in two chunks (as in a group's message):
  // the same frames, the delta copied once straight into its frame.
  ReplicationMessage header = up;
  header.tensor.clear();
  TensorView view;
  view.size = up.tensor.size();
  view.parts = {std::span<const float>(up.tensor).first(333),
                std::span<const float>(up.tensor).subspan(333)};
  auto v = decodeReplication(encodeReplication(header, view));
  REQUIRE(v);
  CHECK(v->version == 2);
  CHECK(v->weight == 0.25f);
  CHECK(bitIdentical(v->tensor, up.tensor));

  // Decoded in place (the standby's way): m.tensor empty, the delta seen in its frame.
  const std::vector<zmq::message_t> frames = encodeReplication(up);
  TensorView seen;
  auto w = decodeReplication(frames, &seen);
  REQUIRE(w);
  CHECK(w->tensor.empty());
  REQUIRE(seen.size == up.tensor.size());
  std::vector<float> copied(seen.size);
  seen.copyRange(0, copied);
  CHECK(bitIdentical(copied, up.tensor));
  // A snapshot is still copied (it outlives its frames), and a short delta refused.
  CHECK_FALSE(decodeReplication(encodeReplication(snap), &seen)->tensor.empty());
  CHECK(seen.size == 0);
  std::vector<zmq::message_t> short_frames = copyOf(frames);
  short_frames[1] = zmq::message_t(frames[1].data(), frames[1].size() - 4);
  auto refused = decodeReplication(short_frames, &seen);
  REQUIRE_FALSE(refused);
  CHECK(refused.status().message().find("mis-sized") != std::string::npos);
}

TEST_CASE("replication: a coordinator state round-trips with its text and term") {
  ReplicationMessage m;
  m.kind = ReplicationKind::kCoordinatorState;
  m.term = 4;
  m.version = 17;
  m.text = R"({"format":1,"epoch_ledger":{}})";
  auto back = decodeReplication(encodeReplication(m));
  REQUIRE(back);
  CHECK(back->kind == ReplicationKind::kCoordinatorState);
  CHECK(back->term == 4);
  CHECK(back->version == 17);
  CHECK(back->text == m.text);
  CHECK(back->tensor.empty());
  CHECK(std::string(replicationKindName(m.kind)) == "coordinator state");
}

TEST_CASE("replication: truncated, mis-sized and unknown messages are refused by name") {
  std::mt19937 rng(4);
  const auto frames = encodeReplication(updateOf(1, 1, randomVector(100, rng), 1.0f));
  SUBCASE("a truncated delta") {
    auto bad = copyOf(frames);
    bad[1] = zmq::message_t(bad[1].data(), bad[1].size() - 4);
    auto r = decodeReplication(bad);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("truncated") != std::string::npos);
  }
  SUBCASE("a truncated header") {
    auto bad = copyOf(frames);
    bad[0] = zmq::message_t(bad[0].data(), bad[0].size() - 1);
    auto r = decodeReplication(bad);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("header") != std::string::npos);
  }
  SUBCASE("a frame missing") {
    auto bad = copyOf(frames);
    bad.pop_back();
    auto r = decodeReplication(bad);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("frames") != std::string::npos);
  }
  SUBCASE("bad magic and an unknown kind") {
    auto bad = copyOf(frames);
    std::string header(static_cast<const char*>(bad[0].data()), bad[0].size());
    header[0] = 'X';
    bad[0] = zmq::message_t(header.data(), header.size());
    auto r = decodeReplication(bad);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("magic") != std::string::npos);
    header = std::string(static_cast<const char*>(frames[0].data()), frames[0].size());
    header[6] = 99;  // the kind
    bad[0] = zmq::message_t(header.data(), header.size());
    r = decodeReplication(bad);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("unknown kind") != std::string::npos);
  }
  CHECK_FALSE(decodeReplication({}));
}

TEST_CASE("replication: a replica advanced by updates equals the primary's store bit for bit") {
  std::mt19937 rng(5);
  CentralStore primary(randomVector(5000, rng), kAdam, 2, {});
  REQUIRE(primary.applyDelta(randomVector(5000, rng, 0.1f), 1.0f));
  StandbyReplica replica(kAdam, {}, 2);
  REQUIRE(replica.applySnapshot(snapshotOf(primary, 3)));
  CHECK(replica.version() == 1);
  for (std::uint64_t v = 2; v <= 6; ++v) {
    auto delta = randomVector(5000, rng, 0.1f);
    const float weight = 1.0f / static_cast<float>(v);
    REQUIRE(primary.applyDelta(delta, weight));
    // Through the wire, as the standby receives it.
    auto m = decodeReplication(encodeReplication(updateOf(3, v, delta, weight)));
    REQUIRE(m);
    REQUIRE(replica.applyUpdate(*m));
  }
  const ReplicaState st = replica.state();
  CHECK(st.version == primary.version());
  CHECK(st.term == 3);
  CHECK(st.head_role == "coordinator");
  CHECK(st.run_samples == 640 + 64 * 6);
  CHECK(bitIdentical(st.params, paramsOf(primary)));
  CHECK(bitIdentical(st.optimizer.values, primary.optimizerState().values));
  CHECK(st.optimizer.steps == primary.optimizerState().steps);
}

TEST_CASE(
    "replication: out-of-order, foreign-term and mis-sized updates leave the replica as it was") {
  std::mt19937 rng(6);
  CentralStore primary(randomVector(300, rng), kAdam, 1, {});
  StandbyReplica replica(kAdam, {}, 1);
  CHECK_FALSE(replica.applyUpdate(updateOf(3, 1, randomVector(300, rng), 1.0f)));  // no snapshot
  REQUIRE(replica.applySnapshot(snapshotOf(primary, 3)));
  const ReplicaState before = replica.state();

  auto skipped = replica.applyUpdate(updateOf(3, 2, randomVector(300, rng), 1.0f));
  REQUIRE_FALSE(skipped);
  CHECK(skipped.message().find("out of order") != std::string::npos);
  auto repeated = replica.applyUpdate(updateOf(3, 0, randomVector(300, rng), 1.0f));
  REQUIRE_FALSE(repeated);
  auto old_term = replica.applyUpdate(updateOf(2, 1, randomVector(300, rng), 1.0f));
  REQUIRE_FALSE(old_term);
  CHECK(old_term.message().find("term 2") != std::string::npos);
  auto short_delta = replica.applyUpdate(updateOf(3, 1, randomVector(299, rng), 1.0f));
  REQUIRE_FALSE(short_delta);
  // checkUpdate (what a standby checks before acknowledging) refuses the same ones and
  // passes the next version.
  CHECK_FALSE(replica.checkUpdate(updateOf(3, 2, randomVector(300, rng), 1.0f)));
  CHECK_FALSE(replica.checkUpdate(updateOf(2, 1, randomVector(300, rng), 1.0f)));
  CHECK_FALSE(replica.checkUpdate(updateOf(3, 1, randomVector(299, rng), 1.0f)));
  CHECK(replica.checkUpdate(updateOf(3, 1, randomVector(300, rng), 1.0f)));

  const ReplicaState after = replica.state();
  CHECK(after.version == before.version);
  CHECK(after.run_samples == before.run_samples);
  CHECK(bitIdentical(after.params, before.params));
  CHECK(bitIdentical(after.optimizer.values, before.optimizer.values));

  // A snapshot of an older term than the one followed is refused too (fencing).
  auto older = replica.applySnapshot(snapshotOf(primary, 2));
  REQUIRE_FALSE(older);
  CHECK(older.message().find("refused") != std::string::npos);
  CHECK(replica.checkTerm(2).message().find("follows term 3") != std::string::npos);
  CHECK(replica.checkTerm(4));
}
