// The group PS refuses bad pushes with an error reply and a counter, drops late
// gradients with a count, and keeps serving.
#include <cmath>
#include <limits>
#include <thread>

#include "cluster_fixture.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

groupps::GroupServerConfig groupConfig() {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kSgd, 0.1f, 0.0f, 0.0f};
  g.quarantine_after = 0;  // each refusal is checked on its own (quarantine: its own test)
  return g;
}

groupps::GroupStats countersOf(const InMessage& m) {
  return groupps::fromProto(m.header().getBody().getGroupStats());
}

}  // namespace

TEST_CASE("group PS: bad pushes get an error reply and a counter; training goes on") {
  testing::MiniCluster cluster(testing::smallModel(), groupConfig());
  cluster.configure({{1, 4}}, 5);
  std::vector<float> params(cluster.params);
  client::GroupClient good(cluster.ctx, cluster.assignment(1, 5), 1, 5000ms);
  // The group fetches its model from the central PS first; pull until it has one.
  auto pulled = testbed::pullWhenReady(good, params);
  REQUIRE(pulled.isOk());
  const std::vector<float> before = params;

  RpcClient raw(cluster.ctx, (*cluster.group)->endpoint(), MessageLimits{});
  std::vector<float> ok_grad(cluster.params, 0.01f);

  SUBCASE("each bad push is refused with its own code") {
    auto nan_grad = ok_grad;
    nan_grad[3] = std::numeric_limits<float>::quiet_NaN();
    auto inf_grad = ok_grad;
    inf_grad[0] = std::numeric_limits<float>::infinity();
    struct Case {
      const char* what;
      OutMessage msg;
      Code code;
    };
    std::vector<Case> cases;
    cases.push_back({"non-member", testing::rawPush(9, 5, 0, ok_grad), Code::kPermissionDenied});
    cases.push_back({"old epoch", testing::rawPush(1, 4, 0, ok_grad), Code::kFailedPrecondition});
    cases.push_back({"short gradient", testing::rawPush(1, 5, 0, std::vector<float>(10, 0.f)),
                     Code::kInvalidArgument});
    cases.push_back({"NaN", testing::rawPush(1, 5, 0, nan_grad), Code::kInvalidArgument});
    cases.push_back({"Inf", testing::rawPush(1, 5, 0, inf_grad), Code::kInvalidArgument});
    cases.push_back({"huge norm",
                     testing::rawPush(1, 5, 0, std::vector<float>(cluster.params, 1e6f)),
                     Code::kInvalidArgument});
    cases.push_back({"future step", testing::rawPush(1, 5, 3, ok_grad), Code::kInvalidArgument});
    cases.push_back({"empty batch", testing::rawPush(1, 5, 0, ok_grad, 0), Code::kInvalidArgument});
    // A skipped step carries no samples; one claiming a batch is malformed.
    OutMessage skipped_with_batch = testing::rawPush(1, 5, 0, ok_grad, 4);
    skipped_with_batch.header().getBody().getPush().setSkipped(true);
    cases.push_back(
        {"skipped with a batch", std::move(skipped_with_batch), Code::kInvalidArgument});
    for (auto& c : cases) {
      CAPTURE(c.what);
      auto r = raw.call(std::move(c.msg), 3000ms);
      CHECK(r.status().code() == c.code);
      CHECK_FALSE(r.status().message().empty());
    }
    // A malformed header: raw bytes that are not Cap'n Proto.
    {
      auto sock = makeSocket(cluster.ctx, zmq::socket_type::dealer);
      REQUIRE(sock.isOk());
      REQUIRE(connectSocket(*sock, (*cluster.group)->endpoint()).isOk());
      std::vector<zmq::message_t> junk;
      std::vector<unsigned char> bytes(24, 0xab);
      junk.emplace_back(bytes.data(), bytes.size());
      REQUIRE(sendFrames(*sock, std::move(junk)).isOk());
      zmq::pollitem_t item{sock->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, 3000ms);
      REQUIRE((item.revents & ZMQ_POLLIN) != 0);
      auto frames = recvFrames(*sock);
      REQUIRE(frames.isOk());
      auto reply = decodeMessage(std::move(*frames), MessageLimits{});
      REQUIRE(reply.isOk());
      CHECK(reply->kind() == BodyKind::ERROR);
    }
    // Nothing bad touched the replica, and a good push still completes the step.
    CHECK(params == before);
    auto ans = good.push(pulled->step, ok_grad, 4, 1.0f, 1.0f, params);
    REQUIRE(ans.isOk());
    CHECK(ans->accepted);
    CHECK(ans->step == pulled->step + 1);
    CHECK(params != before);
    auto c = countersOf(cluster.flush());
    CHECK(c.bad_messages == 10);
    CHECK(c.samples_received == 4);
    CHECK(c.samples_dropped == 0);
  }

  SUBCASE("a skipped step closes the step without a strike and without an update") {
    for (int i = 0; i < 8; ++i) {  // more than any quarantine limit would allow of bad ones
      auto ans = good.pushSkipped(pulled->step + i, 1.0f, params);
      REQUIRE(ans.isOk());
      CHECK(ans->accepted);
      CHECK(ans->step == pulled->step + i + 1);
      CHECK(params == before);  // the only member skipped: no optimizer step
    }
    auto c = countersOf(cluster.flush());
    CHECK(c.bad_messages == 0);
    CHECK(c.samples_received == 0);
  }
}

TEST_CASE(
    "group PS: a member that misses the deadline does not block; its late gradient is dropped and "
    "counted") {
  testing::MiniCluster cluster(testing::smallModel(), groupConfig());
  cluster.configure({{1, 4}, {2, 6}}, 1, 1, /*deadline_ms=*/200);
  std::vector<float> pa(cluster.params), pb(cluster.params);
  client::GroupClient a(cluster.ctx, cluster.assignment(1, 1), 1, 5000ms);
  client::GroupClient b(cluster.ctx, cluster.assignment(2, 1), 1, 5000ms);
  auto ra = testbed::pullWhenReady(a, pa);
  REQUIRE(ra.isOk());
  auto rb = b.pull(pb);  // b becomes an active member, so the step waits for it...
  REQUIRE(rb.isOk());
  std::vector<float> grad(cluster.params, 0.01f);
  const auto t0 = std::chrono::steady_clock::now();
  auto done = a.push(ra->step, grad, 4, 1.0f, 1.0f, pa);  // ...until the deadline
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(done.isOk());
  CHECK(done->accepted);
  CHECK(done->step == ra->step + 1);
  CHECK(waited >= 150ms);  // it did wait for b, up to the deadline
  auto late = b.push(rb->step, grad, 6, 1.0f, 1.0f, pb);
  REQUIRE(late.isOk());
  CHECK_FALSE(late->accepted);
  CHECK(late->reason.find("late") != std::string::npos);
  CHECK(late->step == done->step);
  CHECK(pb == pa);  // the late member was handed the current replica
  auto c = countersOf(cluster.flush());
  CHECK(c.late_gradients == 1);
  CHECK(c.samples_dropped == 6);
  CHECK(c.samples_received == 4);
}
