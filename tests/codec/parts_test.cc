// Tensors sent in parts: splitting (OutMessage::toParts), the checks
// decodeMessage makes on a part's header, and the receiver's order checks
// (PartStream, PartAssembler).
#include "groupsgd/codec/parts.h"

#include <doctest/doctest.h>

#include <cmath>

#include "support/message_fixtures.h"

using namespace groupsgd;

namespace {

MessageLimits limits() { return testing::job7Limits(); }

Payload ramp(std::size_t n) { return testing::rampPayload(n); }

OutMessage push(std::size_t n) {
  OutMessage out(7, 3);
  out.header().setStep(11);
  out.header().getBody().initPush().setBatchSize(32);
  out.addTensor(ramp(n));
  return out;
}

std::vector<InMessage> decodeAll(std::vector<std::vector<zmq::message_t>>&& parts,
                                 const MessageLimits& l = limits()) {
  std::vector<InMessage> out;
  for (auto& frames : parts) {
    auto msg = decodeMessage(std::move(frames), l);
    REQUIRE(msg.isOk());
    out.push_back(std::move(*msg));
  }
  return out;
}

// One part message with a hand-made position, carrying `elements` floats.
std::vector<zmq::message_t> handMadePart(std::uint32_t index, std::uint32_t count,
                                         std::uint64_t offset, std::uint64_t total,
                                         std::size_t elements) {
  OutMessage out(7, 3);
  out.header().getBody().initPush().setBatchSize(32);
  auto p = out.header().initPart();
  p.setIndex(index);
  p.setCount(count);
  p.setOffset(offset);
  p.setTotalElements(total);
  out.addTensor(ramp(elements));
  return std::move(out).toFrames();
}

}  // namespace

TEST_CASE(
    "parts: a large dense tensor becomes ordered part messages that "
    "reassemble exactly") {
  auto parts = push(1000).toParts(1024);  // 4000 bytes in 1024-byte parts: 4 parts
  REQUIRE(parts.size() == 4);
  auto msgs = decodeAll(std::move(parts));
  PartAssembler assembler;
  double squares = 0;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    REQUIRE(msgs[i].part().has_value());
    CHECK(msgs[i].part()->index == i);
    CHECK(msgs[i].part()->count == 4);
    CHECK(msgs[i].part()->offset == i * 256);
    CHECK(msgs[i].part()->total_elements == 1000);
    CHECK(msgs[i].tensorElements(0) == (i < 3 ? 256u : 232u));
    CHECK(msgs[i].header().getStep() == 11);  // every part carries the whole header
    CHECK(msgs[i].header().getBody().getPush().getBatchSize() == 32);
    CHECK_FALSE(assembler.complete());
    REQUIRE(assembler.add(std::move(msgs[i])).isOk());
  }
  CHECK(assembler.complete());
  TensorView whole = assembler.view();
  REQUIRE(whole.size == 1000);
  std::vector<float> out(1000);
  whole.copyRange(0, out);
  for (std::size_t i = 0; i < out.size(); ++i) {
    CHECK(out[i] == static_cast<float>(i) * 0.5f);
    squares += static_cast<double>(out[i]) * out[i];
  }
  CHECK(assembler.sumSquares() == doctest::Approx(squares));
}

TEST_CASE("parts: small, compressed and tensor-less messages stay one message") {
  CHECK(push(256).toParts(1024).size() == 1);  // exactly one part's worth
  OutMessage pull(7, 3);
  pull.header().getBody().initPull();
  CHECK(std::move(pull).toParts(1024).size() == 1);
  OutMessage enc(7, 3);
  enc.header().getBody().initPush().setBatchSize(1);
  enc.addEncodedTensor(std::make_shared<std::vector<std::uint8_t>>(2000), proto::Encoding::FP16,
                       1000);
  CHECK(std::move(enc).toParts(1024).size() == 1);
}

TEST_CASE("parts: never more than kMaxParts; the part size grows instead") {
  const std::uint64_t n = 1'000'000;
  const std::uint64_t per = partElementsFor(n, 64);  // 16 floats asked
  CHECK(per * kMaxParts >= n);
  CHECK(per > 16);
  CHECK(push(n).toParts(64).size() <= kMaxParts);
}

TEST_CASE(
    "parts: decodeMessage refuses an out-of-range, oversize or misplaced "
    "part") {
  SUBCASE("index equal to the count") {
    auto m = decodeMessage(handMadePart(4, 4, 0, 1000, 10), limits());
    REQUIRE_FALSE(m.isOk());
    CHECK(m.status().code() == Code::kInvalidArgument);
    CHECK(m.status().message().find("out of range") != std::string::npos);
  }
  SUBCASE("a count of one (a whole tensor is no part) or over the limit") {
    CHECK_FALSE(decodeMessage(handMadePart(0, 1, 0, 10, 10), limits()).isOk());
    CHECK_FALSE(decodeMessage(handMadePart(0, kMaxParts + 1, 0, 1000, 1), limits()).isOk());
  }
  SUBCASE("a slice beyond the tensor's end") {
    auto m = decodeMessage(handMadePart(1, 2, 995, 1000, 10), limits());
    REQUIRE_FALSE(m.isOk());
    CHECK(m.status().message().find("outside") != std::string::npos);
  }
  SUBCASE("a part larger than the receiver's part limit") {
    MessageLimits l = limits();
    l.max_part_bytes = 1024;
    auto m = decodeMessage(handMadePart(0, 2, 0, 1000, 300), l);  // 1200 bytes
    REQUIRE_FALSE(m.isOk());
    CHECK(m.status().code() == Code::kResourceExhausted);
  }
  SUBCASE("a part of a compressed tensor") {
    OutMessage out(7, 3);
    out.header().getBody().initPush().setBatchSize(1);
    auto p = out.header().initPart();
    p.setIndex(0);
    p.setCount(2);
    p.setTotalElements(1000);
    out.addEncodedTensor(std::make_shared<std::vector<std::uint8_t>>(1000), proto::Encoding::FP16,
                         500);
    CHECK_FALSE(decodeMessage(std::move(out).toFrames(), limits()).isOk());
  }
}

TEST_CASE(
    "parts: a missing, repeated or mismatched part is refused and leaves "
    "the stream as it was") {
  auto msgs = decodeAll(push(1000).toParts(1024));
  PartStream s;
  auto pos = [&](std::size_t i) { return *msgs[i].part(); };
  auto elems = [&](std::size_t i) { return msgs[i].tensorElements(0); };
  SUBCASE("a stream must start with part 0") {
    CHECK(s.accept(pos(1), elems(1)).message().find("before part 0") != std::string::npos);
    CHECK_FALSE(s.started());
  }
  REQUIRE(s.accept(pos(0), elems(0)).isOk());
  SUBCASE("missing") {
    Status st = s.accept(pos(2), elems(2));
    REQUIRE_FALSE(st.isOk());
    CHECK(st.message().find("missing") != std::string::npos);
    CHECK(s.received() == 1);
    CHECK(s.accept(pos(1), elems(1)).isOk());  // the right one still goes in
  }
  SUBCASE("repeated") {
    Status st = s.accept(pos(0), elems(0));
    REQUIRE_FALSE(st.isOk());
    CHECK(st.message().find("repeated") != std::string::npos);
  }
  SUBCASE("another count or total than part 0's") {
    PartPosition p = pos(1);
    p.count = 5;
    CHECK_FALSE(s.accept(p, elems(1)).isOk());
    p = pos(1);
    p.total_elements = 1001;
    CHECK_FALSE(s.accept(p, elems(1)).isOk());
  }
  SUBCASE("a slice that does not follow the last one") {
    PartPosition p = pos(1);
    p.offset += 1;
    CHECK_FALSE(s.accept(p, elems(1)).isOk());
  }
  SUBCASE("a last part that ends short of the tensor") {
    CHECK(s.accept(pos(1), elems(1)).isOk());
    CHECK(s.accept(pos(2), elems(2)).isOk());
    CHECK_FALSE(s.accept(pos(3), elems(3) - 1).isOk());
    CHECK_FALSE(s.complete());
    CHECK(s.accept(pos(3), elems(3)).isOk());
    CHECK(s.complete());
  }
}

TEST_CASE("parts: the assembler refuses a part out of order without keeping it") {
  auto msgs = decodeAll(push(1000).toParts(1024));
  PartAssembler a;
  REQUIRE(a.add(std::move(msgs[0])).isOk());
  CHECK_FALSE(a.add(std::move(msgs[2])).isOk());
  REQUIRE(a.add(std::move(msgs[1])).isOk());
  CHECK_FALSE(a.add(std::move(msgs[3])).isOk());  // part 2 was refused, not kept
  REQUIRE(a.add(std::move(msgs[2])).isOk());      // a refused message is left intact
  REQUIRE(a.add(std::move(msgs[3])).isOk());
  CHECK(a.complete());
}
