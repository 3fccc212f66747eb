// The option table against its users: docs/config.md lists exactly its keys and flags,
// --help shows every flag, toJson reports every key, and `set` / SIGHUP follow "live".
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "groupsgd/daemon/config_options.h"

using namespace groupsgd;
using namespace groupsgd::daemon;
using nlohmann::json;

namespace {

// `x` spans of a Markdown table cell.
std::vector<std::string> codeSpans(const std::string& cell) {
  std::vector<std::string> out;
  for (std::size_t a = cell.find('`'); a != std::string::npos; a = cell.find('`', a + 1)) {
    const std::size_t b = cell.find('`', a + 1);
    if (b == std::string::npos) break;
    out.push_back(cell.substr(a + 1, b - a - 1));
    a = b;
  }
  return out;
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::stringstream in(row.substr(1));
  std::string cell;
  while (std::getline(in, cell, '|')) out.push_back(cell);
  return out;
}

// JSON key -> flags, from the table rows of docs/config.md's "## groupsgdd" section.
std::map<std::string, std::set<std::string>> documentedOptions() {
  std::ifstream in(std::string(GROUPSGD_DOCS_DIR) + "/config.md");
  REQUIRE(in);
  std::map<std::string, std::set<std::string>> keys;
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## groupsgdd";
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    const auto row = cells(line);
    REQUIRE(row.size() >= 2);
    const auto key = codeSpans(row[0]);
    REQUIRE(key.size() == 1);
    auto& flags = keys[key[0]];
    for (const auto& f : codeSpans(row[1])) {
      if (f.rfind("--", 0) == 0) flags.insert(f);
    }
  }
  return keys;
}

}  // namespace

TEST_CASE("option table: docs/config.md documents every key and flag, and nothing else") {
  const auto documented = documentedOptions();
  for (const auto& o : daemonOptions()) {
    CAPTURE(o.key);
    REQUIRE(documented.count(o.key) == 1);
    const std::set<std::string> flags =
        o.flag.empty() ? std::set<std::string>{} : std::set<std::string>{o.flag};
    CHECK(documented.at(o.key) == flags);
  }
  for (const auto& [key, flags] : documented) {
    CAPTURE(key);
    CHECK(findOption(key) != nullptr);
  }
}

TEST_CASE("option table: keys and flags are unique, and every flag is in --help") {
  std::set<std::string> keys, flags;
  const std::string usage = daemonUsage();
  for (const auto& o : daemonOptions()) {
    CAPTURE(o.key);
    CHECK(keys.insert(o.key).second);
    CHECK_FALSE(o.help.empty());
    if (o.flag.empty()) continue;
    CHECK(flags.insert(o.flag).second);
    CHECK(usage.find("  " + o.flag + " ") != std::string::npos);
  }
  CHECK(usage.find("--job-id") != std::string::npos);  // was missing from the hand-kept text
}

TEST_CASE("option table: toJson reports every key, and each reads back") {
  DaemonConfig cfg;
  const json j = toJson(cfg);
  for (const auto& o : daemonOptions()) {
    CAPTURE(o.key);
    std::string pointer = "/" + o.key;
    for (char& ch : pointer) ch = ch == '.' ? '/' : ch;
    REQUIRE(j.contains(json::json_pointer(pointer)));
    DaemonConfig back;
    CHECK_NOTHROW(o.read(j.at(json::json_pointer(pointer)), &back));
  }
  DaemonConfig again;
  CHECK(applyJson(j, &again).isOk());
  CHECK(toJson(again) == j);
}

TEST_CASE("option table: a flag sets the option it names, with a space or an equals sign") {
  DaemonConfig a, b;
  bool help = false;
  REQUIRE(
      applyFlags({"--workers", "6", "--lr", "0.5", "--curve-allow-file", "/k"}, &a, &help).isOk());
  REQUIRE(applyFlags({"--workers=6", "--lr=0.5", "--curve-allow-file=/k"}, &b, &help).isOk());
  for (const DaemonConfig* c : {&a, &b}) {
    CHECK(c->workers == 6);
    CHECK(c->optimizer.lr == 0.5f);
    CHECK(c->curve_allow_file == "/k");
  }
  CHECK(applyFlags({"--workers="}, &a, &help).code() == Code::kInvalidArgument);
}

TEST_CASE("option table: a dotted key is only accepted inside its object") {
  DaemonConfig cfg;
  CHECK(applyJson(json::parse(R"({"adaptive": {"control_ms": 7}})"), &cfg).isOk());
  CHECK(cfg.adaptive.control_ms == 7);
  CHECK(applyJson(json::parse(R"({"adaptive.control_ms": 8})"), &cfg).code() ==
        Code::kInvalidArgument);
  CHECK(applyJson(json::parse(R"({"adaptive": 8})"), &cfg).code() == Code::kInvalidArgument);
}

TEST_CASE("option table: set takes live keys only, SIGHUP re-reads the set-and-reload ones") {
  CHECK(checkSettable(json{{"target_acc", 0.5}, {"adaptive", {{"min_gain", 0.2}}}}).isOk());
  CHECK(checkSettable(json{{"progress_ms", 10}}).isOk());
  const Status refused = checkSettable(json{{"workers", 3}});
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK(refused.message().find("'workers'") != std::string::npos);
  CHECK(refused.message().find("step_deadline_ms") != std::string::npos);  // lists live keys
  // Inside an object only the members given must be live; "a.b" names one directly.
  CHECK(checkSettable(json{{"optimizer", {{"lr", 1}}}}).isOk());
  CHECK(checkSettable(json{{"optimizer.lr", 0.01}}).isOk());
  const Status kind = checkSettable(json{{"optimizer", {{"lr", 1}, {"kind", "sgd"}}}});
  CHECK(kind.code() == Code::kInvalidArgument);
  CHECK(kind.message().find("'optimizer.kind'") != std::string::npos);
  CHECK(checkSettable(json{{"optimizer.schedule", "cosine"}}).code() == Code::kInvalidArgument);
  CHECK(checkSettable(json{{"optimizer", 1}}).code() == Code::kInvalidArgument);
  CHECK(checkSettable(json{{"optimizer.nonsense", 1}}).code() == Code::kInvalidArgument);
  CHECK(checkSettable(json{{"nonsense", 1}}).code() == Code::kInvalidArgument);

  DaemonConfig fresh;
  fresh.target_acc = 0.7;
  fresh.progress_ms = 5;  // set only: not re-read on SIGHUP
  const json patch = reloadableSettings(fresh);
  CHECK(patch["target_acc"] == 0.7);
  CHECK_FALSE(patch.contains("progress_ms"));
  CHECK_FALSE(patch.contains("heartbeat_misses"));
  CHECK(patch["adaptive"].contains("control_ms"));
  CHECK(checkSettable(patch).isOk());
}

TEST_CASE("option table: set's \"a.b\" keys become the members applyJson reads") {
  const json nested = nestedSettings(json{{"optimizer.lr", 0.01}, {"max_seconds", 5}});
  CHECK(nested == json{{"optimizer", {{"lr", 0.01}}}, {"max_seconds", 5}});
  DaemonConfig cfg;
  REQUIRE(applyJson(nested, &cfg).isOk());
  CHECK(cfg.optimizer.lr == 0.01f);
  CHECK(cfg.optimizer.kind == DaemonConfig{}.optimizer.kind);  // the rest of the object kept
  // An unknown dotted key stays as it is, for applyJson to refuse by name.
  CHECK(nestedSettings(json{{"no.such", 1}}) == json{{"no.such", 1}});
}

TEST_CASE("option table: ranges name the key and the bound") {
  DaemonConfig cfg;
  cfg.batch_size = 0;
  Status s = checkRanges(cfg);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("batch_size must be in [1, 65536]") != std::string::npos);
  cfg = DaemonConfig{};
  cfg.give_up_s = 0;
  CHECK(checkRanges(cfg).message().find("give_up_s must be > 0") != std::string::npos);
  cfg = DaemonConfig{};
  cfg.quarantine_window_s = 86401;
  CHECK(checkRanges(cfg).message().find("quarantine_window_s") != std::string::npos);
  CHECK(checkRanges(DaemonConfig{}).isOk());
}
