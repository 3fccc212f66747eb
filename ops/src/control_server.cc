#include "groupsgd/ops/control_server.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio.hpp>

#include "groupsgd/common/log.h"
#include "groupsgd/ops/metrics.h"
#include "io_thread.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // Linux >= 4.13
#endif

namespace groupsgd::ops {
namespace {

namespace asio = boost::asio;
using Local = asio::local::stream_protocol;
using nlohmann::json;
using nlohmann::ordered_json;

std::string errnoText(int err) { return std::strerror(err); }

// The reply route's guard: open while the io_context may take posts.
struct Gate {
  std::mutex mu;
  asio::io_context* io = nullptr;  // null once the server is stopping
};

Caller peerCredentials(int fd) {
  Caller caller;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    caller.pid = cred.pid;
    caller.uid = cred.uid;
    caller.gid = cred.gid;
  } else {
    caller.pid = -1;
    caller.uid = static_cast<uid_t>(-1);  // matches no admin rule, not even root
    caller.gid = static_cast<gid_t>(-1);
  }
  // Supplementary groups: ERANGE says how much room they need; other errors (an old
  // kernel without SO_PEERGROUPS) leave the list empty.
  std::vector<gid_t> groups(32);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(std::min<std::size_t>(groups.size(), glen / sizeof(gid_t)));
      break;
    }
    const bool grow = errno == ERANGE && attempt == 0;
    groups.assign(grow ? glen / sizeof(gid_t) + 1 : 0, 0);
    if (!grow) break;
  }
  caller.groups = std::move(groups);
  return caller;
}

// Does something accept connections on this socket file?
bool somethingAnswers(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::close(fd);
  // EAGAIN: the backlog is full, so a server is there but busy.
  return rc == 0 || err == EAGAIN || err == EINPROGRESS;
}

// The code a reply carries, for the requests counter: "ok" or a known error code.
const char* replyCode(const ordered_json& reply) {
  if (!reply.is_object()) return "internal";
  if (reply.value("ok", false)) return "ok";
  const auto err = reply.find("error");
  if (err == reply.end() || !err->is_object()) return "internal";
  const auto code = err->find("code");
  if (code == err->end() || !code->is_string()) return "internal";
  const auto parsed = parseControlError(code->get<std::string>());
  return controlErrorName(parsed.value_or(ControlError::kInternal));
}

std::string describe(const Caller& c) {
  return "pid=" + std::to_string(c.pid) + " uid=" + std::to_string(c.uid) +
         " gid=" + std::to_string(c.gid);
}

}  // namespace

// ---- the server ----

class Connection;

struct ControlServer::Impl {
  explicit Impl(ControlServerOptions o) : options(std::move(o)) {}
  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void accept();
  // A decoded request passed every server-side check: queue it or refuse it.
  void dispatch(const std::shared_ptr<Connection>& conn, ControlRequest request);
  void count(const std::string& method, const char* code) const;
  const ControlMethod* findMethod(const std::string& name) const {
    for (const auto& m : options.methods) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }

  ControlServerOptions options;
  asio::io_context io{1};  // first of the Asio members: destroyed after every socket
  Local::acceptor acceptor{io};
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::set<std::shared_ptr<Connection>> connections;  // server thread only
  std::thread thread;
  ino_t socket_inode = 0;
  dev_t socket_dev = 0;
  int wake_fd = -1;

  std::mutex mu;  // guards queue, refusing
  std::condition_variable cv;
  std::deque<PendingRequest> queue;
  std::optional<std::string> refusing;
};

// One client connection. Lives on the server thread; held by Impl::connections.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Local::socket socket, ControlServer::Impl& server, Caller caller)
      : socket_(std::move(socket)), server_(server), caller_(std::move(caller)) {}

  void start() { process(); }

  // Rejects the connection: one error reply, then close.
  void reject(const std::string& why) {
    close_after_write_ = true;
    send(makeErrorReply(nullptr, ControlError::kRefused, why), "", "refused");
  }

  // The coordinator's answer to the request in flight (server thread).
  void finish(const ordered_json& reply, const std::string& method) {
    if (closed_) return;
    busy_ = false;
    send(reply, method, replyCode(reply));
    process();
  }

  const Caller& caller() const { return caller_; }
  void close();

 private:
  void process();
  void handleLine(std::string_view line);
  void replyError(const json& id, ControlError code, std::string_view message,
                  const std::string& method);
  void send(const ordered_json& reply, const std::string& method, const char* code);
  void readMore();
  void writeNext();

  Local::socket socket_;
  ControlServer::Impl& server_;  // borrowed: the server outlives its connections
  Caller caller_;
  std::string in_;
  std::array<char, 4096> buf_{};
  std::deque<std::string> out_;
  bool busy_ = false;        // a request is with the coordinator
  bool discarding_ = false;  // skipping the rest of an over-size line
  bool reading_ = false;
  bool writing_ = false;
  bool eof_ = false;  // the peer shut down its side
  bool closed_ = false;
  bool close_after_write_ = false;
};

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(Local::socket::shutdown_both, ignored);
  socket_.close(ignored);
  auto self = shared_from_this();
  server_.connections.erase(self);
  if (server_.options.metrics != nullptr) {
    server_.options.metrics->gauge("control_connections", "Open control socket connections.")
        .set(static_cast<double>(server_.connections.size()));
  }
}

void Connection::send(const ordered_json& reply, const std::string& method, const char* code) {
  if (closed_) return;
  std::string line = reply.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  line += '\n';
  out_.push_back(std::move(line));
  if (code != nullptr) server_.count(method, code);
  writeNext();
}

void Connection::writeNext() {
  if (writing_ || closed_) return;
  if (out_.empty()) {
    if (close_after_write_ || (eof_ && !busy_)) close();
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      self->writing_ = false;
                      if (ec) return self->close();
                      self->out_.pop_front();
                      self->writeNext();
                    });
}

void Connection::readMore() {
  if (reading_ || closed_ || eof_ || close_after_write_) return;
  reading_ = true;
  socket_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](
                                                  boost::system::error_code ec, std::size_t n) {
    self->reading_ = false;
    if (self->closed_) return;
    if (ec == asio::error::eof) {
      self->eof_ = true;
      // A last line without '\n' still counts as a request.
      if (!self->discarding_ && !self->in_.empty()) self->in_ += '\n';
    } else if (ec) {
      return self->close();
    } else {
      self->in_.append(self->buf_.data(), n);
    }
    try {
      self->process();
    } catch (const std::exception& e) {
      GSGD_ERROR("control: connection of " << describe(self->caller_) << " failed: " << e.what());
      self->close();
    }
  });
}

void Connection::process() {
  const std::size_t cap = server_.options.max_request_bytes;
  while (!busy_ && !closed_) {
    const std::size_t nl = in_.find('\n');
    if (discarding_) {
      if (nl == std::string::npos) {
        in_.clear();
        break;
      }
      in_.erase(0, nl + 1);
      discarding_ = false;
      continue;
    }
    if (nl == std::string::npos) {
      if (in_.size() > cap) {
        in_.clear();
        discarding_ = true;
        replyError(nullptr, ControlError::kTooLarge,
                   "request line over " + std::to_string(cap) + " bytes; discarded", "");
      }
      break;
    }
    if (nl > cap) {
      in_.erase(0, nl + 1);
      replyError(nullptr, ControlError::kTooLarge,
                 "request line over " + std::to_string(cap) + " bytes; discarded", "");
      continue;
    }
    std::string line = in_.substr(0, nl);
    in_.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    handleLine(line);
  }
  if (busy_ || closed_) return;
  if (eof_) {
    writeNext();  // closes once the last replies are written
    return;
  }
  readMore();
}

void Connection::replyError(const json& id, ControlError code, std::string_view message,
                            const std::string& method) {
  send(makeErrorReply(id, code, message), method, controlErrorName(code));
}

void Connection::handleLine(std::string_view line) {
  ControlDecoded decoded = decodeControlRequest(line, server_.options.methods);
  if (decoded.error) {
    ControlDecodeError& e = *decoded.error;
    return replyError(e.id, e.code, e.message, e.method);
  }
  ControlRequest request = std::move(*decoded.request);
  request.caller = caller_;
  const std::string& method = request.method;
  if (request.admin) {
    GSGD_INFO("control: " << method << " from " << describe(caller_));
  } else {
    GSGD_DEBUG("control: " << method << " from " << describe(caller_));
  }
  if (request.admin && !isAdminCaller(caller_, server_.options)) {
    GSGD_WARN("control: refused admin method " << method << " to " << describe(caller_));
    return replyError(request.id, ControlError::kPermissionDenied,
                      "'" + method + "' needs an admin caller (uid " + std::to_string(caller_.uid) +
                          " is not allowed)",
                      method);
  }
  busy_ = true;
  server_.dispatch(shared_from_this(), std::move(request));
}

void ControlServer::Impl::count(const std::string& method, const char* code) const {
  if (options.metrics == nullptr) return;
  const std::string label = findMethod(method) != nullptr ? method : "other";
  options.metrics
      ->counter("control_requests_total", "Control socket requests answered, by method and code.",
                {{"method", label}, {"code", code}})
      .inc();
}

void ControlServer::Impl::dispatch(const std::shared_ptr<Connection>& conn,
                                   ControlRequest request) {
  const json id = request.id;
  const std::string method = request.method;
  std::weak_ptr<Connection> weak = conn;
  PendingRequest::Deliver deliver = [gate = gate, weak, method](ordered_json reply) {
    std::lock_guard<std::mutex> lock(gate->mu);
    if (gate->io == nullptr) return;
    asio::post(*gate->io, [weak, method, reply = std::move(reply)] {
      auto c = weak.lock();
      if (!c) return;  // the client went away; the reply has nowhere to go
      try {
        c->finish(reply, method);
      } catch (const std::exception& e) {
        GSGD_ERROR("control: cannot send a reply to " << describe(c->caller()) << ": " << e.what());
        c->close();
      }
    });
  };
  PendingRequest pending(std::move(request), std::move(deliver));
  std::optional<std::string> refuse;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (refusing) {
      refuse = *refusing;
    } else if (queue.size() >= options.max_pending) {
      refuse = "busy: " + std::to_string(queue.size()) + " requests are queued";
    } else {
      queue.push_back(std::move(pending));
      const std::uint64_t one = 1;
      (void)!::write(wake_fd, &one, sizeof one);
    }
  }
  if (refuse) {
    // Answered from here: posts the reply, which resumes the connection (`pending` is moved
    // into the queue only when not refused).
    pending.fail(ControlError::kRefused, *refuse);  // NOLINT(bugprone-use-after-move)
    return;
  }
  cv.notify_one();
}

void ControlServer::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, Local::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      try {
        Caller caller = peerCredentials(socket.native_handle());
        auto conn = std::make_shared<Connection>(std::move(socket), *this, caller);
        connections.insert(conn);
        if (connections.size() > options.max_connections) {
          GSGD_WARN("control: too many connections; refusing " << describe(caller));
          conn->reject("too many connections (" + std::to_string(options.max_connections) + ")");
        } else {
          GSGD_DEBUG("control: connection from " << describe(caller));
          conn->start();
        }
        if (options.metrics != nullptr) {
          options.metrics->gauge("control_connections", "Open control socket connections.")
              .set(static_cast<double>(connections.size()));
        }
      } catch (const std::exception& e) {
        GSGD_ERROR("control: cannot serve a connection: " << e.what());
      }
    } else {
      GSGD_WARN("control: accept: " << ec.message());
    }
    accept();
  });
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<ControlServer>> ControlServer::start(ControlServerOptions options) {
  const std::string path = options.path;
  if (path.empty()) return invalidArgument("control socket: no path configured");
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return invalidArgument("control socket: path longer than 107 bytes: " + path);
  }
  if (options.max_request_bytes == 0 || options.max_connections == 0 || options.max_pending == 0) {
    return invalidArgument("control socket: limits must be > 0");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return failedPrecondition("control socket: " + path + " exists and is not a socket");
    }
    if (somethingAnswers(path)) {
      return failedPrecondition("control socket: " + path +
                                " answers: another daemon is serving it");
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return unavailable("control socket: cannot remove the stale " + path + ": " +
                         errnoText(errno));
    }
    GSGD_INFO("control: removed a stale socket file " << path);
  }

  auto impl = std::make_unique<Impl>(std::move(options));
  impl->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wake_fd < 0) return unavailable("control socket: eventfd: " + errnoText(errno));
  boost::system::error_code ec;
  impl->acceptor.open(Local(), ec);
  if (!ec) impl->acceptor.bind(Local::endpoint(path), ec);
  if (ec) return unavailable("control socket: cannot bind " + path + ": " + ec.message());
  // From here on the file is ours: remove it on every failure.
  auto fail = [&](const std::string& what) {
    ::unlink(path.c_str());
    return unavailable("control socket: " + what);
  };
  if (::chmod(path.c_str(), impl->options.mode) != 0) {
    return fail("chmod " + path + ": " + errnoText(errno));
  }
  if (::stat(path.c_str(), &st) != 0) return fail("stat " + path + ": " + errnoText(errno));
  impl->socket_inode = st.st_ino;
  impl->socket_dev = st.st_dev;
  impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen on " + path + ": " + ec.message());

  impl->gate->io = &impl->io;
  impl->accept();
  Impl* raw = impl.get();
  impl->thread = startIoThread(raw->io, "control");
  GSGD_INFO("control: serving " << path << " (mode " << std::oct << raw->options.mode << std::dec
                                << ")");
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::~ControlServer() {
  {
    std::lock_guard<std::mutex> lock(impl_->gate->mu);
    impl_->gate->io = nullptr;  // replies from now on go nowhere
  }
  asio::post(impl_->io, [impl = impl_.get()] {
    boost::system::error_code ignored;
    impl->acceptor.close(ignored);
    for (auto& c : std::set<std::shared_ptr<Connection>>(impl->connections)) c->close();
    impl->io.stop();
  });
  impl_->thread.join();
  struct stat st {};
  const std::string& path = impl_->options.path;
  if (::lstat(path.c_str(), &st) == 0 && st.st_ino == impl_->socket_inode &&
      st.st_dev == impl_->socket_dev) {
    ::unlink(path.c_str());
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->queue.clear();  // their replies go nowhere: the gate is closed
}

const std::string& ControlServer::path() const { return impl_->options.path; }

std::optional<PendingRequest> ControlServer::tryPop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->queue.empty()) return std::nullopt;
  PendingRequest next = std::move(impl_->queue.front());
  impl_->queue.pop_front();
  if (impl_->queue.empty()) {
    std::uint64_t value = 0;
    (void)!::read(impl_->wake_fd, &value, sizeof value);  // reset: nothing queued
  }
  return next;
}

std::optional<PendingRequest> ControlServer::waitPop(std::chrono::milliseconds timeout) {
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait_for(lock, timeout, [this] { return !impl_->queue.empty(); });
  }
  return tryPop();
}

int ControlServer::wakeFd() const { return impl_->wake_fd; }

void ControlServer::setRefusing(std::optional<std::string> reason) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->refusing = std::move(reason);
}

}  // namespace groupsgd::ops
