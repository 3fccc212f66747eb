// Prints a MetricsRegistry exposition holding what a live daemon does not (yet) show:
// a histogram, a help text and label values with quotes, backslashes, newlines and
// UTF-8, special values; prometheus_test.py's check_metrics case feeds it to promtool.
#include <cstdio>
#include <limits>

#include "groupsgd/ops/metrics.h"

int main() {
  using groupsgd::ops::MetricsRegistry;
  MetricsRegistry r;
  r.setBuildInfo("0.1.0-test \"quoted\"");
  r.counter("bad_messages_total", "Refused messages.\nSecond line with a \\ backslash.",
            {{"role", "group \"g\"\n\\"}})
      .inc(2);
  r.gauge("label_text", "Label values in UTF-8.", {{"name", "wörker-β ✓"}}).set(1);
  r.gauge("special_values", "NaN and infinities.", {{"v", "nan"}})
      .set(std::numeric_limits<double>::quiet_NaN());
  r.gauge("special_values", "NaN and infinities.", {{"v", "inf"}})
      .set(std::numeric_limits<double>::infinity());
  r.gauge("special_values", "NaN and infinities.", {{"v", "-inf"}})
      .set(-std::numeric_limits<double>::infinity());
  r.gauge("special_values", "NaN and infinities.", {{"v", "tiny"}}).set(1e-300);
  auto& step = r.histogram("group_step_seconds", "Time to close a group step.",
                           MetricsRegistry::defaultSecondsBuckets(), {{"group", "0"}});
  for (double s : {0.0005, 0.01, 0.3, 7.0, 100.0}) step.observe(s);
  r.histogram("idle_seconds", "Observed nothing yet.", {0.5, 1});
  std::fputs(r.render().c_str(), stdout);
  return 0;
}
