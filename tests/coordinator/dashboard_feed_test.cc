// The dashboard's memory of a run (dashboard_feed.h): the bounded history that thins out
// instead of forgetting the start, samples/s and per-interval staleness from running
// totals, membership changes only, and straggler marks read from the run's events.
#include "groupsgd/coordinator/dashboard_feed.h"

#include <doctest/doctest.h>

using groupsgd::coordinator::DashboardFeed;
using groupsgd::coordinator::DashboardPoint;

TEST_CASE("dashboard feed: samples/s between points; stride respected") {
  DashboardFeed feed(16, 1.0);
  feed.sample({.t_s = 0, .samples = 0});
  feed.sample({.t_s = 0.5, .samples = 500});  // within the stride: not kept
  feed.sample({.t_s = 1, .samples = 1000});
  feed.sample({.t_s = 3, .samples = 2000});
  const auto h = feed.historyJson();
  CHECK(h["t_s"] == nlohmann::json({0.0, 1.0, 3.0}));
  CHECK(h["samples_per_s"][0].is_null());  // no interval before the first point
  CHECK(h["samples_per_s"][1] == 1000.0);
  CHECK(h["samples_per_s"][2] == 500.0);
  CHECK(h["staleness_mean"][0].is_null());  // the central PS not heard from yet
}

TEST_CASE("dashboard feed: a full history keeps every other point and doubles its stride") {
  DashboardFeed feed(8, 1.0);
  for (int t = 0; t < 8; ++t) feed.sample({.t_s = double(t), .samples = 100.0 * t});
  CHECK(feed.points() == 5);  // hit 8: thinned
  CHECK(feed.strideS() == 2.0);
  auto h = feed.historyJson();
  CHECK(h["t_s"] == nlohmann::json({0.0, 2.0, 4.0, 6.0, 7.0}));  // the first and newest stay
  CHECK(h["samples_per_s"][1] == 100.0);                         // recomputed over 2 s
  feed.sample({.t_s = 8, .samples = 800});                       // under the new stride
  CHECK(feed.points() == 5);
  feed.sample({.t_s = 9, .samples = 900});
  CHECK(feed.points() == 6);
  // Hours of points stay bounded.
  for (int t = 10; t < 100000; ++t) feed.sample({.t_s = double(t), .samples = 100.0 * t});
  CHECK(feed.points() < 8);
  h = feed.historyJson();
  CHECK(h["t_s"][0] == 0.0);  // the start of the run is still there
  CHECK(h["t_s"][h["t_s"].size() - 1].get<double>() > 90000);
}

TEST_CASE("dashboard feed: staleness per interval from the central PS's running mean") {
  DashboardFeed feed(16, 1.0);
  feed.noteCentral(/*mean=*/2.0, /*applied=*/10, /*max=*/4);
  feed.sample({.t_s = 1});
  feed.noteCentral(/*mean=*/3.0, /*applied=*/20, /*max=*/7);  // the new 10 averaged 4
  feed.sample({.t_s = 2});
  feed.sample({.t_s = 3});  // nothing merged since
  const auto h = feed.historyJson();
  CHECK(h["staleness_mean"][0] == 2.0);
  CHECK(h["staleness_mean"][1] == 4.0);
  CHECK(h["staleness_mean"][2].is_null());
  CHECK(h["staleness_max"] == nlohmann::json({4.0, 7.0, 7.0}));
}

TEST_CASE("dashboard feed: membership changes and straggler marks") {
  DashboardFeed feed(4, 1.0);
  feed.noteMembership(0, {{"w1", 0}, {"w2", 0}});
  feed.noteMembership(1, {{"w1", 0}, {"w2", 0}});  // unchanged: not kept
  feed.noteMembership(2, {{"w1", 1}, {"w2", 0}});
  auto m = feed.membershipJson();
  REQUIRE(m.size() == 2);
  CHECK(m[1]["t_s"] == 2.0);
  CHECK(m[1]["groups"]["w1"] == 1);
  feed.noteMembership(3, {{"w1", 0}});
  feed.noteMembership(4, {{"w1", 1}});
  feed.noteMembership(5, {{"w1", 0}});
  CHECK(feed.membershipJson().size() == 4);  // the newest `capacity` changes
  CHECK(feed.membershipJson()[0]["t_s"] == 2.0);

  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"t_s", 1.0}, {"kind", "stage"}, {"text", "-> fine"}});
  events.push_back({{"t_s", 2.0},
                    {"kind", "straggler"},
                    {"text", "w1 is a straggler"},
                    {"worker", 7},
                    {"onset", true}});
  feed.readEvents(events);
  REQUIRE(feed.straggler(7) != nullptr);
  CHECK(feed.straggler(7)->flagged);
  CHECK(feed.straggler(7)->reason == "w1 is a straggler");
  CHECK(feed.straggler(8) == nullptr);
  events.push_back({{"t_s", 5.0},
                    {"kind", "straggler"},
                    {"text", "w1 recovered"},
                    {"worker", 7},
                    {"onset", false}});
  feed.readEvents(events);  // only the new event is read
  CHECK_FALSE(feed.straggler(7)->flagged);
  CHECK(feed.straggler(7)->t_s == 5.0);
}
