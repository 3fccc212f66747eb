// groupsgd-sim: drives the adaptive coordinator's policy with synthetic workers (8 to
// 10,000) and prints one JSON object per window (--per-window) and a summary line.
#include <cstdio>
#include <string>
#include <vector>

#include "groupsgd/daemon/simulator.h"

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
)";

bool number(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

int main(int argc, char** argv) {
  groupsgd::daemon::SimConfig c;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--per-window") {
      c.per_window = true;
      continue;
    }
    if (i + 1 >= args.size()) {
      std::fprintf(stderr, "groupsgd-sim: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = args[++i];
    double x = 0;
    if (a == "--scenario") {
      c.scenario = v;
      continue;
    }
    if (!number(v, &x) || x < 0) {
      std::fprintf(stderr, "groupsgd-sim: %s expects a non-negative number, got '%s'\n", a.c_str(), v.c_str());
      return 2;
    }
    if (a == "--workers") c.workers = static_cast<std::uint32_t>(x);
    else if (a == "--windows") c.windows = static_cast<std::uint32_t>(x);
    else if (a == "--slowdown") c.slowdown = x;
    else if (a == "--link-ms") c.link_ms = x;
    else if (a == "--stragglers") c.stragglers = static_cast<std::uint32_t>(x);
    else if (a == "--noise") c.noise = x;
    else if (a == "--seed") c.seed = static_cast<std::uint64_t>(x);
    else if (a == "--min-batch") c.adaptive.min_batch = static_cast<std::uint32_t>(x);
    else {
      std::fprintf(stderr, "groupsgd-sim: unknown option '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  auto r = groupsgd::daemon::simulate(c);
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
