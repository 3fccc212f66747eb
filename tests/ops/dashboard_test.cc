// The dashboard's side of the metrics endpoint: the board's JSON document, the page and
// its files served from the binary, /api/state never cached, read-only methods only, and
// no dashboard paths on an endpoint started without a board.
#include <doctest/doctest.h>

#include <string>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "groupsgd/ops/dashboard_board.h"
#include "groupsgd/ops/metrics.h"
#include "groupsgd/ops/metrics_server.h"

using namespace groupsgd::ops;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

struct Reply {
  unsigned status = 0;
  std::string content_type, cache_control, allow, body;
};

Reply get(std::uint16_t port, const std::string& target, http::verb verb = http::verb::get) {
  boost::asio::io_context io;
  tcp::socket sock(io);
  sock.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  http::request<http::empty_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.keep_alive(false);
  http::write(sock, req);
  boost::beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.skip(verb == http::verb::head);
  http::read(sock, buf, parser);
  const auto& res = parser.get();
  return {res.result_int(), std::string(res[http::field::content_type]),
          std::string(res[http::field::cache_control]), std::string(res[http::field::allow]),
          res.body()};
}

}  // namespace

TEST_CASE("dashboard board: the jobs' views joined into one JSON document") {
  DashboardBoard board;
  auto doc = nlohmann::json::parse(board.stateJson());
  CHECK(doc["daemon"]["serve"] == false);
  CHECK(doc["daemon"]["version"].is_string());
  CHECK(doc["job_table"].is_null());
  CHECK(doc["jobs"].empty());

  board.publishJob("a \"quoted\" job", R"({"workers": [1, 2]})");
  board.publishJob("b", R"({"workers": []})");
  board.publishJob("b", R"({"workers": [3]})");  // replaces b's view
  DashboardBoard serving(/*serve=*/true);
  serving.publishJobTable(R"({"jobs": [{"name": "b"}]})");
  doc = nlohmann::json::parse(board.stateJson());
  CHECK(doc["jobs"].size() == 2);
  CHECK(doc["jobs"]["a \"quoted\" job"]["workers"] == nlohmann::json({1, 2}));
  CHECK(doc["jobs"]["b"]["workers"] == nlohmann::json({3}));
  const auto served = nlohmann::json::parse(serving.stateJson());
  CHECK(served["daemon"]["serve"] == true);
  CHECK(served["job_table"]["jobs"][0]["name"] == "b");

  board.removeJob("b");
  doc = nlohmann::json::parse(board.stateJson());
  CHECK(doc["jobs"].size() == 1);
}

TEST_CASE("metrics server with a dashboard: page, files, /api/state; read-only") {
  MetricsRegistry registry;
  registry.setBuildInfo("test");
  DashboardBoard board;
  board.publishJob("default", R"({"t_s": 1.5})");
  MetricsServerOptions options;
  options.dashboard = &board;
  auto server = MetricsServer::start(registry, options);
  REQUIRE_MESSAGE(server.isOk(), server.status().toString());
  const std::uint16_t port = (*server)->port();

  Reply r = get(port, "/");
  CHECK(r.status == 200);
  CHECK(r.content_type == "text/html; charset=utf-8");
  CHECK(r.body.find("<script src=\"dashboard.js\">") != std::string::npos);
  CHECK(r.body.find("id=\"disconnected\"") != std::string::npos);
  r = get(port, "/dashboard.js");
  CHECK(r.status == 200);
  CHECK(r.content_type == "text/javascript; charset=utf-8");
  CHECK(r.body.find("api/state") != std::string::npos);
  r = get(port, "/dashboard.css");
  CHECK(r.status == 200);
  CHECK(r.content_type == "text/css; charset=utf-8");

  r = get(port, "/api/state?t=1");
  CHECK(r.status == 200);
  CHECK(r.content_type == "application/json");
  CHECK(r.cache_control == "no-store");
  CHECK(nlohmann::json::parse(r.body)["jobs"]["default"]["t_s"] == 1.5);
  board.publishJob("default", R"({"t_s": 2.5})");  // the next poll sees the new view
  CHECK(nlohmann::json::parse(get(port, "/api/state").body)["jobs"]["default"]["t_s"] == 2.5);

  r = get(port, "/api/state", http::verb::head);
  CHECK(r.status == 200);
  CHECK(r.body.empty());
  for (const char* path : {"/", "/api/state", "/dashboard.js"}) {
    r = get(port, path, http::verb::post);
    CHECK(r.status == 405);
    CHECK(r.allow == "GET, HEAD");
  }
  CHECK(get(port, "/api/statex").status == 404);
  CHECK(get(port, "/index.html").status == 404);
  CHECK(get(port, "/../etc/passwd").status == 404);
  // /metrics is what it always was.
  r = get(port, "/metrics");
  CHECK(r.status == 200);
  CHECK(r.body == registry.render());
}

TEST_CASE("metrics server without a dashboard: / and /api/state are not found") {
  MetricsRegistry registry;
  auto server = MetricsServer::start(registry, {});
  REQUIRE(server.isOk());
  CHECK(get((*server)->port(), "/").status == 404);
  CHECK(get((*server)->port(), "/api/state").status == 404);
  CHECK(get((*server)->port(), "/dashboard.js").status == 404);
  CHECK(get((*server)->port(), "/api/state", http::verb::post).status == 404);
}
