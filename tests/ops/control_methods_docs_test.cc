// docs/operations.md's method table lists exactly the control methods the server accepts,
// with the same admin column.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "groupsgd/ops/control_protocol.h"

using namespace groupsgd::ops;

namespace {

// The first method table in the section of docs/FILE whose heading line (one starting "#")
// `is_section` accepts: each method's name and whether its admin column says yes.
std::map<std::string, bool> documentedMethods(
    const std::string& file, const std::function<bool(const std::string&)>& is_section) {
  std::ifstream in(std::string(GROUPSGD_DOCS_DIR) + "/" + file);
  REQUIRE(in);
  std::map<std::string, bool> documented;
  std::string line;
  bool in_section = false, in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) in_section = is_section(line);
    if (in_table && line.rfind("|", 0) != 0) break;  // the first table only
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    in_table = true;
    const auto name_end = line.find('`', 3);
    REQUIRE(name_end != std::string::npos);
    const std::string name = line.substr(3, name_end - 3);
    const auto admin = line.find("| ", name_end);
    REQUIRE(admin != std::string::npos);
    documented[name] = line.compare(admin + 2, 3, "yes") == 0;
  }
  return documented;
}

// The table lists exactly `methods`, each with its admin flag.
template <typename Methods>
void checkDocumented(std::map<std::string, bool> documented, const Methods& methods) {
  CHECK(documented.size() == methods.size());
  for (const auto& m : methods) {
    CAPTURE(m.name);
    REQUIRE(documented.count(m.name) == 1);
    CHECK(documented[m.name] == m.admin);
  }
}

}  // namespace

TEST_CASE("control methods: docs/operations.md documents each method and its admin flag") {
  checkDocumented(
      documentedMethods("operations.md", [](const std::string& h) { return h == "### Methods"; }),
      defaultControlMethods());
}

TEST_CASE("control methods: docs/jobs.md documents each job method and its admin flag") {
  checkDocumented(
      documentedMethods("jobs.md",
                        [](const std::string& h) { return h.rfind("## Control API", 0) == 0; }),
      jobControlMethods());
}
