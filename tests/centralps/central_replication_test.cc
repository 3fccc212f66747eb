// The central PS with a synchronous standby link, over loopback, a scripted standby on a
// thread: a delta is shipped before the primary merges it and answered only once
// acknowledged; the primary merges it while the standby takes it (stateless outer
// optimizer), and when the acknowledgement never comes the merge is undone: the group is
// told "not committed" and the model is bit for bit the one before, at the same version.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "centralps_test_util.h"
#include "groupsgd/centralps/central_server.h"
#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/testbed/server_thread.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using namespace std::chrono_literals;
using centralps::testing::bitIdentical;
using groupsgd::testbed::ServerThread;

namespace {

constexpr auto kTimeout = 5000ms;

// A loopback endpoint nothing listens on now (the kernel's choice, released at once; a
// plain socket, closed synchronously, unlike a ZeroMQ one).
std::string freeEndpoint() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

// A standby that says hello, then acknowledges updates while `acking` holds, keeping the
// last delta it received.
struct Standby {
  zmq::socket_t sock;
  std::atomic<bool> acking{true}, stop{false};
  std::atomic<std::uint64_t> updates{0}, snapshots{0}, snapshot_version{0};
  std::vector<float> last_delta;  // read after `updates` changed and the thread stopped
  std::thread thread;

  Standby(zmq::context_t& ctx, const std::string& ep) : sock(ctx, zmq::socket_type::dealer) {
    sock.connect(ep);
    ReplicationMessage hello;
    hello.kind = ReplicationKind::kHello;
    REQUIRE(sendFrames(sock, encodeReplication(hello)));
    thread = std::thread([this] {
      while (!stop.load()) {
        zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, 10ms);
        if ((item.revents & ZMQ_POLLIN) == 0) continue;
        auto frames = recvFrames(sock);
        if (!frames) continue;
        auto m = decodeReplication(*frames);
        if (!m) continue;
        if (m->kind == ReplicationKind::kSnapshot) {
          snapshot_version.store(m->version);
          ++snapshots;
        }
        if (m->kind == ReplicationKind::kUpdate) {
          last_delta = m->tensor;
          ++updates;
        }
        if (!acking.load()) continue;  // heartbeats too: silence is a loss
        ReplicationMessage ack;
        ack.kind = ReplicationKind::kAck;
        ack.term = m->term;
        ack.version = m->version;
        (void)sendFrames(sock, encodeReplication(ack));
      }
    });
  }
  ~Standby() { halt(); }
  void halt() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }
};

struct Primary {
  zmq::context_t ctx{1};
  CentralConfig cfg;
  std::unique_ptr<ServerThread<CentralServer>> server;
  std::unique_ptr<RpcClient> client;
  std::size_t params = 0;

  explicit Primary(const std::string& replication) {
    cfg.model = kernels::ModelKind::kSoftmax;
    cfg.seed = 3;
    cfg.replication.listen = replication;
    cfg.replication.loss_ms = 300;
    auto s = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
    REQUIRE(s.isOk());
    (*s)->setTerm(4);
    params = (*s)->paramCount();
    client = std::make_unique<RpcClient>(ctx, (*s)->endpoint(), cfg.limits);
    server = std::make_unique<ServerThread<CentralServer>>(std::move(*s));
  }
  ~Primary() {
    client.reset();
    server.reset();
  }
  Result<InMessage> fetch() {
    OutMessage out(cfg.limits.job_id, 0);
    out.header().getBody().initFetch();
    return client->call(std::move(out), kTimeout);
  }
  Result<InMessage> push(std::uint64_t base_version, std::vector<float> delta) {
    OutMessage out(cfg.limits.job_id, 1);
    out.header().setModelVersion(base_version);
    auto body = out.header().getBody().initDeltaPush();
    body.setGroupId(1);
    body.setSamples(64);
    body.setSteps(1);
    out.addTensor(std::make_shared<const std::vector<float>>(std::move(delta)));
    return client->call(std::move(out), kTimeout);
  }
  std::vector<float> model(const InMessage& reply) const {
    REQUIRE(reply.tensorCount() == 1);
    std::vector<float> out(params);
    REQUIRE(reply.readTensor(0, out).isOk());
    return out;
  }
};

std::vector<float> smallDelta(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  return centralps::testing::randomVector(n, rng, 0.01f);
}

}  // namespace

TEST_CASE(
    "central server with a synchronous standby: a delta acknowledged is committed and "
    "shipped intact; one never acknowledged is refused and its merge undone") {
  zmq::context_t ctx;
  Primary primary(freeEndpoint());
  // Without a standby nothing commits, and nothing changes.
  auto before = primary.fetch();
  REQUIRE(before.isOk());
  const std::vector<float> initial = primary.model(*before);
  auto refused = primary.push(0, smallDelta(primary.params, 1));
  REQUIRE(refused.isOk());
  CHECK_FALSE(refused->header().getBody().getModelReply().getApplied());
  CHECK(refused->header().getModelVersion() == 0);

  Standby standby(ctx, primary.cfg.replication.listen);
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (standby.snapshots.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);  // the server's loop serves the hello
  }
  REQUIRE(standby.snapshots.load() == 1);
  // Longer than the loss bound: the acknowledged heartbeats keep it attached.
  std::this_thread::sleep_for(500ms);
  const std::vector<float> delta = smallDelta(primary.params, 2);
  auto ok = primary.push(0, delta);
  REQUIRE(ok.isOk());
  CHECK(standby.snapshot_version.load() == 0);
  CHECK(ok->header().getBody().getModelReply().getApplied());
  CHECK(ok->header().getModelVersion() == 1);
  CHECK(standby.updates.load() == 1);
  const std::vector<float> committed = primary.model(*ok);
  CHECK_FALSE(bitIdentical(committed, initial));

  // The standby stops acknowledging: the next delta is merged while it is awaited, then
  // undone when the bound (300 ms) passes.
  standby.acking.store(false);
  const auto started = std::chrono::steady_clock::now();
  auto lost = primary.push(1, smallDelta(primary.params, 3));
  const auto waited = std::chrono::steady_clock::now() - started;
  REQUIRE(lost.isOk());
  const auto reply = lost->header().getBody().getModelReply();
  CHECK_FALSE(reply.getApplied());
  CHECK(std::string(reply.getReason().cStr()).find("did not acknowledge version 2") !=
        std::string::npos);
  CHECK(waited >= 300ms);
  CHECK(lost->header().getModelVersion() == 1);
  CHECK(bitIdentical(primary.model(*lost), committed));
  auto after = primary.fetch();
  REQUIRE(after.isOk());
  CHECK(after->header().getModelVersion() == 1);
  CHECK(bitIdentical(primary.model(*after), committed));
  standby.halt();
  CHECK(standby.updates.load() == 2);
  CHECK(bitIdentical(standby.last_delta, smallDelta(primary.params, 3)));
}

TEST_CASE(
    "central replication: a promoted head whose replication_listen cannot be bound serves "
    "anyway, from its replica (a head that is not promoted refuses to start)") {
  zmq::context_t ctx;
  // The port is taken: another socket holds it.
  zmq::socket_t holder(ctx, zmq::socket_type::router);
  holder.bind("tcp://127.0.0.1:*");
  const std::string taken = holder.get(zmq::sockopt::last_endpoint);
  CentralConfig cfg;
  cfg.param_count = 4;
  cfg.replication.listen = taken;
  auto refused = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
  CHECK_FALSE(refused.isOk());

  ReplicaState replica;
  replica.term = 7;
  replica.version = 3;
  replica.params = {1.0f, 2.0f, 3.0f, 4.0f};
  cfg.replica = replica;
  auto promoted = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
  REQUIRE_MESSAGE(promoted.isOk(), promoted.status().toString());
  CHECK((*promoted)->version() == 3);
  CHECK((*promoted)->resumedFrom() == "standby replica of incarnation 7");
}
