// Pushes sent in parts, end to end against a real group PS: each refused part
// (missing, repeated, out of range, oversize, beyond the window) is answered
// and counted, and the half-received gradient leaves the step's sum without a
// trace (a non-finite value or a norm over the bound found part way too); a push still arriving
// when its step closes at the deadline is dropped and answered late; pushes beyond the memory
// budget wait for credit and are all taken in.
#include <algorithm>
#include <limits>
#include <thread>

#include "cluster_fixture.h"
#include "groupsgd/codec/parts.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kParams = 10000;      // 40,000 bytes
constexpr std::uint32_t kPartBytes = 8192;  // 2048 floats: 5 parts, the last 1808
constexpr float kLr = 0.5f;

centralps::CentralConfig zeroModel() {
  centralps::CentralConfig c;
  c.param_count = kParams;
  c.part_bytes = kPartBytes;
  return c;
}

groupps::GroupServerConfig sgd() {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kSgd, kLr, 0.0f, 0.0f};
  g.exchange_period = 1000;  // no exchange: the replica moves by the group steps alone
  g.part_bytes = kPartBytes;
  g.limits.max_part_bytes = 3 * kPartBytes / 2;
  return g;
}

// The parts of a push of a constant gradient (member `worker`, epoch 1).
std::vector<std::vector<zmq::message_t>> pushParts(std::uint64_t worker, std::uint64_t step,
                                                   float value) {
  OutMessage out(1, worker);
  out.header().setEpoch(1);
  out.header().setStep(step);
  out.header().getBody().initPush().setBatchSize(1);
  out.addTensor(std::make_shared<std::vector<float>>(kParams, value));
  return std::move(out).toParts(kPartBytes);
}

// A member's raw connection, to send parts one by one.
struct RawMember {
  RpcClient rpc;
  RawMember(testing::MiniCluster& c) : rpc(c.ctx, (*c.group)->endpoint(), MessageLimits{}) {}
  void send(std::vector<zmq::message_t>& frames) { REQUIRE(rpc.send(std::move(frames)).isOk()); }
  Result<InMessage> next(std::chrono::milliseconds within = 3000ms) {
    return rpc.receive(std::chrono::steady_clock::now() + within);
  }
};

client::GroupClient member(testing::MiniCluster& c, std::uint64_t worker) {
  client::GroupClient client(c.ctx, c.assignment(worker, 1), 1, 5000ms);
  client.setPartBytes(kPartBytes);
  return client;
}

proto::GroupStats::Reader stats(const InMessage& m) { return m.header().getBody().getGroupStats(); }

InMessage statsNow(testing::MiniCluster& c) {
  RpcClient rpc(c.ctx, (*c.group)->endpoint(), MessageLimits{});
  OutMessage out(1, 0);
  out.header().getBody().initGroupStatsQuery();
  auto reply = rpc.call(std::move(out), 3000ms);
  REQUIRE(reply.isOk());
  return std::move(*reply);
}

// After a refused push, one good push of ones must move the zero replica by
// exactly -lr: nothing of the refused gradient stayed in the step's sum.
void checkCleanStep(testing::MiniCluster& c, std::uint64_t step) {
  auto client = member(c, 1);
  std::vector<float> params(kParams), ones(kParams, 1.0f);
  auto r = client.push(step, ones, 1, 0.0f, 0.0f, params);
  REQUIRE(r.isOk());
  CHECK(r->accepted);
  for (float p : params) REQUIRE(p == -kLr);
}

// Configures member 1 (batch 1, epoch 1, deadline 1000 ms) and returns the step it pulls.
std::uint64_t configuredStep(testing::MiniCluster& c) {
  c.configure({{1, 1}}, 1, 1000);
  auto client = member(c, 1);
  std::vector<float> params(kParams);
  auto pulled = testbed::pullWhenReady(client, params);
  REQUIRE(pulled.isOk());
  return pulled->step;
}

// A cluster whose member 1 has pulled `step`, and that member's raw connection.
struct RawCase {
  testing::MiniCluster c{zeroModel(), sgd()};
  const std::uint64_t step = configuredStep(c);
  RawMember raw{c};
};

}  // namespace

TEST_CASE_FIXTURE(RawCase,
                  "push in parts: a missing or repeated part is refused, counted, and "
                  "leaves no trace") {
  auto parts = pushParts(1, step, 3.0f);
  REQUIRE(parts.size() == 5);
  raw.send(parts[0]);
  raw.send(parts[1]);
  auto credit = raw.next();
  REQUIRE(credit.isOk());
  REQUIRE(credit->kind() == BodyKind::PUSH_CREDIT);  // admitted: the rest may come
  CHECK(credit->header().getBody().getPushCredit().getParts() == 5);
  std::string expected;
  SUBCASE("missing") {
    raw.send(parts[3]);
    expected = "part 2 is missing";
  }
  SUBCASE("repeated") {
    auto again = pushParts(1, step, 3.0f);
    raw.send(again[1]);
    expected = "repeated";
  }
  auto answer = raw.next();
  REQUIRE(answer.isOk());
  Status refused = statusFromError(*answer);
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK(refused.message().find(expected) != std::string::npos);
  auto s = statsNow(c);
  CHECK(stats(s).getBadParts() == 1);
  CHECK(stats(s).getBadMessages() == 1);
  CHECK(stats(s).getStep() == step);  // the step did not move
  checkCleanStep(c, step);
}

TEST_CASE_FIXTURE(RawCase,
                  "push in parts: an out-of-range or oversize part is refused before "
                  "it is read") {
  OutMessage out(1, 1);
  out.header().setEpoch(1);
  out.header().setStep(step);
  out.header().getBody().initPush().setBatchSize(1);
  auto p = out.header().initPart();
  Code expected = Code::kInvalidArgument;
  SUBCASE("index beyond the count") {
    p.setIndex(5);
    p.setCount(5);
    p.setTotalElements(kParams);
    out.addTensor(std::make_shared<std::vector<float>>(2048, 1.0f));
  }
  SUBCASE("a part over the receiver's part limit") {
    p.setIndex(0);
    p.setCount(2);
    p.setTotalElements(kParams);
    out.addTensor(std::make_shared<std::vector<float>>(4096, 1.0f));  // 16 KiB > 12 KiB
    expected = Code::kResourceExhausted;
  }
  auto frames = std::move(out).toFrames();
  raw.send(frames);
  auto answer = raw.next();
  REQUIRE(answer.isOk());
  CHECK(statusFromError(*answer).code() == expected);
  CHECK(stats(statsNow(c)).getBadMessages() == 1);
  checkCleanStep(c, step);
}

TEST_CASE(
    "push in parts: a half-received gradient is dropped when its step "
    "closes, answered late") {
  testing::MiniCluster c(zeroModel(), sgd());
  c.configure({{1, 1}, {2, 1}}, 1, 1000, 300);  // a 300 ms step deadline
  auto slow = member(c, 1);
  auto fast = member(c, 2);
  std::vector<float> p1(kParams), p2(kParams);
  auto pulled = testbed::pullWhenReady(slow, p1);
  REQUIRE(pulled.isOk());
  REQUIRE(fast.pull(p2).isOk());
  RawMember raw(c);
  auto parts = pushParts(1, pulled->step, 100.0f);
  raw.send(parts[0]);
  raw.send(parts[1]);
  auto credit = raw.next();
  REQUIRE(credit.isOk());
  REQUIRE(credit->kind() == BodyKind::PUSH_CREDIT);
  raw.send(parts[2]);  // three of five parts in the sum, then silence
  std::vector<float> ones(kParams, 1.0f);
  auto r = fast.push(pulled->step, ones, 1, 0.0f, 0.0f,
                     p2);  // released by the deadline
  REQUIRE(r.isOk());
  CHECK(r->accepted);
  for (float v : p2) REQUIRE(v == -kLr);  // the mean of member 2's gradient alone
  raw.send(parts[3]);
  raw.send(parts[4]);
  auto late = raw.next();
  REQUIRE(late.isOk());
  REQUIRE(late->kind() == BodyKind::STEP_REPLY);
  CHECK_FALSE(late->header().getBody().getStepReply().getAccepted());
  CHECK(std::string(late->header().getBody().getStepReply().getReason().cStr()).find("late") == 0);
  std::vector<float> replica(kParams);
  REQUIRE(receiveTensorInto(raw.rpc, *late, replica, std::chrono::steady_clock::now() + 3s).isOk());
  CHECK(replica == p2);
  auto s = statsNow(c);
  CHECK(stats(s).getLateGradients() == 1);
  CHECK(stats(s).getSamplesReceived() == 1);
  CHECK(stats(s).getSamplesDropped() == 1);
}

TEST_CASE(
    "push in parts: beyond the memory budget a push waits for credit; "
    "over its window it is refused") {
  auto cfg = sgd();
  cfg.inbound_budget_models = 1;  // one gradient being received at a time
  testing::MiniCluster c(zeroModel(), cfg);
  c.configure({{1, 1}, {2, 1}, {3, 1}}, 1, 1000);
  std::vector<float> params(kParams);
  std::uint64_t step = 0;
  for (std::uint64_t w = 1; w <= 3; ++w) {
    auto client = member(c, w);
    auto pulled = testbed::pullWhenReady(client, params);
    REQUIRE(pulled.isOk());
    step = pulled->step;
  }
  RawMember first(c), second(c), third(c);
  auto p1 = pushParts(1, step, 1.0f), p2 = pushParts(2, step, 1.0f), p3 = pushParts(3, step, 1.0f);
  first.send(p1[0]);
  first.send(p1[1]);
  auto credit1 = first.next();
  REQUIRE(credit1.isOk());
  REQUIRE(credit1->kind() == BodyKind::PUSH_CREDIT);
  second.send(p2[0]);
  second.send(p2[1]);  // its window: held, no credit while the first is received
  CHECK_FALSE(second.next(200ms).isOk());  // nothing within 200 ms (the socket resets)
  RawMember second_again(c);               // a fresh connection for the rest of its push
  // The third goes over its window: refused, counted.
  third.send(p3[0]);
  third.send(p3[1]);
  third.send(p3[2]);
  auto refused = third.next();
  REQUIRE(refused.isOk());
  CHECK(statusFromError(*refused).message().find("window") != std::string::npos);
  // The first finishes; the second is admitted (its credit went to its first
  // connection, gone: it starts over on the new one, which abandons the held
  // parts).
  for (std::size_t i = 2; i < p1.size(); ++i) first.send(p1[i]);
  auto again = pushParts(2, step, 1.0f);
  second_again.send(again[0]);
  second_again.send(again[1]);
  auto credit2 = second_again.next();
  REQUIRE(credit2.isOk());
  REQUIRE(credit2->kind() == BodyKind::PUSH_CREDIT);
  for (std::size_t i = 2; i < again.size(); ++i) second_again.send(again[i]);
  // Member 3 was refused (a bad update, not a drop): the step waits for it; a
  // good push closes it.
  auto m3 = member(c, 3);
  std::vector<float> ones(kParams, 1.0f), p3params(kParams);
  auto r3 = m3.push(step, ones, 1, 0.0f, 0.0f, p3params);
  REQUIRE(r3.isOk());
  CHECK(r3->accepted);
  for (float v : p3params) REQUIRE(v == -kLr);
  auto r1 = first.next();
  REQUIRE(r1.isOk());
  CHECK(r1->kind() == BodyKind::STEP_REPLY);
  CHECK(r1->header().getBody().getStepReply().getAccepted());
  auto s = statsNow(c);
  CHECK(stats(s).getPushesWaited() >= 2);
  CHECK(stats(s).getBadParts() >= 2);  // over the window; the abandoned push
  CHECK(stats(s).getSamplesReceived() == 3);
}

TEST_CASE(
    "push in parts: a non-finite value or a norm over the bound refuses the push "
    "and leaves no trace") {
  // Parts of 131,072 floats, so the bad value can sit in a part's second block of
  // 65,536 (the group PS checks and sums a part block by block in one pass, and must
  // take out the block it added before the bad one as well as the earlier parts).
  constexpr std::size_t kBig = 200000;
  constexpr std::uint32_t kBigPart = 512u << 10;
  auto central = zeroModel();
  central.param_count = kBig;
  central.part_bytes = kBigPart;
  auto group = sgd();
  group.part_bytes = kBigPart;
  group.limits = MessageLimits{};
  group.max_grad_norm = 400.0;  // ones: part 0 alone has norm 362, the whole 447
  group.quarantine_after = 100;
  testing::MiniCluster c(central, group);
  c.configure({{1, 1}}, 1, 1000);
  client::GroupClient client(c.ctx, c.assignment(1, 1), 1, 5000ms);
  client.setPartBytes(kBigPart);
  std::vector<float> params(kBig);
  auto pulled = testbed::pullWhenReady(client, params);
  REQUIRE(pulled.isOk());

  auto grad = std::make_shared<std::vector<float>>(kBig, 0.5f);  // norm 224: under the bound
  std::string expected;
  SUBCASE("a NaN in the second part's second block") {
    (*grad)[131072 + 66000] = std::numeric_limits<float>::quiet_NaN();  // part 1: 68,928
    expected = "1 non-finite values in the gradient (part 1)";
  }
  SUBCASE("an infinity in the first part") {
    (*grad)[5] = -std::numeric_limits<float>::infinity();
    expected = "1 non-finite values in the gradient (part 0)";
  }
  SUBCASE("the norm over the bound by the second part") {
    std::fill(grad->begin(), grad->end(), 1.0f);
    expected = "gradient norm over the bound 400.000000 by part 1";
  }
  OutMessage out(1, 1);
  out.header().setEpoch(1);
  out.header().setStep(pulled->step);
  out.header().getBody().initPush().setBatchSize(1);
  out.addTensor(grad);
  auto parts = std::move(out).toParts(kBigPart);
  REQUIRE(parts.size() == 2);
  RawMember raw(c);
  for (auto& p : parts) raw.send(p);
  auto answer = raw.next();
  while (answer.isOk() && answer->kind() == BodyKind::PUSH_CREDIT) answer = raw.next();
  REQUIRE(answer.isOk());
  Status refused = statusFromError(*answer);
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK(refused.message().find(expected) != std::string::npos);
  CHECK(stats(statsNow(c)).getStep() == pulled->step);  // the step did not move

  // A good push of halves (norm 224) then moves the zero replica by exactly -lr / 2
  // everywhere: nothing of the refused gradient stayed in the step's sum.
  std::vector<float> halves(kBig, 0.5f);
  auto r = client.push(pulled->step, halves, 1, 0.0f, 0.0f, params);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  CHECK(r->accepted);
  for (float p : params) REQUIRE(p == -kLr / 2);
}
