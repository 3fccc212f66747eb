// The option table's group PS column against its readers: groupServerConfig() reads
// exactly the options marked as read at start, a node daemon's group PS built from the
// job's settings equals the job's own, and `set` reconfigures the groups exactly for the
// options marked as sent with every GroupConfig.
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "groupsgd/daemon/config_options.h"
#include "groupsgd/daemon/group_server_setup.h"

using namespace groupsgd;
using namespace groupsgd::daemon;
using nlohmann::json;

namespace {

// Every field of a GroupServerConfig (but the CURVE keys, an argument of
// groupServerConfig(), not an option), so two configurations compare as text. A field
// added to GroupServerConfig belongs here too, or an option read into it goes unseen.
std::string render(const groupps::GroupServerConfig& g) {
  std::ostringstream s;
  s << g.group_id << ' ' << g.central_endpoint << ' ' << static_cast<int>(g.optimizer.kind) << ' '
    << g.optimizer.lr << ' ' << g.optimizer.momentum << ' ' << g.optimizer.weight_decay << ' '
    << g.exchange_period << ' ' << g.step_deadline_ms << ' ' << g.exchange_timeout_ms << ' '
    << g.max_grad_norm << ' ' << g.delta_compression.toString() << ' ' << g.adopt_group_id << ' '
    << g.quarantine_after << ' ' << g.quarantine_window_ms << ' ' << g.limits.job_id << ' '
    << g.limits.any_job << ' ' << g.limits.max_header_bytes << ' ' << g.limits.max_tensor_bytes
    << ' ' << g.limits.max_tensors << ' ' << g.limits.max_frames << ' '
    << g.limits.traversal_limit_words << ' ' << g.limits.nesting_limit << ' '
    << g.limits.max_part_bytes << ' ' << g.limits.max_parts << ' ' << g.part_bytes << ' '
    << g.inbound_budget_models << ' ' << g.optimizer.beta1 << ' ' << g.optimizer.beta2 << ' '
    << g.optimizer.eps << ' ' << static_cast<int>(g.placement);
  for (const auto& r : g.no_decay) s << ' ' << r.begin << '-' << r.end;
  return s.str();
}

std::string groupPsOf(const DaemonConfig& cfg) {
  return render(groupServerConfig(cfg, 0, "tcp://central:1", CurveKeys{}));
}

// Grouped with K = 3, so both mode and exchange_period change the exchange period; no
// decay on 1-D tensors, so the model (their ranges) and decay_1d reach the group PS.
DaemonConfig base() {
  DaemonConfig cfg;
  cfg.optimizer_decay_1d = false;
  cfg.mode = Mode::kGrouped;
  cfg.exchange_period = 3;
  return cfg;
}

// Another value the option reads (compression specs and arbiter texts must parse).
json otherValue(const OptionSpec& o, const DaemonConfig& cfg) {
  const json v = o.write(cfg);
  switch (o.type) {
    case OptionType::kBool:
      return !v.get<bool>();
    case OptionType::kCount:
      return v.get<std::uint64_t>() + 1;
    case OptionType::kInteger:
      return v.get<std::int64_t>() + 1;
    case OptionType::kReal:
      return v.get<double>() + 1;
    case OptionType::kChoice: {
      std::stringstream names(o.help.substr(0, o.help.find(':')));
      std::string name;
      while (std::getline(names, name, '|')) {
        if (name != v.get<std::string>()) return name;
      }
      return v;
    }
    case OptionType::kString:
      for (const char* text : {"topk:0.5", "fifo", "1=2", "x"}) {
        DaemonConfig probe = cfg;
        try {
          o.read(text, &probe);
          return text;
        } catch (const OptionError&) {
        }
      }
      return v;
  }
  return v;
}

DaemonConfig changed(const OptionSpec& o) {
  DaemonConfig cfg = base();
  o.read(otherValue(o, cfg), &cfg);
  return cfg;
}

}  // namespace

TEST_CASE("group settings: groupServerConfig() reads exactly the options marked as read at start") {
  const std::string before = groupPsOf(base());
  for (const auto& o : daemonOptions()) {
    CAPTURE(o.key);
    const DaemonConfig cfg = changed(o);
    REQUIRE(o.write(cfg) != o.write(base()));  // the option did change
    const bool read = groupPsOf(cfg) != before;
    // The job id is the job's identity, not a setting: node daemons take it from the placement.
    if (o.key == "job_id") {
      CHECK(read);
      CHECK_FALSE(readAtStart(o.group_ps));
    } else {
      CHECK(read == readAtStart(o.group_ps));
    }
  }
}

TEST_CASE("group settings: a node daemon's group PS from the job's settings is the job's own") {
  for (const auto& o : daemonOptions()) {
    if (!readAtStart(o.group_ps)) continue;
    CAPTURE(o.key);
    const DaemonConfig job = changed(o);
    DaemonConfig node;
    REQUIRE(applyGroupSettings(groupSettingsJson(job), &node).isOk());
    node.job_id = job.job_id;
    CHECK(groupPsOf(node) == groupPsOf(job));
  }
}

TEST_CASE("group settings: the groups are reconfigured exactly for options sent with GroupConfig") {
  for (const auto& o : daemonOptions()) {
    CAPTURE(o.key);
    CHECK(groupConfigSettingsDiffer(base(), changed(o)) == readInGroupConfig(o.group_ps));
  }
}

TEST_CASE("group settings: decay_1d false gives the group PS the model's bias ranges") {
  DaemonConfig cfg = base();
  cfg.model = kernels::ModelKind::kCnn;
  CHECK(groupServerConfig(cfg, 0, "tcp://central:1", CurveKeys{}).no_decay ==
        kernels::oneDimParamRanges(kernels::ModelKind::kCnn));
  cfg.optimizer_decay_1d = true;
  CHECK(groupServerConfig(cfg, 0, "tcp://central:1", CurveKeys{}).no_decay.empty());
}
