// The raw-TCP baseline of the dataplane benchmark: a listener whose connections echo
// fixed-size messages back (reading each whole message first: store and forward, like a
// PS), and the client that times round trips through it. The two can live in different
// processes or network namespaces: the client first sends the message size (8 bytes), so
// one listener serves every size. Plain sockets, no options set: the kernel's defaults,
// as any TCP program would get them.
// Thread rule: TcpEchoServer owns its threads (joined by the destructor); a TcpEchoClient
// belongs to the thread that uses it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace groupsgd::bench {

inline bool writeAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

inline bool readAll(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// host (an IPv4 address) and port into a sockaddr; false if host is not one.
inline bool ipv4Address(const std::string& host, std::uint16_t port, sockaddr_in& out) {
  out = {};
  out.sin_family = AF_INET;
  out.sin_port = htons(port);
  return ::inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1;
}

// Largest message a connection accepts (the size header is checked against it).
constexpr std::uint64_t kMaxEchoBytes = std::uint64_t{4} << 30;

// Listens on host:port (0: any free port); each connection echoes messages of the size
// it announced until the peer closes.
class TcpEchoServer {
 public:
  TcpEchoServer(const std::string& host, std::uint16_t port = 0) : host_(host) {
    sockaddr_in addr{};
    if (!ipv4Address(host, port, addr)) return;
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof addr;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listener_, 8) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    accepter_ = std::thread([this] { acceptLoop(); });
  }
  ~TcpEchoServer() {
    stop_ = true;
    if (accepter_.joinable()) accepter_.join();
    {
      // Wakes connections whose client is still there (their recv returns 0).
      std::lock_guard lock(mu_);
      for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : echoes_) t.join();
    if (listener_ >= 0) ::close(listener_);
  }
  bool ok() const { return accepter_.joinable(); }
  const std::string& host() const { return host_; }
  std::uint16_t port() const { return port_; }

 private:
  void acceptLoop() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;  // checks stop_ every 100 ms
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) continue;
      std::lock_guard lock(mu_);
      conns_.push_back(fd);
      echoes_.emplace_back([this, fd] { echo(fd); });
    }
  }
  void echo(int fd) {
    pthread_setname_np(pthread_self(), "tcp-echo");  // its CPU is told apart by name
    std::uint64_t bytes = 0;
    if (readAll(fd, reinterpret_cast<char*>(&bytes), sizeof bytes) && bytes > 0 &&
        bytes <= kMaxEchoBytes) {
      std::vector<char> buf(bytes, 1);
      while (readAll(fd, buf.data(), bytes) && writeAll(fd, buf.data(), bytes)) {
      }
    }
    std::lock_guard lock(mu_);
    std::erase(conns_, fd);
    ::close(fd);
  }

  std::string host_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accepter_;
  std::mutex mu_;
  std::vector<int> conns_;           // open connections, to wake them at the end
  std::vector<std::thread> echoes_;  // one per connection
};

// One connection to a TcpEchoServer, sending and receiving `bytes` per round trip.
class TcpEchoClient {
 public:
  TcpEchoClient(const std::string& host, std::uint16_t port, std::size_t bytes) : bytes_(bytes) {
    sockaddr_in addr{};
    if (!ipv4Address(host, port, addr)) return;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const std::uint64_t header = bytes;
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        !writeAll(fd, reinterpret_cast<const char*>(&header), sizeof header)) {
      if (fd >= 0) ::close(fd);
      return;
    }
    fd_ = fd;
    out_.assign(bytes_, 2);
    in_.assign(bytes_, 0);
  }
  ~TcpEchoClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  TcpEchoClient(const TcpEchoClient&) = delete;
  TcpEchoClient& operator=(const TcpEchoClient&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool roundTrip() {
    return writeAll(fd_, out_.data(), bytes_) && readAll(fd_, in_.data(), bytes_);
  }

 private:
  std::size_t bytes_;
  int fd_ = -1;
  std::vector<char> out_, in_;
};

}  // namespace groupsgd::bench
