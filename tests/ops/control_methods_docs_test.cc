// docs/operations.md's method table lists exactly the control methods the server accepts,
// with the same admin column.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <string>

#include "groupsgd/ops/control_protocol.h"

using namespace groupsgd::ops;

TEST_CASE("control methods: docs/operations.md documents each method and its admin flag") {
  std::ifstream in(std::string(GROUPSGD_DOCS_DIR) + "/operations.md");
  REQUIRE(in);
  std::map<std::string, bool> documented;
  std::string line;
  bool in_methods = false, in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) in_methods = line == "### Methods";
    if (in_table && line.rfind("|", 0) != 0) break;  // the first table only
    if (!in_methods || line.rfind("| `", 0) != 0) continue;
    in_table = true;
    const auto name_end = line.find('`', 3);
    REQUIRE(name_end != std::string::npos);
    const std::string name = line.substr(3, name_end - 3);
    const auto admin = line.find("| ", name_end);
    REQUIRE(admin != std::string::npos);
    documented[name] = line.compare(admin + 2, 3, "yes") == 0;
  }
  const auto methods = defaultControlMethods();
  CHECK(documented.size() == methods.size());
  for (const auto& m : methods) {
    CAPTURE(m.name);
    REQUIRE(documented.count(m.name) == 1);
    CHECK(documented[m.name] == m.admin);
  }
}

TEST_CASE("control methods: docs/jobs.md documents each job method and its admin flag") {
  std::ifstream in(std::string(GROUPSGD_DOCS_DIR) + "/jobs.md");
  REQUIRE(in);
  std::map<std::string, bool> documented;
  std::string line;
  bool in_section = false, in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) in_section = line.rfind("## Control API", 0) == 0;
    if (in_table && line.rfind("|", 0) != 0) break;
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    in_table = true;
    const auto name_end = line.find('`', 3);
    REQUIRE(name_end != std::string::npos);
    const auto admin = line.find("| ", name_end);
    REQUIRE(admin != std::string::npos);
    documented[line.substr(3, name_end - 3)] = line.compare(admin + 2, 3, "yes") == 0;
  }
  const auto methods = jobControlMethods();
  CHECK(documented.size() == methods.size());
  for (const auto& m : methods) {
    CAPTURE(m.name);
    REQUIRE(documented.count(m.name) == 1);
    CHECK(documented[m.name] == m.admin);
  }
}
