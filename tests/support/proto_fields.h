// Round-trip tests of the stats types: which fields of a Cap'n Proto struct still hold
// their default, so a schema field that toProto() forgets shows up by name.
// Thread rule: a pure function; any thread.
#pragma once

#include <string>
#include <vector>

#include <capnp/dynamic.h>

namespace groupsgd::testing {

template <typename Reader>
std::vector<std::string> fieldsLeftDefault(Reader reader) {
  capnp::DynamicStruct::Reader s = reader;
  std::vector<std::string> names;
  for (auto field : s.getSchema().getFields()) {
    if (!s.has(field, capnp::HasMode::NON_DEFAULT)) names.emplace_back(field.getProto().getName());
  }
  return names;
}

}  // namespace groupsgd::testing
