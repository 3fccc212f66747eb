// groupsgd-sim: drives the adaptive coordinator's policy with synthetic workers (8 to
// 10,000) and prints one JSON object per window (--per-window) and a summary line.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "groupsgd/adaptive/simulator.h"

namespace {

const char* kUsage = R"(usage: groupsgd-sim [options]
  --workers N        simulated workers (default 8)
  --windows W        control windows to simulate (default 120)
  --scenario S       steady | straggler | link | recover | drift | lognormal | alternate
                     (default straggler)
  --slowdown F       straggler slowdown (default 4)
  --link-ms L        link scenario: extra ms per step (default 40)
  --stragglers K     workers the scenario affects (default 1)
  --noise X          relative noise of each observation (default 0.05)
  --seed S           random seed (default 1)
  --min-batch B      adaptive min_batch (default 4)
  --per-window       print one JSON object per window before the summary
  --help             this text
Options also take --flag=value.
)";

// CLI11's NonNegativeNumber would print its whole range in the message.
const CLI::Validator kNonNegative(
    [](std::string& v) {
      return !v.empty() && v[0] == '-' ? "must be a non-negative number, got " + v : std::string();
    },
    "", "non-negative");

}  // namespace

int main(int argc, char** argv) {
  groupsgd::adaptive::SimConfig c;
  CLI::App app("groupsgd-sim");
  app.set_help_flag();  // kUsage is the help
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  bool help = false;
  app.add_flag("-h,--help", help);
  app.add_flag("--per-window", c.per_window);
  app.add_option("--scenario", c.scenario);
  app.add_option("--workers", c.workers)->check(kNonNegative);
  app.add_option("--windows", c.windows)->check(kNonNegative);
  app.add_option("--slowdown", c.slowdown)->check(kNonNegative);
  app.add_option("--link-ms", c.link_ms)->check(kNonNegative);
  app.add_option("--stragglers", c.stragglers)->check(kNonNegative);
  app.add_option("--noise", c.noise)->check(kNonNegative);
  app.add_option("--seed", c.seed)->check(kNonNegative);
  app.add_option("--min-batch", c.adaptive.min_batch)->check(kNonNegative);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "groupsgd-sim: %s (see --help)\n", e.what());
    return 2;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto r = groupsgd::adaptive::simulate(c);
  if (!r) {
    std::fprintf(stderr, "groupsgd-sim: %s\n", r.status().message().c_str());
    return 2;
  }
  for (const auto& w : r->windows) std::printf("%s\n", w.dump().c_str());
  auto s = r->summary();
  s["workers"] = c.workers;
  s["scenario"] = c.scenario;
  s["windows"] = c.windows;
  std::printf("%s\n", s.dump().c_str());
  return 0;
}
