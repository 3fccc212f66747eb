#include "groupsgd/common/message.h"

#include <doctest/doctest.h>

#include <cstring>

#include "support/message_fixtures.h"

using namespace groupsgd;

namespace {

MessageLimits limits() { return testing::job7Limits(); }

Payload ramp(std::size_t n) { return testing::rampPayload(n); }

std::vector<zmq::message_t> pushFrames(std::size_t n, std::uint32_t chunk) {
  OutMessage out(7, 3);
  out.header().setStep(11);
  auto p = out.header().getBody().initPush();
  p.setBatchSize(32);
  out.addTensor(ramp(n), chunk);
  return std::move(out).toFrames();
}

}  // namespace

TEST_CASE("codec: header fields and a chunked tensor survive the round trip") {
  auto frames = pushFrames(1000, 1024);  // 4000 bytes -> 4 chunks
  CHECK(frames.size() == 5);
  auto msg = decodeMessage(std::move(frames), limits());
  REQUIRE(msg.isOk());
  CHECK(msg->kind() == BodyKind::PUSH);
  CHECK(msg->header().getSenderId() == 3);
  CHECK(msg->header().getStep() == 11);
  CHECK(msg->header().getBody().getPush().getBatchSize() == 32);
  REQUIRE(msg->tensorCount() == 1);
  std::vector<float> out(1000, -1.0f);
  REQUIRE(msg->readTensor(0, out).isOk());
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == static_cast<float>(i) * 0.5f);
}

TEST_CASE("codec: zero-copy frames keep the payload alive after the sender drops it") {
  std::vector<zmq::message_t> frames;
  {
    OutMessage out(7, 1);
    out.header().getBody().initPull();
    out.addTensor(ramp(16));
    frames = std::move(out).toFrames();
  }
  float first;
  std::memcpy(&first, static_cast<const char*>(frames[1].data()) + 4, 4);
  CHECK(first == 0.5f);
}

TEST_CASE("codec: readTensor refuses a tensor of the wrong length") {
  auto msg = decodeMessage(pushFrames(10, 4096), limits());
  REQUIRE(msg.isOk());
  std::vector<float> wrong(11);
  Status s = msg->readTensor(0, wrong);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("10 elements") != std::string::npos);
}

TEST_CASE("codec: rejects malformed messages with a reason") {
  SUBCASE("no frames") {
    CHECK(decodeMessage({}, limits()).status().code() == Code::kInvalidArgument);
  }
  SUBCASE("header not a whole number of words") {
    std::vector<zmq::message_t> f;
    f.emplace_back("abc", 3);
    CHECK(decodeMessage(std::move(f), limits()).status().code() == Code::kInvalidArgument);
  }
  SUBCASE("garbage header") {
    std::vector<zmq::message_t> f;
    std::vector<unsigned char> junk(64, 0xff);
    f.emplace_back(junk.data(), junk.size());
    auto r = decodeMessage(std::move(f), limits());
    CHECK_FALSE(r.isOk());
  }
  SUBCASE("truncated header") {
    auto frames = pushFrames(10, 4096);
    std::vector<zmq::message_t> f;
    f.emplace_back(frames[0].data(), frames[0].size() - 8);
    CHECK_FALSE(decodeMessage(std::move(f), limits()).isOk());
  }
  SUBCASE("wrong job") {
    MessageLimits other = limits();
    other.job_id = 8;
    CHECK(decodeMessage(pushFrames(10, 4096), other).status().code() == Code::kPermissionDenied);
  }
  SUBCASE("wrong protocol version") {
    OutMessage out(7, 1);
    out.header().setProtocolVersion(kProtocolVersion + 1);
    out.header().getBody().initPull();
    auto r = decodeMessage(std::move(out).toFrames(), limits());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("protocol version") != std::string::npos);
  }
  SUBCASE("a tensor frame shorter than declared") {
    auto frames = pushFrames(10, 4096);
    frames[1] = zmq::message_t(frames[1].data(), frames[1].size() - 4);
    auto r = decodeMessage(std::move(frames), limits());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  SUBCASE("a tensor frame missing") {
    auto frames = pushFrames(1000, 1024);
    frames.pop_back();
    CHECK(decodeMessage(std::move(frames), limits()).status().code() == Code::kInvalidArgument);
  }
  SUBCASE("an extra frame") {
    auto frames = pushFrames(10, 4096);
    frames.emplace_back("x", 1);
    CHECK(decodeMessage(std::move(frames), limits()).status().code() == Code::kInvalidArgument);
  }
  SUBCASE("a tensor over the size limit") {
    MessageLimits small = limits();
    small.max_tensor_bytes = 16;
    CHECK(decodeMessage(pushFrames(10, 4096), small).status().code() == Code::kResourceExhausted);
  }
  SUBCASE("a header over the size limit") {
    MessageLimits small = limits();
    small.max_header_bytes = 8;
    CHECK(decodeMessage(pushFrames(10, 4096), small).status().code() == Code::kResourceExhausted);
  }
}

TEST_CASE("codec: error replies carry code and message") {
  auto frames = makeErrorReply(7, 0, invalidArgument("bad size")).toFrames();
  auto msg = decodeMessage(std::move(frames), limits());
  REQUIRE(msg.isOk());
  REQUIRE(msg->kind() == BodyKind::ERROR);
  CHECK(msg->header().getBody().getError().getCode() == static_cast<int>(Code::kInvalidArgument));
  CHECK(std::string(msg->header().getBody().getError().getMessage().cStr()) == "bad size");
}

TEST_CASE(
    "codec: a compressed tensor whose length cannot match its encoding is refused on receipt") {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(10, 0);  // fp16 of 100 needs 200
  OutMessage out(7, 1);
  out.header().getBody().initPush();
  out.addEncodedTensor(bytes, proto::Encoding::FP16, 100);
  CHECK(decodeMessage(std::move(out).toFrames(), limits()).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("codec: a compressed tensor is refused by a receiver without a decoder") {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(200, 0);  // fp16 of 100 zeros
  OutMessage out(7, 1);
  out.header().getBody().initPush();
  out.addEncodedTensor(bytes, proto::Encoding::FP16, 100);
  auto msg = decodeMessage(std::move(out).toFrames(), limits());
  REQUIRE(msg.isOk());
  CHECK(msg->tensorEncoding(0) == proto::Encoding::FP16);
  std::vector<float> back(100);
  Status s = msg->readTensor(0, back);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("fp16") != std::string::npos);
  CHECK(msg->viewTensor(0, 100).status().code() == Code::kInvalidArgument);
}
