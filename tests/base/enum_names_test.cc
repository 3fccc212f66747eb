#include "groupsgd/base/enum_names.h"

#include <doctest/doctest.h>

#include <string>

using namespace groupsgd::base;

namespace {

enum class Colour { kRed, kGreen, kBlue };

constexpr std::array<EnumName<Colour>, 2> kColourNames{{
    {Colour::kRed, "red"},
    {Colour::kGreen, "green"},
}};

}  // namespace

TEST_CASE("enum names: name and parse go both ways; a missing value gets the fallback") {
  static_assert(std::string_view(nameOf(kColourNames, Colour::kGreen)) == "green");
  CHECK(std::string(nameOf(kColourNames, Colour::kRed)) == "red");
  CHECK(std::string(nameOf(kColourNames, Colour::kBlue)) == "unknown");
  CHECK(std::string(nameOf(kColourNames, Colour::kBlue, "?")) == "?");
  CHECK(parse(kColourNames, "green") == Colour::kGreen);
  CHECK_FALSE(parse(kColourNames, "Green").has_value());  // exact, case-sensitive
  CHECK_FALSE(parse(kColourNames, "").has_value());
  Colour c = Colour::kBlue;
  CHECK_FALSE(parseInto(kColourNames, "blue", &c));
  CHECK(c == Colour::kBlue);  // unchanged when false
  CHECK(parseInto(kColourNames, "red", &c));
  CHECK(c == Colour::kRed);
}
