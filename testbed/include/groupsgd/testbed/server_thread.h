// Runs a server object's run(stop) loop on its own thread (named, when a name is given, so
// perf and top tell the roles apart) and stops and joins it when destroyed, so a whole
// cluster can live inside one test or benchmark process.
// Thread rule: made and destroyed by one thread; the server runs on its own.
#pragma once

#include <pthread.h>

#include <atomic>
#include <memory>
#include <thread>

namespace groupsgd::testbed {

template <typename Server>
class ServerThread {
 public:
  explicit ServerThread(std::unique_ptr<Server> server, const char* name = nullptr)
      : server_(std::move(server)) {
    thread_ = std::thread([this] { server_->run(stop_); });
    if (name != nullptr) pthread_setname_np(thread_.native_handle(), name);
  }
  ~ServerThread() {
    stop_.store(true);
    thread_.join();
  }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;
  Server& operator*() { return *server_; }
  Server* operator->() { return server_.get(); }

 private:
  std::unique_ptr<Server> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace groupsgd::testbed
