// Runs a server object's run(stop) loop on its own thread for a test and stops and joins
// it when the test ends, so a whole cluster can live inside one test process.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

namespace groupsgd::testing {

template <typename Server>
class ServerThread {
 public:
  explicit ServerThread(std::unique_ptr<Server> server) : server_(std::move(server)) {
    thread_ = std::thread([this] { server_->run(stop_); });
  }
  ~ServerThread() {
    stop_.store(true);
    thread_.join();
  }
  Server& operator*() { return *server_; }
  Server* operator->() { return server_.get(); }

 private:
  std::unique_ptr<Server> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace groupsgd::testing
