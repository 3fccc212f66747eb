// One table of {value, name} pairs per enum, from which both its name function and its
// parser are made, so the two cannot drift apart (a value added to one but not the other).
// Thread rule: constexpr and stateless; safe from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace groupsgd::base {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of v in table, or `unknown` for a value the table lacks (an out-of-range cast).
template <class E, std::size_t N>
constexpr const char* nameOf(const std::array<EnumName<E>, N>& table, E v,
                             const char* unknown = "unknown") {
  for (const auto& entry : table) {
    if (entry.value == v) return entry.name;
  }
  return unknown;
}

// The value named `text` exactly (case-sensitive), or nullopt.
template <class E, std::size_t N>
constexpr std::optional<E> parse(const std::array<EnumName<E>, N>& table, std::string_view text) {
  for (const auto& entry : table) {
    if (text == entry.name) return entry.value;
  }
  return std::nullopt;
}

// The same for the parsers that return bool and write *out (unchanged when false).
template <class E, std::size_t N>
constexpr bool parseInto(const std::array<EnumName<E>, N>& table, std::string_view text, E* out) {
  const std::optional<E> value = parse(table, text);
  if (value) *out = *value;
  return value.has_value();
}

}  // namespace groupsgd::base
