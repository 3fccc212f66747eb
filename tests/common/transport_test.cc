#include "groupsgd/common/transport.h"

#include <doctest/doctest.h>

#include <thread>

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

// A ROUTER that answers each request with its own step number + 1, or with an error
// when the step is 99, or never when the step is 7.
void echoServer(zmq::socket_t& router, int requests) {
  MessageLimits l;
  for (int i = 0; i < requests; ++i) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 2000ms);
    if (!(item.revents & ZMQ_POLLIN)) return;
    auto r = recvRouted(router);
    REQUIRE(r.isOk());
    auto msg = decodeMessage(std::move(r->frames), l);
    REQUIRE(msg.isOk());
    const auto step = msg->header().getStep();
    if (step == 7) continue;
    if (step == 99) {
      (void)replyTo(router, r->routing_id, makeErrorReply(1, 0, permissionDenied("no")));
      continue;
    }
    OutMessage out(1, 0);
    out.header().setStep(step + 1);
    out.header().getBody().setAck();
    (void)replyTo(router, r->routing_id, std::move(out));
  }
}

OutMessage request(std::uint64_t step) {
  OutMessage m(1, 5);
  m.header().setStep(step);
  m.header().getBody().initPull();
  return m;
}

// A router bound to a loopback port of the kernel's choice (tcp://127.0.0.1:*), and the
// endpoint the bind resolved.
struct BoundRouter {
  zmq::socket_t sock;
  std::string ep;
};

BoundRouter boundRouter(zmq::context_t& ctx) {
  auto sock = makeSocket(ctx, zmq::socket_type::router);
  REQUIRE(sock.isOk());
  auto ep = bindSocket(*sock, "tcp://127.0.0.1:*");
  REQUIRE(ep.isOk());
  return {std::move(*sock), *ep};
}

}  // namespace

TEST_CASE("transport: bind to port 0 resolves a real endpoint") {
  zmq::context_t ctx;
  const BoundRouter router = boundRouter(ctx);
  CHECK(router.ep.rfind("tcp://127.0.0.1:", 0) == 0);
  CHECK(router.ep.find(":*") == std::string::npos);
}

TEST_CASE("transport: rpc gets answers, error replies become a Status, silence times out") {
  zmq::context_t ctx;
  BoundRouter router = boundRouter(ctx);
  std::thread server([&] { echoServer(router.sock, 4); });
  RpcClient client(ctx, router.ep, MessageLimits{});
  auto a = client.call(request(1), 2000ms);
  REQUIRE(a.isOk());
  CHECK(a->header().getStep() == 2);
  auto b = client.call(request(99), 2000ms);
  CHECK(b.status().code() == Code::kPermissionDenied);
  auto c = client.call(request(7), 200ms);  // the server never answers this one
  CHECK(c.status().code() == Code::kUnavailable);
  // After a timeout the socket is replaced, so the next answer belongs to the next call.
  auto d = client.call(request(41), 2000ms);
  REQUIRE(d.isOk());
  CHECK(d->header().getStep() == 42);
  server.join();
}

TEST_CASE("transport: a request given up while its peer was down is never delivered later") {
  // A registration sent to a dead head and given up after its timeout must not reach the
  // head that restarts on the same endpoint: it would register a worker nobody runs.
  zmq::context_t ctx;
  std::string ep;
  {
    BoundRouter probe = boundRouter(ctx);  // a free port, then nobody there
    ep = probe.ep;
  }
  SocketOptions opts;
  opts.linger_ms = 5000;  // longer than the restart below: only the reset may drop it
  RpcClient client(ctx, ep, MessageLimits{}, opts);
  auto lost = client.call(request(3), 300ms);
  CHECK(lost.status().code() == Code::kUnavailable);
  auto sock = makeSocket(ctx, zmq::socket_type::router);
  REQUIRE(sock.isOk());
  REQUIRE(bindSocket(*sock, ep).isOk());  // the peer comes back within the linger
  zmq::pollitem_t item{sock->handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, 1000ms);  // reconnects come every 100 ms
  CHECK((item.revents & ZMQ_POLLIN) == 0);
}

TEST_CASE("transport: a router send to a departed peer fails instead of vanishing") {
  zmq::context_t ctx;
  auto router = makeSocket(ctx, zmq::socket_type::router);
  REQUIRE(router.isOk());
  zmq::message_t nobody("nobody", 6);
  OutMessage out(1, 0);
  out.header().getBody().setAck();
  Status s = replyTo(*router, nobody, std::move(out));
  CHECK(s.code() == Code::kUnavailable);
}

TEST_CASE("payload pool: reuses a buffer only when no message holds it") {
  PayloadPool pool;
  auto a = pool.acquire(8);
  Payload held = a;  // a message in flight
  auto b = pool.acquire(8);
  CHECK(a.get() != b.get());
  held.reset();
  a.reset();
  b.reset();
  auto c = pool.acquire(8);
  auto d = pool.acquire(8);
  CHECK(c.get() != d.get());
}
