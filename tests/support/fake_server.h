// A server stand-in for the coordinator's unit tests: a ROUTER on 127.0.0.1 whose thread
// hands each decoded request to `answer`, which replies now, after a delay or never, so a
// test can play a slow central PS or a group PS that sits on its configurations.
// Thread rule: made and destroyed by one thread; `answer` runs on the server's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/message.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::testing {

class FakeServer {
 public:
  // The reply to a request (none: no answer ever), and how long to wait before it.
  struct Reply {
    std::optional<OutMessage> message;
    std::chrono::milliseconds delay{0};
  };
  using Answer = std::function<Reply(const InMessage& request)>;

  FakeServer(zmq::context_t& ctx, Answer answer) : answer_(std::move(answer)) {
    auto s = makeSocket(ctx, zmq::socket_type::router);
    if (!s) throw std::runtime_error(s.status().toString());
    sock_ = std::move(*s);
    auto ep = bindSocket(sock_, "tcp://127.0.0.1:*");
    if (!ep) throw std::runtime_error(ep.status().toString());
    endpoint_ = *ep;
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Due {
    zmq::message_t to;
    OutMessage message;
    std::chrono::steady_clock::time_point at;
  };
  void serve() {
    std::vector<Due> due;
    while (!stop_) {
      const auto now = std::chrono::steady_clock::now();
      for (auto it = due.begin(); it != due.end();) {
        if (now < it->at) {
          ++it;
          continue;
        }
        (void)replyTo(sock_, it->to, std::move(it->message));
        it = due.erase(it);
      }
      zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      auto routed = recvRouted(sock_);
      if (!routed) continue;
      auto msg = decodeMessage(std::move(routed->frames), MessageLimits{});
      if (!msg) continue;
      Reply r = answer_(*msg);
      if (!r.message) continue;
      due.push_back({std::move(routed->routing_id), std::move(*r.message),
                     std::chrono::steady_clock::now() + r.delay});
    }
  }

  Answer answer_;
  zmq::socket_t sock_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace groupsgd::testing
