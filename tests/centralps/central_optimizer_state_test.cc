// The outer optimizer's state: exported and restored across shards and pieces, the no-decay
// ranges clipped per piece, and carried by the checkpoint file (format 2; format 1 files
// still load, with no state).
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "centralps_test_util.h"
#include "groupsgd/centralps/central_store.h"
#include "groupsgd/centralps/checkpoint.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using groupsgd::centralps::testing::bitIdentical;
using groupsgd::centralps::testing::randomVector;
using groupsgd::testing::TempDir;
using kernels::OptimizerConfig;
using kernels::OptimizerKind;
using kernels::OptimizerSnapshot;

namespace {

std::vector<float> paramsOf(const CentralStore& s) {
  std::vector<float> out(s.paramCount());
  s.snapshotInto(out);
  return out;
}

OptimizerConfig adamw() { return {OptimizerKind::kAdamW, 0.5f, 0.0f, 0.1f}; }

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("central store: the outer adamw state carries a run across stores exactly") {
  // Two shards, and pieces of kPieceElements inside them: the state is laid out flat.
  const std::size_t n = 2 * Shard::kPieceElements + 5;
  std::mt19937 rng(3);
  const auto initial = randomVector(n, rng);
  CentralStore straight(initial, adamw(), 2), first(initial, adamw(), 2);
  std::vector<std::vector<float>> deltas;
  for (int i = 0; i < 4; ++i) deltas.push_back(randomVector(n, rng, 0.01f));
  for (const auto& d : deltas) REQUIRE(straight.applyDelta(d, 1.0f).isOk());
  for (int i = 0; i < 2; ++i) REQUIRE(first.applyDelta(deltas[i], 1.0f).isOk());

  const OptimizerSnapshot saved = first.optimizerState();
  CHECK(saved.kind == OptimizerKind::kAdamW);
  CHECK(saved.buffers == 2);
  CHECK(saved.steps == 2);
  REQUIRE(saved.values.size() == 2 * n);

  // A store with other shards restores the flat state and continues as if never stopped.
  CentralStore resumed(initial, adamw(), 3);
  REQUIRE(resumed.restore(paramsOf(first), first.version()).isOk());
  REQUIRE(resumed.restoreOptimizerState(saved).isOk());
  for (int i = 2; i < 4; ++i) REQUIRE(resumed.applyDelta(deltas[i], 1.0f).isOk());
  CHECK(bitIdentical(paramsOf(resumed), paramsOf(straight)));
  CHECK(resumed.optimizerState().steps == 4);

  // State of another kind or size is refused and changes nothing.
  CentralStore momentum(initial, {OptimizerKind::kMomentum, 0.5f, 0.9f, 0.0f});
  CHECK(momentum.restoreOptimizerState(saved).code() == Code::kInvalidArgument);
  OptimizerSnapshot short_state = saved;
  short_state.values.pop_back();
  CHECK(resumed.restoreOptimizerState(short_state).code() == Code::kInvalidArgument);
  CHECK(resumed.optimizerState().steps == 4);
}

TEST_CASE("central store: no-decay ranges hold across a piece boundary") {
  // A zero delta: adamw only decays (p *= 1 - lr*wd), so the exempt range keeps its values.
  const std::size_t n = Shard::kPieceElements + 100, k = Shard::kPieceElements;
  const std::vector<kernels::ElementRange> no_decay = {{k - 3, k + 3}, {n - 1, n}};
  CentralStore store(std::vector<float>(n, 2.0f), adamw(), 1, no_decay);
  REQUIRE(store.applyDelta(std::vector<float>(n, 0.0f), 1.0f).isOk());
  const auto p = paramsOf(store);
  const float decayed = 2.0f * (1.0f - 0.5f * 0.1f);
  CHECK(p[0] == doctest::Approx(decayed));
  CHECK(p[k - 4] == doctest::Approx(decayed));
  for (std::size_t i = k - 3; i < k + 3; ++i) CHECK(p[i] == 2.0f);
  CHECK(p[k + 3] == doctest::Approx(decayed));
  CHECK(p[n - 2] == doctest::Approx(decayed));
  CHECK(p[n - 1] == 2.0f);
}

TEST_CASE("checkpoint: the outer optimizer state round-trips in format 2") {
  TempDir dir;
  std::mt19937 rng(5);
  const auto params = randomVector(300, rng);
  CentralStore store(params, adamw());
  REQUIRE(store.applyDelta(randomVector(300, rng, 0.1f), 1.0f).isOk());
  const OptimizerSnapshot state = store.optimizerState();
  REQUIRE(writeCheckpoint(dir.path(), 1, paramsOf(store), 3, nullptr, &state).isOk());
  const std::string path = dir.file(checkpointFileName(1));
  CHECK(readBytes(path).size() == 64 + 4 * 300 + 24 + 2 * 4 * 300);
  auto loaded = readCheckpointFile(path, 300);
  REQUIRE_MESSAGE(loaded.isOk(), loaded.status().toString());
  CHECK(loaded->format == 2);
  CHECK(loaded->params == paramsOf(store));
  CHECK(loaded->optimizer.kind == OptimizerKind::kAdamW);
  CHECK(loaded->optimizer.steps == 1);
  CHECK(bitIdentical(loaded->optimizer.values, state.values));

  // An optimizer without state (sgd) and no state at all both write format 1.
  CentralStore sgd(params, {OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f});
  const OptimizerSnapshot none = sgd.optimizerState();
  REQUIRE(writeCheckpoint(dir.path(), 2, params, 3, nullptr, &none).isOk());
  REQUIRE(writeCheckpoint(dir.path(), 3, params, 3).isOk());
  for (std::uint64_t v : {2, 3}) {
    const std::string p = dir.file(checkpointFileName(v));
    CHECK(readBytes(p).size() == 64 + 4 * 300);
    auto old = readCheckpointFile(p, 300);
    REQUIRE(old.isOk());
    CHECK(old->format == 1);
    CHECK(old->optimizer.buffers == 0);
  }

  // A state that is not finite, or not N per buffer, is refused before anything is written.
  OptimizerSnapshot bad = state;
  bad.values[7] = std::numeric_limits<float>::infinity();
  CHECK(writeCheckpoint(dir.path(), 4, params, 3, nullptr, &bad).code() == Code::kInvalidArgument);
  bad = state;
  bad.values.resize(10);
  CHECK(writeCheckpoint(dir.path(), 4, params, 3, nullptr, &bad).code() == Code::kInvalidArgument);
  bad = state;
  bad.kind = OptimizerKind::kMomentum;  // one buffer, not two
  CHECK(writeCheckpoint(dir.path(), 4, params, 3, nullptr, &bad).code() == Code::kInvalidArgument);
  CHECK_FALSE(readCheckpointFile(dir.file(checkpointFileName(4)), 0).isOk());
}

TEST_CASE("checkpoint: a damaged optimizer section makes the loader fall back") {
  TempDir dir;
  const std::vector<float> params(64, 1.0f);
  CentralStore store(params, {OptimizerKind::kMomentum, 0.5f, 0.9f, 0.0f});
  REQUIRE(store.applyDelta(std::vector<float>(64, 0.25f), 1.0f).isOk());
  const OptimizerSnapshot state = store.optimizerState();
  REQUIRE(writeCheckpoint(dir.path(), 1, params, 5, nullptr, &state).isOk());
  REQUIRE(writeCheckpoint(dir.path(), 2, params, 5, nullptr, &state).isOk());
  const std::string newest = dir.file(checkpointFileName(2));
  const std::string original = readBytes(newest);
  const std::size_t section = 64 + 4 * 64;
  struct Damage {
    std::string bytes;
    const char* reason;
  };
  std::string flipped_state = original, flipped_section = original;
  flipped_state[section + 24 + 5] ^= 0x10;
  flipped_section[section + 8] ^= 0x10;  // the step count
  for (const Damage& d : {Damage{original.substr(0, section + 10), "optimizer section"},
                          Damage{original.substr(0, original.size() - 4), "truncated"},
                          Damage{original + "x", "after the optimizer state"},
                          Damage{flipped_state, "optimizer state checksum"},
                          Damage{flipped_section, "optimizer section checksum"}}) {
    CAPTURE(d.reason);
    writeBytes(newest, d.bytes);
    auto loaded = loadNewestCheckpoint(dir.path(), 64);
    REQUIRE(loaded.isOk());
    CHECK(loaded->version == 1);
    CHECK(loaded->optimizer.steps == 1);
    REQUIRE(loaded->warnings.size() == 1);
    CHECK(loaded->warnings[0].find(d.reason) != std::string::npos);
  }
}
