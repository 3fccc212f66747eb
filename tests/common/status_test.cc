#include "groupsgd/common/status.h"

#include <doctest/doctest.h>

using namespace groupsgd;

TEST_CASE("status: ok by default, error keeps code and message") {
  CHECK(Status().isOk());
  Status s = invalidArgument("bad size");
  CHECK_FALSE(s.isOk());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.toString() == "invalid_argument: bad size");
}

TEST_CASE("result: holds a value or a status") {
  Result<int> good = 7;
  REQUIRE(good.isOk());
  CHECK(*good == 7);
  Result<int> bad = notFound("no file");
  CHECK_FALSE(bad.isOk());
  CHECK(bad.status().code() == Code::kNotFound);
}
