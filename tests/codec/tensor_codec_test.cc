// The codec library: compressed tensors through a message and back (decodePayload), the
// wire names of the encodings, and the compression spec operators write.
#include "groupsgd/codec/tensor_codec.h"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "groupsgd/codec/compression_spec.h"
#include "support/message_fixtures.h"

using namespace groupsgd;

namespace {

MessageLimits limits() { return testing::job7Limits(); }

}  // namespace

TEST_CASE("tensor codec: every encoding has its wire name and back") {
  for (auto e : {kernels::Encoding::kDense, kernels::Encoding::kFp16, kernels::Encoding::kTopK,
                 kernels::Encoding::kSign}) {
    CHECK(fromWire(toWire(e)) == e);
    CHECK(std::string(encodingName(toWire(e))) == kernels::encodingName(e));
  }
}

TEST_CASE("tensor codec: compressed tensors decode on read; a corrupt top-k payload is refused") {
  const std::size_t n = 100;
  std::vector<float> x(n, 0.0f);
  x[7] = 3.0f;
  x[42] = -2.0f;
  kernels::Compressor topk(kernels::Encoding::kTopK, n, 0.02f);
  auto bytes = std::make_shared<std::vector<std::uint8_t>>();
  topk.encode(x, bytes.get());
  {
    OutMessage out(7, 1);
    out.header().getBody().initPush();
    out.addEncodedTensor(bytes, toWire(kernels::Encoding::kTopK), n);
    auto msg = decodeMessage(std::move(out).toFrames(), limits());
    REQUIRE(msg.isOk());
    CHECK(fromWire(msg->tensorEncoding(0)) == kernels::Encoding::kTopK);
    std::vector<float> back(n, 9.0f);
    REQUIRE(msg->readTensor(0, back, decodePayload).isOk());
    CHECK(back[7] == 3.0f);
    CHECK(back[42] == -2.0f);
    CHECK(back[0] == 0.0f);  // every element written
  }
  // An index past the end: the frame sizes still match the header, the content does not.
  auto bad = std::make_shared<std::vector<std::uint8_t>>(*bytes);
  const std::uint32_t huge = 1000;
  std::memcpy(bad->data() + 4, &huge, 4);
  OutMessage out(7, 1);
  out.header().getBody().initPush();
  out.addEncodedTensor(bad, proto::Encoding::TOPK, n);
  auto msg = decodeMessage(std::move(out).toFrames(), limits());
  REQUIRE(msg.isOk());
  std::vector<float> back(n);
  Status s = msg->readTensor(0, back, decodePayload);
  CHECK_FALSE(s.isOk());
  CHECK(s.message().find("topk") != std::string::npos);
}

TEST_CASE("tensor codec: a sign payload of the length the header checks decodes") {
  const std::size_t n = 13;  // not a multiple of 8: one padding byte
  std::vector<float> x(n, 1.0f);
  x[3] = -1.0f;
  kernels::Compressor sign(kernels::Encoding::kSign, n);
  auto bytes = std::make_shared<std::vector<std::uint8_t>>();
  sign.encode(x, bytes.get());
  OutMessage out(7, 1);
  out.header().getBody().initPush();
  out.addEncodedTensor(bytes, proto::Encoding::SIGN, n);
  auto msg = decodeMessage(std::move(out).toFrames(), limits());
  REQUIRE(msg.isOk());  // common's length rule for sign agrees with the kernels' layout
  std::vector<float> back(n);
  REQUIRE(msg->readTensor(0, back, decodePayload).isOk());
  CHECK(back[3] < 0);
  CHECK(back[0] > 0);
}

TEST_CASE("compression spec: parses the operator forms and refuses the rest") {
  CHECK(parseCompressionSpec("dense")->encoding == kernels::Encoding::kDense);
  CHECK(parseCompressionSpec("fp16")->encoding == kernels::Encoding::kFp16);
  auto t = parseCompressionSpec("topk:0.05");
  REQUIRE(t.isOk());
  CHECK(t->ratio == doctest::Approx(0.05));
  CHECK_FALSE(parseCompressionSpec("topk").isOk());
  CHECK_FALSE(parseCompressionSpec("topk:0").isOk());
  CHECK_FALSE(parseCompressionSpec("topk:2").isOk());
  CHECK_FALSE(parseCompressionSpec("fp16:0.1").isOk());
  CHECK_FALSE(parseCompressionSpec("zip").isOk());
}
