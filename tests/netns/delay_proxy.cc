// groupsgd-delay-proxy: a TCP relay that holds every byte for a fixed delay in each
// direction. This kernel has no netem, so the latency test (netns_latency.sh) routes its
// workers' traffic through this proxy instead.
//
//   groupsgd-delay-proxy --listen HOST:PORT --delay-ms N (--target HOST:PORT | --transparent)
//                        [--ready-file PATH]
//
// --transparent: connections arrive through an nft `redirect` rule and are relayed to their
// original destination (SO_ORIGINAL_DST), so every port a daemon advertises is delayed
// without knowing it in advance. Per connection and direction: a reader stamps each chunk
// with its release time, a writer sends it when due (order kept, at most kMaxQueued bytes
// held). Errors end that connection only; the proxy keeps serving until SIGTERM/SIGINT.
#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kChunk = 64 << 10;
constexpr std::size_t kMaxQueued = 64u << 20;  // per direction: reader waits beyond this

struct Options {
  std::string listen;
  std::string target;
  bool transparent = false;
  int delay_ms = -1;
  std::string ready_file;
};

std::optional<sockaddr_in> parseHostPort(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, text.substr(0, colon).c_str(), &a.sin_addr) != 1) return std::nullopt;
  char* end = nullptr;
  const long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) return std::nullopt;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  return a;
}

const char* kUsage =
    "usage: groupsgd-delay-proxy --listen HOST:PORT --delay-ms N "
    "(--target HOST:PORT | --transparent) [--ready-file PATH]\n";

// Returns the options, or nullopt after printing why they are unusable.
std::optional<Options> parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--listen" && value(&o.listen)) continue;
    if (a == "--target" && value(&o.target)) continue;
    if (a == "--ready-file" && value(&o.ready_file)) continue;
    if (a == "--transparent") {
      o.transparent = true;
      continue;
    }
    if (a == "--delay-ms" && value(&v)) {
      char* end = nullptr;
      const long ms = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || ms < 0 || ms > 60000) {
        std::fprintf(stderr, "groupsgd-delay-proxy: --delay-ms wants 0..60000, got '%s'\n",
                     v.c_str());
        return std::nullopt;
      }
      o.delay_ms = static_cast<int>(ms);
      continue;
    }
    std::fprintf(stderr, "groupsgd-delay-proxy: unknown or incomplete option '%s'\n%s", a.c_str(),
                 kUsage);
    return std::nullopt;
  }
  if (o.listen.empty() || o.delay_ms < 0 || (o.target.empty() == !o.transparent)) {
    std::fprintf(
        stderr,
        "groupsgd-delay-proxy: need --listen, --delay-ms and one of --target / --transparent\n%s",
        kUsage);
    return std::nullopt;
  }
  if (!parseHostPort(o.listen) || (!o.target.empty() && !parseHostPort(o.target))) {
    std::fprintf(stderr, "groupsgd-delay-proxy: addresses must be IPv4 HOST:PORT\n");
    return std::nullopt;
  }
  return o;
}

bool writeAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// One direction of one connection: bytes read from `from` are written to `to` delay later.
class Pipe {
 public:
  Pipe(int from, int to, std::chrono::milliseconds delay) : from_(from), to_(to), delay_(delay) {}

  void readLoop() {
    std::vector<char> buf(kChunk);
    for (;;) {
      const ssize_t n = ::recv(from_, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      std::unique_lock lock(mu_);
      if (n <= 0) {  // EOF or error: the writer ends after what is queued
        items_.push_back({Clock::now() + delay_, {}, true});
        cv_.notify_all();
        return;
      }
      cv_.wait(lock, [&] { return queued_ < kMaxQueued || broken_; });
      if (broken_) return;
      items_.push_back(
          {Clock::now() + delay_, std::vector<char>(buf.data(), buf.data() + n), false});
      queued_ += static_cast<std::size_t>(n);
      cv_.notify_all();
    }
  }

  void writeLoop() {
    for (;;) {
      Item item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !items_.empty(); });
        const auto due = items_.front().due;
        lock.unlock();
        std::this_thread::sleep_until(due);
        lock.lock();
        item = std::move(items_.front());
        items_.pop_front();
        queued_ -= item.bytes.size();
        cv_.notify_all();
      }
      if (item.eof) {
        ::shutdown(to_, SHUT_WR);
        return;
      }
      if (!writeAll(to_, item.bytes.data(), item.bytes.size())) {
        // The receiver is gone: stop reading too, so the sender sees the reset.
        std::lock_guard lock(mu_);
        broken_ = true;
        ::shutdown(from_, SHUT_RDWR);
        cv_.notify_all();
        return;
      }
    }
  }

 private:
  struct Item {
    Clock::time_point due;
    std::vector<char> bytes;
    bool eof = false;
  };
  int from_, to_;
  std::chrono::milliseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::size_t queued_ = 0;
  bool broken_ = false;
};

// Both directions of one relayed connection; the sockets close when its four threads end.
struct Connection {
  int client, server;
  Pipe up, down;
  Connection(int c, int s, std::chrono::milliseconds d)
      : client(c), server(s), up(c, s, d), down(s, c, d) {}
  ~Connection() {
    ::close(client);
    ::close(server);
  }
};

void setNoDelay(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::optional<sockaddr_in> destinationOf(int client, const Options& o) {
  if (!o.transparent) return parseHostPort(o.target);
  sockaddr_in dst{};
  socklen_t len = sizeof dst;
  if (::getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &dst, &len) != 0) return std::nullopt;
  return dst;
}

void relay(int client, const Options& o) {
  const auto dst = destinationOf(client, o);
  if (!dst) {
    std::fprintf(
        stderr,
        "groupsgd-delay-proxy: no original destination (%s); is the nft redirect in place?\n",
        std::strerror(errno));
    ::close(client);
    return;
  }
  const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (server < 0 || ::connect(server, reinterpret_cast<const sockaddr*>(&*dst), sizeof *dst) != 0) {
    // Refused or unreachable: the client sees its connection reset, as it would directly.
    if (server >= 0) ::close(server);
    ::close(client);
    return;
  }
  setNoDelay(client);
  setNoDelay(server);
  auto conn = std::make_shared<Connection>(client, server, std::chrono::milliseconds(o.delay_ms));
  std::thread([conn] { conn->up.readLoop(); }).detach();
  std::thread([conn] { conn->up.writeLoop(); }).detach();
  std::thread([conn] { conn->down.readLoop(); }).detach();
  std::thread([conn] { conn->down.writeLoop(); }).detach();
}

std::atomic<bool> g_stop{false};
void onSignal(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  const auto opts = parseArgs(argc, argv);
  if (!opts) return 2;
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = onSignal;  // no SA_RESTART: accept() returns EINTR and the loop ends
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  (void)::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in addr = *parseHostPort(opts->listen);
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(lfd, 128) != 0) {
    std::fprintf(stderr, "groupsgd-delay-proxy: cannot listen on %s: %s\n", opts->listen.c_str(),
                 std::strerror(errno));
    return 1;
  }
  std::fprintf(stderr, "groupsgd-delay-proxy: %s, %d ms each way, to %s\n", opts->listen.c_str(),
               opts->delay_ms,
               opts->transparent ? "the original destinations" : opts->target.c_str());
  if (!opts->ready_file.empty()) {
    if (FILE* f = std::fopen(opts->ready_file.c_str(), "w")) {
      std::fputs("ready\n", f);
      std::fclose(f);
    }
  }
  while (!g_stop.load()) {
    const int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;  // EINTR on a signal, or a transient error
    relay(c, *opts);
  }
  ::close(lfd);
  return 0;
}
