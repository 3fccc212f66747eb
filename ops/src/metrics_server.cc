#include "groupsgd/ops/metrics_server.h"

#include <chrono>
#include <optional>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "dashboard_assets.h"
#include "groupsgd/common/log.h"
#include "io_thread.h"

namespace groupsgd::ops {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kHeaderLimit = std::size_t{8} * 1024;
constexpr std::size_t kBodyLimit = std::size_t{4} * 1024;
constexpr std::chrono::seconds kRequestDeadline{10};

void plainText(http::response<http::string_body>* res, http::status status, std::string body) {
  res->result(status);
  res->set(http::field::content_type, "text/plain; charset=utf-8");
  res->body() = std::move(body);
}

// The body and type served at `path`, or false for an unknown path.
bool routeGet(beast::string_view path, const MetricsRegistry& registry,
              const DashboardBoard* dashboard, http::response<http::string_body>* res) {
  if (path == "/metrics") {
    res->set(http::field::content_type, MetricsRegistry::kContentType);
    res->body() = registry.render();
    return true;
  }
  if (dashboard == nullptr) return false;
  if (path == "/api/state") {
    res->set(http::field::content_type, "application/json");
    res->set(http::field::cache_control, "no-store");  // the page polls: always fresh
    res->body() = dashboard->stateJson();
    return true;
  }
  const DashboardAsset* asset = findDashboardAsset(std::string_view(path.data(), path.size()));
  if (asset == nullptr) return false;
  res->set(http::field::content_type,
           beast::string_view(asset->content_type.data(), asset->content_type.size()));
  res->body().assign(asset->body.data(), asset->body.size());
  return true;
}

http::response<http::string_body> makeResponse(const http::request<http::string_body>& req,
                                               const MetricsRegistry& registry,
                                               const DashboardBoard* dashboard) {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(req.keep_alive());
  res.set(http::field::server, "groupsgdd");
  res.set("X-Content-Type-Options", "nosniff");
  const beast::string_view target = req.target();
  const beast::string_view path = target.substr(0, target.find('?'));
  const bool readable = req.method() == http::verb::get || req.method() == http::verb::head;
  if (readable && routeGet(path, registry, dashboard, &res)) {
    res.result(http::status::ok);
  } else if (!readable &&
             (path == "/metrics" ||
              (dashboard != nullptr && (path == "/api/state" || findDashboardAsset(std::string_view(
                                                                    path.data(), path.size())))))) {
    plainText(&res, http::status::method_not_allowed, "method not allowed\n");
    res.set(http::field::allow, "GET, HEAD");
  } else {
    plainText(&res, http::status::not_found,
              dashboard != nullptr ? "not found; the dashboard is at /, metrics at /metrics\n"
                                   : "not found; metrics are at /metrics\n");
  }
  res.prepare_payload();  // Content-Length from the body, also for HEAD
  if (req.method() == http::verb::head) res.body().clear();
  return res;
}

// One HTTP connection: read a request, write the answer, repeat while keep-alive.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, const MetricsRegistry& registry, const DashboardBoard* dashboard)
      : stream_(std::move(socket)), registry_(registry), dashboard_(dashboard) {}

  void readRequest() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(kRequestDeadline);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->onRead(ec); });
  }

 private:
  void onRead(beast::error_code ec) {
    if (ec) return close();  // end of stream, deadline, over a limit, malformed
    try {
      const http::request<http::string_body> req = parser_->release();
      auto res = std::make_shared<http::response<http::string_body>>(
          makeResponse(req, registry_, dashboard_));
      // HEAD: the headers carry the GET's Content-Length; send no body bytes.
      auto serializer = std::make_shared<http::response_serializer<http::string_body>>(*res);
      if (req.method() == http::verb::head) serializer->split(true);
      const bool head = req.method() == http::verb::head;
      auto done = [self = shared_from_this(), res, serializer](beast::error_code wec, std::size_t) {
        if (wec || res->need_eof()) return self->close();
        self->readRequest();
      };
      if (head) {
        http::async_write_header(stream_, *serializer, std::move(done));
      } else {
        http::async_write(stream_, *serializer, std::move(done));
      }
    } catch (const std::exception& e) {
      GSGD_WARN("metrics: request failed: " << e.what());
      close();
    }
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const MetricsRegistry& registry_;  // borrowed: outlives the server, hence every session
  const DashboardBoard* dashboard_;  // borrowed likewise; may be null
};

}  // namespace

struct MetricsServer::Impl {
  Impl(const MetricsRegistry& r, const DashboardBoard* d, std::string h)
      : registry(r), dashboard(d), host(std::move(h)) {}

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) {
        try {
          std::make_shared<HttpSession>(std::move(s), registry, dashboard)->readRequest();
        } catch (const std::exception& e) {
          GSGD_WARN("metrics: cannot serve a connection: " << e.what());
        }
      }
      accept();
    });
  }

  asio::io_context io{1};  // first member: destroyed last, after every socket
  tcp::acceptor acceptor{io};
  const MetricsRegistry& registry;
  const DashboardBoard* dashboard;
  std::string host;
  std::uint16_t port = 0;
  std::thread thread;
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const MetricsRegistry& registry,
                                                            const MetricsServerOptions& options) {
  auto impl = std::make_unique<Impl>(registry, options.dashboard, options.host);
  beast::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec) return invalidArgument("metrics: bad listen address '" + options.host + "'");
  const tcp::endpoint endpoint(address, options.port);
  const std::string where = options.host + ":" + std::to_string(options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return unavailable("metrics: cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint(ec).port();
  if (ec) return internalError("metrics: local_endpoint: " + ec.message());
  impl->accept();
  impl->thread = startIoThread(impl->io, "metrics");
  GSGD_INFO("metrics: serving http://" << options.host << ":" << impl->port << "/metrics"
                                       << (options.dashboard ? ", the dashboard at /" : ""));
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::~MetricsServer() {
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->io.stop();
  });
  impl_->thread.join();
}

std::uint16_t MetricsServer::port() const { return impl_->port; }
const std::string& MetricsServer::host() const { return impl_->host; }

}  // namespace groupsgd::ops
