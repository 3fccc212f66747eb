// EvaluatorWatch: whether accuracy is measured, since when not, and what a
// replacement resumes from (the coordinator's evaluator supervision).
#include "groupsgd/coordinator/evaluator_watch.h"

#include <doctest/doctest.h>

using groupsgd::coordinator::EvaluatorWatch;
using groupsgd::ops::MetricsRegistry;

TEST_CASE("evaluator watch: before any evaluator nothing is reported as lost") {
  EvaluatorWatch w;
  CHECK_FALSE(w.measuring());
  CHECK(w.progressNote(5.0).empty());
  CHECK(w.statusJson(5.0)["state"] == "no evaluator yet");
  CHECK(w.lost(7, "e", "left", 5.0, {}).empty());  // never registered: nothing to lose
  CHECK(w.losses() == 0);
}

TEST_CASE("evaluator watch: the only evaluator lost, then replaced") {
  MetricsRegistry metrics;
  EvaluatorWatch w;
  w.attachMetrics(&metrics);
  w.joined(2, "evaluator", 1.0, {});
  CHECK(w.measuring());
  CHECK(w.statusJson(1.0)["state"] == "measuring");
  CHECK(metrics.gauge("accuracy_measured", "").value() == 1);

  const std::string lost =
      w.lost(2, "evaluator", "missed its heartbeats: declared dead", 6.0, {0.8123, 120});
  CHECK(lost.find("evaluator 2 (evaluator) missed its heartbeats") == 0);
  CHECK(lost.find("accuracy no longer measured") != std::string::npos);
  CHECK(lost.find("0.8123 at central version 120") != std::string::npos);
  CHECK_FALSE(w.measuring());
  CHECK(w.unmeasuredSince() == 6.0);
  CHECK(w.progressNote(9.5) == " (not measured for 3.5 s: evaluator lost)");
  auto st = w.statusJson(9.5);
  CHECK(st["state"] == "lost");
  CHECK(st["accuracy_measured"] == false);
  CHECK(st["unmeasured_for_s"].get<double>() == doctest::Approx(3.5));
  CHECK(metrics.gauge("accuracy_measured", "").value() == 0);
  CHECK(metrics.counter("evaluator_losses_total", "").value() == 1);
  // The same evaluator reported again (e.g. its Leave after being declared
  // dead): no news.
  CHECK(w.lost(2, "evaluator", "left", 7.0, {}).empty());
  CHECK(w.losses() == 1);

  const std::string back = w.joined(5, "evaluator", 10.0, {0.8123, 120});
  CHECK(back.find("replaces the lost evaluator") != std::string::npos);
  CHECK(back.find("after 4.0 s without") != std::string::npos);
  CHECK(w.measuring());
  CHECK(w.progressNote(11.0).empty());
  CHECK(w.replacements() == 1);
  auto sum = w.summaryJson(20.0);
  CHECK(sum["evaluators_registered"] == 2);
  CHECK(sum["evaluators_lost"] == 1);
  CHECK(sum["unmeasured_total_s"].get<double>() == doctest::Approx(4.0));
  REQUIRE(sum["gaps"].size() == 1);
  CHECK(sum["gaps"][0]["replaced_by"] == 5);
  CHECK(sum["gaps"][0]["last_version"] == 120);
  CHECK(metrics.gauge("evaluators_active", "").value() == 1);
}

TEST_CASE("evaluator watch: with two evaluators one loss leaves accuracy measured") {
  EvaluatorWatch w;
  w.joined(3, "a", 0.0, {});
  w.joined(4, "b", 0.0, {});
  const std::string lost = w.lost(3, "a", "left", 2.0, {0.5, 10});
  CHECK(lost.find("1 evaluator(s) still measure") != std::string::npos);
  CHECK(w.measuring());
  CHECK_FALSE(w.unmeasuredSince().has_value());
  CHECK(w.summaryJson(3.0)["gaps"].empty());
  // An open gap counts towards the total until it closes.
  w.lost(4, "b", "left", 4.0, {0.6, 12});
  CHECK(w.summaryJson(6.0)["unmeasured_total_s"].get<double>() == doctest::Approx(2.0));
}
