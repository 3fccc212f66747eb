// Metrics: the exposition text checked against golden strings, naming rules, and the
// HTTP endpoint over loopback.
#include "groupsgd/ops/metrics.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "groupsgd/ops/metrics_server.h"

using namespace groupsgd;
using namespace groupsgd::ops;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

TEST_CASE("metrics: golden exposition text") {
  MetricsRegistry r;
  r.setBuildInfo("0.1.0");
  Counter& applied = r.counter("samples_applied_total", "Samples in deltas the central PS merged.");
  applied.inc(96);
  applied.inc();
  r.gauge("workers", "Registered workers by state.", {{"state", "active"}}).set(7);
  r.gauge("workers", "Registered workers by state.", {{"state", "draining"}}).set(1);
  r.gauge("workers", "ignored: the family's help is set once", {{"state", "active"}}).add(1);
  Histogram& step = r.histogram("group_step_seconds", "Time to close a group step.", {0.01, 0.1, 1},
                                {{"group", "0"}});
  step.observe(0.005);
  step.observe(0.01);  // on a bound: counts in that bucket (le)
  step.observe(0.5);
  step.observe(7);
  r.counter("bad_messages_total", "Refused messages.\nSecond line with a \\ backslash.",
            {{"role", "group \"g\"\n"}})
      .inc(2);
  r.gauge("empty_family", "Never gets a series.", {{"x", "1"}});
  r.remove("empty_family", {{"x", "1"}});

  CHECK(
      r.render() ==
      "# HELP groupsgd_build_info Build information; the value is always 1.\n"
      "# TYPE groupsgd_build_info gauge\n"
      "groupsgd_build_info{version=\"0.1.0\"} 1\n"
      "# HELP groupsgd_samples_applied_total Samples in deltas the central PS merged.\n"
      "# TYPE groupsgd_samples_applied_total counter\n"
      "groupsgd_samples_applied_total 97\n"
      "# HELP groupsgd_workers Registered workers by state.\n"
      "# TYPE groupsgd_workers gauge\n"
      "groupsgd_workers{state=\"active\"} 8\n"
      "groupsgd_workers{state=\"draining\"} 1\n"
      "# HELP groupsgd_group_step_seconds Time to close a group step.\n"
      "# TYPE groupsgd_group_step_seconds histogram\n"
      "groupsgd_group_step_seconds_bucket{group=\"0\",le=\"0.01\"} 2\n"
      "groupsgd_group_step_seconds_bucket{group=\"0\",le=\"0.1\"} 2\n"
      "groupsgd_group_step_seconds_bucket{group=\"0\",le=\"1\"} 3\n"
      "groupsgd_group_step_seconds_bucket{group=\"0\",le=\"+Inf\"} 4\n"
      "groupsgd_group_step_seconds_sum{group=\"0\"} 7.515\n"
      "groupsgd_group_step_seconds_count{group=\"0\"} 4\n"
      "# HELP groupsgd_bad_messages_total Refused messages.\\nSecond line with a \\\\ backslash.\n"
      "# TYPE groupsgd_bad_messages_total counter\n"
      "groupsgd_bad_messages_total{role=\"group \\\"g\\\"\\n\"} 2\n");
}

TEST_CASE("metrics: histogram _sum and _count carry the series labels") {
  MetricsRegistry r("t_");
  r.histogram("lat_seconds", "h", {1}).observe(0.5);
  CHECK(r.render() ==
        "# HELP t_lat_seconds h\n"
        "# TYPE t_lat_seconds histogram\n"
        "t_lat_seconds_bucket{le=\"1\"} 1\n"
        "t_lat_seconds_bucket{le=\"+Inf\"} 1\n"
        "t_lat_seconds_sum 0.5\n"
        "t_lat_seconds_count 1\n");
  MetricsRegistry l("t_");
  l.histogram("lat_seconds", "h", {1}, {{"g", "1"}}).observe(2);
  CHECK(l.render().find("t_lat_seconds_sum{g=\"1\"} 2\nt_lat_seconds_count{g=\"1\"} 1\n") !=
        std::string::npos);
}

TEST_CASE("metrics: series are sorted by label values; handles stay valid") {
  MetricsRegistry r;
  Gauge& b = r.gauge("g", "h", {{"w", "b"}});
  Gauge& a = r.gauge("g", "h", {{"w", "a"}});
  for (int i = 0; i < 100; ++i) r.gauge("g", "h", {{"w", "z" + std::to_string(i)}});
  a.set(1);
  b.set(2);
  const std::string text = r.render();
  CHECK(text.find("groupsgd_g{w=\"a\"} 1\ngroupsgd_g{w=\"b\"} 2\n") != std::string::npos);
  CHECK(&r.gauge("g", "h", {{"w", "a"}}) == &a);
  CHECK(r.remove("g", {{"w", "b"}}));
  CHECK(!r.remove("g", {{"w", "b"}}));
  CHECK(r.render().find("w=\"b\"") == std::string::npos);
}

TEST_CASE("metrics: invalid names and shapes are refused and never rendered") {
  MetricsRegistry r;
  r.counter("requests", "a counter without _total").inc();
  r.counter("bad-name_total", "dash").inc();
  MetricsRegistry bare("");
  bare.counter("9lives_total", "digit first").inc();
  CHECK(bare.render() == "");
  r.gauge("g", "bad label name", {{"__reserved", "x"}}).set(1);
  r.gauge("h", "le is reserved", {{"le", "x"}}).set(1);
  r.histogram("hist_seconds", "not increasing", {1, 0.5}).observe(1);
  r.histogram("nan_seconds", "non-finite bound", {std::nan("")}).observe(1);
  CHECK(r.render() == "");
  r.gauge("ok", "first", {{"a", "1"}}).set(1);
  r.counter("ok", "type clash").inc();                // same name, other type
  r.gauge("ok", "label clash", {{"b", "1"}}).set(5);  // other label names
  CHECK(r.render() ==
        "# HELP groupsgd_ok first\n# TYPE groupsgd_ok gauge\ngroupsgd_ok{a=\"1\"} 1\n");
}

TEST_CASE("metrics: counter only goes up; value formatting") {
  MetricsRegistry r;
  Counter& c = r.counter("c_total", "h");
  c.inc(2.5);
  c.inc(-1);
  c.inc(std::nan(""));
  c.inc(std::numeric_limits<double>::infinity());
  CHECK(c.value() == 2.5);
  CHECK(formatMetricValue(0) == "0");
  CHECK(formatMetricValue(-0.0) == "0");
  CHECK(formatMetricValue(42) == "42");
  CHECK(formatMetricValue(1e21) == "1e+21");
  CHECK(formatMetricValue(0.1) == "0.1");
  CHECK(formatMetricValue(-2.5) == "-2.5");
  CHECK(formatMetricValue(std::nan("")) == "NaN");
  CHECK(formatMetricValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(formatMetricValue(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(formatMetricValue(9007199254740993.0) == "9007199254740992");
}

namespace {

struct HttpReply {
  unsigned status = 0;
  std::string content_type;
  std::string content_length;
  std::string body;
};

HttpReply httpRequest(tcp::socket& sock, http::verb verb, const std::string& target,
                      bool keep_alive = true) {
  http::request<http::empty_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.keep_alive(keep_alive);
  http::write(sock, req);
  boost::beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.skip(verb == http::verb::head);
  http::read(sock, buf, parser);
  const auto& res = parser.get();
  HttpReply out;
  out.status = res.result_int();
  out.content_type = std::string(res[http::field::content_type]);
  out.content_length = std::string(res[http::field::content_length]);
  out.body = res.body();
  return out;
}

}  // namespace

TEST_CASE("metrics server: GET /metrics over loopback; 404 elsewhere; keep-alive") {
  MetricsRegistry r;
  r.setBuildInfo("test");
  Counter& scrapes = r.counter("test_events_total", "Events.");
  auto server = MetricsServer::start(r, {});
  REQUIRE_MESSAGE(server.isOk(), server.status().toString());
  const std::uint16_t port = (*server)->port();
  REQUIRE(port != 0);

  boost::asio::io_context io;
  tcp::socket sock(io);
  sock.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  scrapes.inc(3);
  HttpReply res = httpRequest(sock, http::verb::get, "/metrics");
  CHECK(res.status == 200);
  CHECK(res.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(res.body == r.render());
  CHECK(res.body.find("groupsgd_test_events_total 3\n") != std::string::npos);
  CHECK(res.body.find("groupsgd_build_info{version=\"test\"} 1\n") != std::string::npos);

  // Same connection: the server honours keep-alive.
  res = httpRequest(sock, http::verb::get, "/metrics?x=1");
  CHECK(res.status == 200);
  res = httpRequest(sock, http::verb::get, "/");
  CHECK(res.status == 404);
  res = httpRequest(sock, http::verb::get, "/metricsX");
  CHECK(res.status == 404);
  res = httpRequest(sock, http::verb::post, "/metrics");
  CHECK(res.status == 405);
  res = httpRequest(sock, http::verb::head, "/metrics");
  CHECK(res.status == 200);
  CHECK(res.body.empty());
  CHECK(res.content_length == std::to_string(r.render().size()));
  res = httpRequest(sock, http::verb::get, "/metrics", /*keep_alive=*/false);
  CHECK(res.status == 200);
  boost::beast::flat_buffer buf;
  boost::system::error_code ec;
  char byte;
  sock.read_some(boost::asio::buffer(&byte, 1), ec);
  CHECK(ec == boost::asio::error::eof);  // closed after a Connection: close request
}

TEST_CASE("metrics server: scrapes while another thread updates") {
  MetricsRegistry r;
  Counter& c = r.counter("ticks_total", "Ticks.");
  Histogram& h =
      r.histogram("tick_seconds", "Tick time.", MetricsRegistry::defaultSecondsBuckets());
  auto server = MetricsServer::start(r, {"127.0.0.1", 0});
  REQUIRE(server.isOk());
  std::atomic<bool> stop{false};
  struct Joiner {
    std::thread t;
    std::atomic<bool>* stop;
    ~Joiner() {
      stop->store(true);
      if (t.joinable()) t.join();
    }
  };
  Joiner writer{
      std::thread([&] {
        while (!stop.load()) {
          c.inc();
          h.observe(0.003);
          r.gauge("per_worker", "per worker", {{"worker", std::to_string(c.value())}}).set(1);
          if (c.value() > 50) r.remove("per_worker", {{"worker", std::to_string(c.value() - 50)}});
        }
      }),
      &stop};
  boost::asio::io_context io;
  double last = -1;
  bool monotonic = true;
  for (int i = 0; i < 20; ++i) {
    tcp::socket sock(io);
    sock.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), (*server)->port()));
    const HttpReply res = httpRequest(sock, http::verb::get, "/metrics", false);
    REQUIRE(res.status == 200);
    const std::string sample = "\ngroupsgd_ticks_total ";
    const auto at = res.body.find(sample);
    REQUIRE(at != std::string::npos);
    const double v = std::stod(res.body.substr(at + sample.size()));
    monotonic = monotonic && v >= last;
    last = v;
  }
  stop.store(true);
  writer.t.join();
  CHECK(monotonic);
  CHECK(h.count() == static_cast<std::uint64_t>(c.value()));
}

TEST_CASE("metrics server: a bad address or a taken port is an error") {
  MetricsRegistry r;
  CHECK(MetricsServer::start(r, {"not an address", 0}).status().code() == Code::kInvalidArgument);
  auto first = MetricsServer::start(r, {"127.0.0.1", 0});
  REQUIRE(first.isOk());
  auto second = MetricsServer::start(r, {"127.0.0.1", (*first)->port()});
  CHECK(second.status().code() == Code::kUnavailable);
}

TEST_CASE("metrics: a job's view puts job=NAME first on every series it creates or removes") {
  MetricsRegistry r;
  MetricsRegistry a(&r, {{"job", "a"}});
  MetricsRegistry b(&r, {{"job", "b"}});
  a.gauge("workers", "trainers by state", {{"state", "active"}}).set(2);
  b.gauge("workers", "trainers by state", {{"state", "active"}}).set(3);
  a.counter("bad_total", "bad").inc();
  const std::string text = r.render();
  CHECK(text.find("groupsgd_workers{job=\"a\",state=\"active\"} 2\n") != std::string::npos);
  CHECK(text.find("groupsgd_workers{job=\"b\",state=\"active\"} 3\n") != std::string::npos);
  CHECK(text.find("groupsgd_bad_total{job=\"a\"} 1\n") != std::string::npos);
  CHECK(a.render() == text);  // a view renders its parent
  CHECK(b.remove("workers", {{"state", "active"}}));
  CHECK(r.render().find("job=\"b\"") == std::string::npos);
}
