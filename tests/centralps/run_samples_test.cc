// The run's samples applied: the record kept beside the checkpoints, and the central PS's
// answers carrying the total, which a resume from a checkpoint continues.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/centralps/run_samples_record.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/testbed/server_thread.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using namespace std::chrono_literals;
using groupsgd::testbed::ServerThread;
using groupsgd::testing::TempDir;

namespace {

constexpr auto kTimeout = 5000ms;

// A central PS of a zero model of 64 parameters on its own thread, and a client.
struct Central {
  zmq::context_t ctx{1};
  CentralConfig cfg;
  std::unique_ptr<ServerThread<CentralServer>> server;
  std::unique_ptr<RpcClient> client;

  explicit Central(const std::string& checkpoint_dir) {
    cfg.param_count = 64;
    cfg.checkpoint_dir = checkpoint_dir;
    cfg.checkpoint_interval_s = 0;  // only on request
    auto s = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
    REQUIRE(s.isOk());
    client = std::make_unique<RpcClient>(ctx, (*s)->endpoint(), cfg.limits);
    server = std::make_unique<ServerThread<CentralServer>>(std::move(*s));
  }
  ~Central() {
    client.reset();
    server.reset();
  }

  // The runSamples of the answer to a Fetch.
  std::uint64_t fetchedRunSamples() {
    OutMessage out(cfg.limits.job_id, 0);
    out.header().getBody().initFetch();
    auto reply = client->call(std::move(out), kTimeout);
    REQUIRE(reply.isOk());
    REQUIRE(reply->kind() == BodyKind::MODEL_REPLY);
    return reply->header().getBody().getModelReply().getRunSamples();
  }

  // Pushes a delta of `samples` (base: the current version); returns the answer's fields.
  proto::ModelReply::Reader push(std::uint64_t base, std::uint64_t samples, float value,
                                 Result<InMessage>* keep) {
    OutMessage out(cfg.limits.job_id, 1);
    out.header().setModelVersion(base);
    auto body = out.header().getBody().initDeltaPush();
    body.setGroupId(1);
    body.setSamples(samples);
    body.setSteps(1);
    out.addTensor(std::make_shared<const std::vector<float>>(64, value));
    *keep = client->call(std::move(out), kTimeout);
    REQUIRE(keep->isOk());
    REQUIRE((*keep)->kind() == BodyKind::MODEL_REPLY);
    return (*keep)->header().getBody().getModelReply();
  }

  void checkpoint() {
    OutMessage out(cfg.limits.job_id, 0);
    out.header().getBody().initCheckpointRequest();
    auto reply = client->call(std::move(out), 30000ms);
    REQUIRE(reply.isOk());
    REQUIRE(reply->kind() == BodyKind::CHECKPOINT_DONE);
    REQUIRE(reply->header().getBody().getCheckpointDone().getOk());
  }
};

}  // namespace

TEST_CASE("run samples record: exact version, else the newest older; the newest kept") {
  TempDir dir;
  CHECK(runSamplesAt(dir.path(), 5).status().code() == Code::kNotFound);
  REQUIRE(recordRunSamples(dir.path(), 10, 1000, 2).isOk());
  REQUIRE(recordRunSamples(dir.path(), 20, 2500, 2).isOk());
  auto at = runSamplesAt(dir.path(), 20);
  REQUIRE(at.isOk());
  CHECK(at->samples == 2500);
  CHECK(at->version == 20);
  at = runSamplesAt(dir.path(), 15);  // no record for 15: version 10's
  REQUIRE(at.isOk());
  CHECK(at->samples == 1000);
  CHECK(at->version == 10);
  CHECK(runSamplesAt(dir.path(), 9).status().code() == Code::kNotFound);
  REQUIRE(recordRunSamples(dir.path(), 30, 4000, 2).isOk());  // keep 2: version 10 goes
  CHECK(runSamplesAt(dir.path(), 15).status().code() == Code::kNotFound);
  CHECK(runSamplesAt(dir.path(), 25)->samples == 2500);
  CHECK(runSamplesAt(dir.path(), 99)->samples == 4000);

  std::ofstream(dir.path() + "/" + kRunSamplesFile) << "{\"checkpoints\": [{\"version\": -1}]}";
  CHECK(runSamplesAt(dir.path(), 30).status().code() == Code::kDataLoss);
  REQUIRE(recordRunSamples(dir.path(), 40, 5000, 2).isOk());  // a bad file is replaced
  CHECK(runSamplesAt(dir.path(), 40)->samples == 5000);
}

TEST_CASE("central server: answers carry the run's merged samples; a resume continues them") {
  TempDir dir;
  {
    Central c(dir.path());
    CHECK(c.fetchedRunSamples() == 0);
    Result<InMessage> keep = internalError("unset");
    auto r = c.push(0, 64, 0.01f, &keep);
    CHECK(r.getApplied());
    CHECK(r.getRunSamples() == 64);
    r = c.push(1, 32, 0.01f, &keep);
    CHECK(r.getRunSamples() == 96);
    // A refused delta (a NaN) adds nothing.
    OutMessage bad(c.cfg.limits.job_id, 1);
    bad.header().setModelVersion(2);
    auto body = bad.header().getBody().initDeltaPush();
    body.setGroupId(1);
    body.setSamples(1000);
    body.setSteps(1);
    std::vector<float> nan(64, 0.0f);
    nan[3] = std::numeric_limits<float>::quiet_NaN();
    bad.addTensor(std::make_shared<const std::vector<float>>(std::move(nan)));
    (void)c.client->call(std::move(bad), kTimeout);
    CHECK(c.fetchedRunSamples() == 96);
    c.checkpoint();                   // at version 2: 96 samples recorded
    r = c.push(2, 16, 0.01f, &keep);  // after it: in the final checkpoint at the stop
    CHECK(r.getRunSamples() == 112);
  }
  CHECK(runSamplesAt(dir.path(), 2)->samples == 96);
  CHECK(runSamplesAt(dir.path(), 3)->samples == 112);
  {
    Central resumed(dir.path());  // resumes from the final checkpoint, version 3
    CHECK(resumed.fetchedRunSamples() == 112);
    Result<InMessage> keep = internalError("unset");
    CHECK(resumed.push(3, 8, 0.01f, &keep).getRunSamples() == 120);
  }
  // The second run's final checkpoint (version 4, 120 samples) removed: the resume is
  // from version 3 again, with its 112.
  REQUIRE(std::filesystem::remove(dir.path() + "/" + checkpointFileName(4)));
  {
    Central older(dir.path());
    CHECK(older.fetchedRunSamples() == 112);
  }
}
