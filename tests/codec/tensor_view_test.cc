// InMessage::viewTensor and TensorView: a received tensor read in place in its frames,
// checked with the codec's sumSquares and countNonFinite.
#include "groupsgd/common/tensor_view.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "groupsgd/codec/tensor_codec.h"
#include "groupsgd/common/message.h"
#include "support/message_fixtures.h"

using namespace groupsgd;

namespace {

MessageLimits limits() { return testing::job7Limits(); }

std::shared_ptr<std::vector<float>> ramp(std::size_t n) {
  auto v = std::make_shared<std::vector<float>>(n);
  for (std::size_t i = 0; i < n; ++i) (*v)[i] = static_cast<float>(i) * 0.25f;
  return v;
}

Result<InMessage> roundTrip(Payload p, std::uint32_t chunk) {
  OutMessage out(7, 1);
  out.header().getBody().initPush();
  out.addTensor(std::move(p), chunk);
  return decodeMessage(std::move(out).toFrames(), limits());
}

std::vector<float> flatten(const TensorView& v) {
  std::vector<float> out;
  for (const auto& p : v.parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST_CASE("tensor view: dense chunks are seen in place, in order, one part per frame") {
  auto src = ramp(1000);
  auto msg = roundTrip(src, 1024);  // 4000 bytes: 3 chunks of 256 floats, one of 232
  REQUIRE(msg.isOk());
  auto view = msg->viewTensor(0, 1000);
  REQUIRE(view.isOk());
  CHECK(view->size == 1000);
  CHECK(view->parts.size() == 4);
  CHECK(flatten(*view) == *src);
  double expect = 0;
  for (float x : *src) expect += static_cast<double>(x) * x;
  CHECK(sumSquares(*view) == doctest::Approx(expect));
  CHECK(countNonFinite(*view) == 0);
}

TEST_CASE("tensor view: copyRange crosses part boundaries") {
  auto src = ramp(1000);
  auto msg = roundTrip(src, 1024);
  REQUIRE(msg.isOk());
  auto view = msg->viewTensor(0, 1000);
  REQUIRE(view.isOk());
  std::vector<float> out(300);
  view->copyRange(200, out);  // parts 0 and 1 (256 floats each), then into part 2
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == (*src)[200 + i]);
  std::vector<float> tail(10);
  view->copyRange(990, tail);
  for (std::size_t i = 0; i < tail.size(); ++i) CHECK(tail[i] == (*src)[990 + i]);
}

TEST_CASE("tensor view: rangePieces sees a range across parts in place") {
  auto src = ramp(1000);
  auto msg = roundTrip(src, 1024);
  REQUIRE(msg.isOk());
  auto view = msg->viewTensor(0, 1000);
  REQUIRE(view.isOk());
  std::vector<std::span<const float>> pieces;
  view->rangePieces(200, 400, &pieces);  // 56 of part 0, all 256 of part 1, 88 of part 2
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].size() == 56);
  CHECK(pieces[1].size() == 256);
  CHECK(pieces[2].size() == 88);
  CHECK(pieces[1].data() == view->parts[1].data());  // no copy
  std::size_t at = 200;
  for (const auto& piece : pieces) {
    for (float v : piece) CHECK(v == (*src)[at++]);
  }
  pieces.clear();
  view->rangePieces(990, 10, &pieces);
  REQUIRE(pieces.size() == 1);
  CHECK(pieces[0][9] == (*src)[999]);
}

TEST_CASE("tensor view: chunks that split a float are reassembled, not misread") {
  auto src = ramp(100);
  auto msg = roundTrip(src, 6);  // 6-byte chunks: floats straddle frames
  REQUIRE(msg.isOk());
  auto view = msg->viewTensor(0, 100);
  REQUIRE(view.isOk());
  CHECK(flatten(*view) == *src);
}

TEST_CASE("tensor view: a wrong element count or tensor index is refused") {
  auto msg = roundTrip(ramp(10), 1024);
  REQUIRE(msg.isOk());
  auto wrong = msg->viewTensor(0, 11);
  CHECK(wrong.status().code() == Code::kInvalidArgument);
  CHECK(wrong.status().message().find("expected 11") != std::string::npos);
  CHECK(msg->viewTensor(1, 10).status().code() == Code::kInvalidArgument);
}

TEST_CASE("tensor view: a non-finite element makes sumSquares non-finite and is counted") {
  auto src = ramp(600);
  (*src)[10] = std::numeric_limits<float>::quiet_NaN();
  (*src)[500] = std::numeric_limits<float>::infinity();
  auto msg = roundTrip(src, 1024);
  REQUIRE(msg.isOk());
  auto view = msg->viewTensor(0, 600);
  REQUIRE(view.isOk());
  CHECK_FALSE(std::isfinite(sumSquares(*view)));
  CHECK(countNonFinite(*view) == 2);
}

TEST_CASE("tensor view: huge finite values keep sumSquares finite") {
  auto src = std::make_shared<std::vector<float>>(1000, std::numeric_limits<float>::max());
  auto msg = roundTrip(src, 1024);
  REQUIRE(msg.isOk());
  auto view = msg->viewTensor(0, 1000);
  REQUIRE(view.isOk());
  CHECK(std::isfinite(sumSquares(*view)));
}

TEST_CASE("tensor view: an empty tensor has no parts") {
  auto msg = roundTrip(std::make_shared<std::vector<float>>(), 1024);
  REQUIRE(msg.isOk());
  auto view = msg->viewTensor(0, 0);
  REQUIRE(view.isOk());
  CHECK(view->parts.empty());
  CHECK(sumSquares(*view) == 0);
}
