// Reconciling a trainer's own count with its groups' (trainer_accounting.h).
#include "groupsgd/coordinator/trainer_accounting.h"

#include <doctest/doctest.h>

using groupsgd::coordinator::reconcileTrainer;
using groupsgd::coordinator::TrainerCounts;

TEST_CASE("a push counted by its group whose answer timed out is credited, not lost") {
  // The worker reported 640 samples; one 32-sample push got no answer in time, but its
  // group had counted it: the groups' 672 is what was trained.
  TrainerCounts c{640, 32, 672, /*final_report=*/true, /*in_failed_group=*/false};
  auto r = reconcileTrainer(c);
  CHECK(r.credited == 672);
  CHECK(r.counted_unanswered == 32);
  CHECK(r.consistent);
  // The same push refused (never counted): the report stands.
  r = reconcileTrainer({640, 32, 640, true, false});
  CHECK(r.credited == 640);
  CHECK(r.counted_unanswered == 0);
  CHECK(r.consistent);
}

TEST_CASE("a report the groups' count cannot explain is inconsistent") {
  // The groups counted more than the worker pushed without an answer.
  CHECK_FALSE(reconcileTrainer({640, 32, 704, true, false}).consistent);
  // The worker claims samples no group counted.
  CHECK_FALSE(reconcileTrainer({640, 0, 608, true, false}).consistent);
}

TEST_CASE("dead workers are credited by their groups; failed-group members by their report") {
  auto dead = reconcileTrainer({100, 0, 160, /*final_report=*/false, false});
  CHECK(dead.credited == 160);
  CHECK(dead.consistent);
  // In a failed group: its report, plus its unanswered pushes when it left normally (the
  // failed group may have counted them; the summary bounds what was lost).
  CHECK(reconcileTrainer({640, 32, 0, true, true}).credited == 672);
  CHECK(reconcileTrainer({640, 32, 0, false, true}).credited == 640);
  // Moved to a live group, declared dead: the live group counted pushes its last
  // heartbeat had not reported yet.
  CHECK(reconcileTrainer({640, 0, 704, false, true}).credited == 704);
  CHECK(reconcileTrainer({640, 0, 320, false, true}).credited == 640);
}
