// The daemon's option table: one descriptor per option (JSON key, flag, type, range,
// whether it can change at run time, whether a group PS reads it, help). The JSON reader,
// the command-line flags, toJson, `groupsgdd --help`, range checks, the coordinator's
// run-time settings and the group PSes' settings are all generated from it, so adding an option is
// one line in config_options.cc (plus the DaemonConfig field and its row in docs/config.md, which a
// test compares with the table). Thread rule: the table is built once on first use and read-only
// after; any thread.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::daemon {

// What a flag's value is on the command line (and the JSON type of the key).
enum class OptionType { kCount, kInteger, kReal, kBool, kString, kChoice };

// When a changed value takes effect: at the next start only, through the control method
// `set`, or through `set` and also on SIGHUP from the --config file.
enum class Live { kRestart, kSet, kSetAndReload };

// Whether a group PS reads an option: at its start (groupServerConfig(), fixed for its
// life; node daemons get these with a job's settings), in every GroupConfig the
// coordinator sends (a run-time change reconfigures the groups), or both.
enum class GroupPs { kNo, kAtStart, kInGroupConfig, kBoth };
inline bool readAtStart(GroupPs r) { return r == GroupPs::kAtStart || r == GroupPs::kBoth; }
inline bool readInGroupConfig(GroupPs r) {
  return r == GroupPs::kInGroupConfig || r == GroupPs::kBoth;
}

// An inclusive numeric range, optionally open at the bottom (for "> 0").
struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;
  bool any() const {
    return min > -std::numeric_limits<double>::infinity() ||
           max < std::numeric_limits<double>::infinity();
  }
};

struct OptionSpec {
  std::string key;         // JSON key; "a.b" is member b of the object a
  std::string flag;        // "--name", or "" for an option only the JSON file sets
  std::string value_name;  // how --help names the value (N, S, FILE, ...)
  OptionType type = OptionType::kString;
  Range range;  // checked by validate(); unbounded when empty
  Live live = Live::kRestart;
  GroupPs group_ps = GroupPs::kNo;
  std::string help;
  // Reads a JSON value into the field; throws OptionError naming the key when it does not fit.
  std::function<void(const nlohmann::json&, DaemonConfig*)> read;
  std::function<nlohmann::json(const DaemonConfig&)> write;
};

struct OptionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every daemon option, in the order --help lists them.
const std::vector<OptionSpec>& daemonOptions();
const OptionSpec* findOption(const std::string& key);
const OptionSpec* findFlag(const std::string& flag);
// True when some option's key starts with prefix + "." (a JSON object of options).
bool isOptionObject(const std::string& prefix);

// The control method `set` accepts a live option's key (a nested one also as "a.b", e.g.
// optimizer.lr) and an object of options ({"adaptive": {...}}) whose given members are
// all live.
Status checkSettable(const nlohmann::json& values);
// The same values with each "a.b" key of an option as the member b of the object a, the
// form applyJson reads (a member already given as {"a": {...}} is overwritten by "a.b").
nlohmann::json nestedSettings(const nlohmann::json& values);
// The values a SIGHUP re-reads from the configuration file, as a JSON patch.
nlohmann::json reloadableSettings(const DaemonConfig& fresh);
// Checks each option's range; the first violation names its key.
Status checkRanges(const DaemonConfig& cfg);
// The options a group PS reads at its start, with their toJson() values, in config-file
// form (nested objects).
nlohmann::json groupPsStartSettings(const DaemonConfig& cfg);
// True when some option a group PS reads from every GroupConfig differs between a and b.
bool groupConfigSettingsDiffer(const DaemonConfig& a, const DaemonConfig& b);

}  // namespace groupsgd::daemon
