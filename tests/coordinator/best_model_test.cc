// Which evaluator report is the best (highest accuracy, or lowest loss under a target
// loss), and what the summary says about it and its file.
#include "groupsgd/coordinator/best_model.h"

#include <doctest/doctest.h>

using groupsgd::coordinator::BestModel;
using groupsgd::coordinator::Evaluation;

TEST_CASE("best model: highest accuracy wins; a repeated or worse report is not a new best") {
  BestModel b;
  CHECK_FALSE(b.offer({-1, -1, 3}, false));  // nothing measured
  CHECK(b.offer({0.30, 2.0, 1}, false));
  CHECK(b.offer({0.60, 2.5, 2}, false));        // better accuracy, worse loss: accuracy rules
  CHECK_FALSE(b.offer({0.60, 1.0, 3}, false));  // a tie keeps the earlier version
  CHECK_FALSE(b.offer({0.40, 0.5, 4}, false));
  CHECK_FALSE(b.offer({0.90, 0.5, 2}, false));  // version 2 again (the next heartbeat)
  REQUIRE(b.best().has_value());
  CHECK(b.best()->version == 2);
  CHECK(b.best()->accuracy == doctest::Approx(0.60));
}

TEST_CASE("best model: under a target loss (or without accuracies) the lowest loss wins") {
  BestModel by_loss;
  CHECK(by_loss.offer({0.30, 2.0, 1}, true));
  CHECK_FALSE(by_loss.offer({0.60, 2.5, 2}, true));
  CHECK(by_loss.offer({0.20, 1.5, 3}, true));
  CHECK(by_loss.best()->version == 3);
  BestModel loss_only;
  CHECK(loss_only.offer({-1, 3.0, 1}, false));
  CHECK(loss_only.offer({-1, 2.0, 2}, false));
  CHECK_FALSE(loss_only.offer({-1, 2.5, 3}, false));
  CHECK(loss_only.best()->version == 2);
}

TEST_CASE("best model: the summary names the file only once the best version is written") {
  BestModel b;
  auto s = b.summaryJson();
  CHECK(s["best_version"].is_null());
  CHECK(s["best_model_file"].is_null());
  b.offer({0.5, 1.0, 7}, false);
  CHECK(b.summaryJson()["best_model_file"].is_null());  // asked, not written yet
  b.written(7, "/ckpt/best.ckpt");
  CHECK(b.file() == "/ckpt/best.ckpt");
  b.offer({0.7, -1, 9}, false);  // a newer best: the file holds version 7 until 9 is written
  CHECK(b.file().empty());
  b.notWritten(9, "version 9 is no longer held");
  s = b.summaryJson();
  CHECK(s["best_version"] == 9);
  CHECK(s["best_test_acc"].get<double>() == doctest::Approx(0.7));
  CHECK(s["best_test_loss"].is_null());
  CHECK(s["best_model_file"].is_null());
  CHECK(s["best_model_error"] == "version 9 is no longer held");
  b.written(9, "/ckpt/best.ckpt");
  b.written(7, "/ckpt/best.ckpt");  // an older write answering late changes nothing
  CHECK(b.summaryJson()["best_model_file"] == "/ckpt/best.ckpt");
}
