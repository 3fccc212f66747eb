#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/handshake_monitor.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/common/zap_handler.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using groupsgd::testing::TempDir;
using namespace std::chrono_literals;

namespace {

// A libzmq built without CURVE: these cases are marked skipped (never passed silently).
bool noCurve() {
  static const bool none = zmq_has("curve") == 0;
  return none;
}

void writeText(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

OutMessage hello(std::uint64_t step) {
  OutMessage m(1, 5);
  m.header().setStep(step);
  m.header().getBody().initPull();
  return m;
}

// Waits up to `wait` for one message on a ROUTER; returns the body's first frame.
std::optional<zmq::message_t> receiveOne(zmq::socket_t& router, std::chrono::milliseconds wait) {
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, wait);
  if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
  auto r = recvRouted(router);
  REQUIRE(r.isOk());
  return std::move(r->frames.front());
}

}  // namespace

TEST_CASE("curve keys: keygen writes a private secret and a public file that load back" *
          doctest::skip(noCurve())) {
  TempDir dir;
  auto pair = generateKeyPair();
  REQUIRE(pair.isOk());
  CHECK(isZ85Key(pair->public_key));
  REQUIRE(writeKeyPair(dir.file("w1"), *pair).isOk());
  struct stat st {};
  REQUIRE(::stat((dir.file("w1.key")).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto loaded = loadSecretKeyFile(dir.file("w1.key"));
  REQUIRE(loaded.isOk());
  CHECK(loaded->secret_key == pair->secret_key);
  CHECK(loaded->public_key == pair->public_key);  // derived from the secret
  auto pub = loadPublicKeyFile(dir.file("w1.pub"));
  REQUIRE(pub.isOk());
  CHECK(*pub == pair->public_key);
  // A second keygen to the same prefix must not replace the key.
  CHECK(writeKeyPair(dir.file("w1"), *generateKeyPair()).code() == Code::kFailedPrecondition);
}

TEST_CASE("curve keys: a secret key file readable by group or others is refused" *
          doctest::skip(noCurve())) {
  TempDir dir;
  auto pair = generateKeyPair();
  REQUIRE(pair.isOk());
  for (mode_t mode : {0640, 0604, 0660, 0644}) {
    writeText(dir.file("s.key"), pair->secret_key + "\n", mode);
    auto loaded = loadSecretKeyFile(dir.file("s.key"));
    CHECK(loaded.status().code() == Code::kPermissionDenied);
    CHECK(loaded.status().message().find("chmod 600") != std::string::npos);
  }
  REQUIRE(::chmod((dir.file("s.key")).c_str(), 0400) == 0);
  CHECK(loadSecretKeyFile(dir.file("s.key")).isOk());
  CHECK(loadSecretKeyFile(dir.file("missing.key")).status().code() == Code::kNotFound);
}

TEST_CASE("curve keys: files without a valid Z85 key are refused" * doctest::skip(noCurve())) {
  TempDir dir;
  writeText(dir.file("bad.key"), "not-a-key\n", 0600);
  CHECK(loadSecretKeyFile(dir.file("bad.key")).status().code() == Code::kInvalidArgument);
  writeText(dir.file("short.pub"), "# comment only\n\n", 0644);
  CHECK(loadPublicKeyFile(dir.file("short.pub")).status().code() == Code::kInvalidArgument);
  CHECK_FALSE(isZ85Key(std::string(40, '~')));  // '~' is outside the Z85 alphabet
  CHECK_FALSE(isZ85Key(std::string(39, 'a')));
}

TEST_CASE("curve keys: allow-list takes keys with labels, skips comments, names bad lines" *
          doctest::skip(noCurve())) {
  auto a = generateKeyPair();
  auto b = generateKeyPair();
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  auto keys = parseAllowList("# workers\n" + a->public_key + "  worker-a on host1\n\n  " +
                             b->public_key + "\n");
  REQUIRE(keys.isOk());
  CHECK(keys->size() == 2);
  CHECK(keys->count(a->public_key) == 1);
  CHECK(keys->count(b->public_key) == 1);
  auto bad = parseAllowList(a->public_key + "\nnot-a-key\n");
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message().find("line 2") != std::string::npos);
}

TEST_CASE("zap handler: admits allowed keys with their identity, refuses unknown and plain" *
          doctest::skip(noCurve())) {
  zmq::context_t ctx;
  auto server = generateKeyPair();
  auto good = generateKeyPair();
  auto stranger = generateKeyPair();
  REQUIRE(server.isOk());
  REQUIRE(good.isOk());
  REQUIRE(stranger.isOk());
  auto zap = ZapHandler::start(ctx, {good->public_key});
  REQUIRE(zap.isOk());
  CHECK(ZapHandler::start(ctx, std::set<std::string>{}).status().code() ==
        Code::kUnavailable);  // one per context

  CurveKeys skeys{server->public_key, server->secret_key, ""};
  auto router = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(skeys));
  REQUIRE(router.isOk());
  auto ep = bindSocket(*router, "tcp://127.0.0.1:*");
  REQUIRE(ep.isOk());

  auto send_from = [&](const SocketOptions& opts) {
    auto s = makeSocket(ctx, zmq::socket_type::dealer, opts);
    REQUIRE(s.isOk());
    REQUIRE(connectSocket(*s, *ep).isOk());
    (void)sendFrames(*s, hello(1).toFrames());
    return std::move(*s);
  };

  SUBCASE("an allowed key gets through and is the sender's User-Id") {
    auto c =
        send_from(clientSocketOptions({good->public_key, good->secret_key, server->public_key}));
    auto got = receiveOne(*router, 5000ms);
    REQUIRE(got.has_value());
    CHECK(peerKey(*got) == good->public_key);
    CHECK((*zap)->admitted() >= 1);
    CHECK((*zap)->refused() == 0);
  }
  SUBCASE("an unknown key is refused and counted; nothing arrives") {
    auto c = send_from(
        clientSocketOptions({stranger->public_key, stranger->secret_key, server->public_key}));
    CHECK_FALSE(receiveOne(*router, 1500ms).has_value());
    CHECK((*zap)->refused() >= 1);
    CHECK((*zap)->admitted() == 0);
  }
  SUBCASE("a plaintext client gets nothing through") {
    auto c = send_from(SocketOptions{});
    CHECK_FALSE(receiveOne(*router, 1500ms).has_value());
    CHECK((*zap)->admitted() == 0);
  }
  SUBCASE("a client with a wrong server key gets nothing through") {
    auto other = generateKeyPair();
    auto c =
        send_from(clientSocketOptions({good->public_key, good->secret_key, other->public_key}));
    CHECK_FALSE(receiveOne(*router, 1500ms).has_value());
  }
}

TEST_CASE("transport: plain sockets carry no peer key; a CURVE client needs the server key" *
          doctest::skip(noCurve())) {
  zmq::context_t ctx;
  auto router = makeSocket(ctx, zmq::socket_type::router);
  REQUIRE(router.isOk());
  auto ep = bindSocket(*router, "tcp://127.0.0.1:*");
  REQUIRE(ep.isOk());
  auto c = makeSocket(ctx, zmq::socket_type::dealer);
  REQUIRE(c.isOk());
  REQUIRE(connectSocket(*c, *ep).isOk());
  REQUIRE(sendFrames(*c, hello(1).toFrames()).isOk());
  auto got = receiveOne(*router, 5000ms);
  REQUIRE(got.has_value());
  CHECK(peerKey(*got).empty());

  auto keys = generateKeyPair();
  CurveKeys no_server{keys->public_key, keys->secret_key, ""};
  CHECK(makeSocket(ctx, zmq::socket_type::dealer, clientSocketOptions(no_server)).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("allow list: replace reports what changed; the refusal names the key") {
  AllowList list({"a", "b"});
  CHECK(list.contains("a"));
  const AllowListChange c = list.replace({"b", "c", "d"});
  CHECK(c.removed == 1);
  CHECK(c.added == 2);
  CHECK(c.size == 3);
  CHECK_FALSE(list.contains("a"));
  CHECK(list.contains("d"));
  auto shared = std::make_shared<const AllowList>(std::set<std::string>{"k"});
  CHECK(checkPeerAllowed(shared, "k").isOk());
  CHECK(checkPeerAllowed(shared, "").isOk());    // plain TCP or inproc: nothing to check
  CHECK(checkPeerAllowed(nullptr, "x").isOk());  // no allow-list in this process
  const Status s = checkPeerAllowed(shared, "x");
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(s.message().find("x is no longer in the allow-list") != std::string::npos);
}

TEST_CASE("zap handler: a key removed from the live list is refused at its next handshake" *
          doctest::skip(noCurve())) {
  zmq::context_t ctx;
  auto server = generateKeyPair();
  auto client = generateKeyPair();
  REQUIRE(server.isOk());
  REQUIRE(client.isOk());
  auto list = std::make_shared<AllowList>(std::set<std::string>{client->public_key});
  auto zap = ZapHandler::start(ctx, list);
  REQUIRE(zap.isOk());
  CHECK((*zap)->allowList() == list);
  CurveKeys skeys{server->public_key, server->secret_key, ""};
  auto router = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(skeys));
  REQUIRE(router.isOk());
  auto ep = bindSocket(*router, "tcp://127.0.0.1:*");
  REQUIRE(ep.isOk());
  const auto opts =
      clientSocketOptions({client->public_key, client->secret_key, server->public_key});
  {
    auto s = makeSocket(ctx, zmq::socket_type::dealer, opts);
    REQUIRE(connectSocket(*s, *ep).isOk());
    (void)sendFrames(*s, hello(1).toFrames());
    CHECK(receiveOne(*router, 5000ms).has_value());
  }
  list->replace({});
  auto s = makeSocket(ctx, zmq::socket_type::dealer, opts);
  REQUIRE(connectSocket(*s, *ep).isOk());
  (void)sendFrames(*s, hello(2).toFrames());
  CHECK_FALSE(receiveOne(*router, 1500ms).has_value());
  CHECK((*zap)->refused() >= 1);
}

TEST_CASE("rpc client: a refused CURVE key is told at once, not after the timeout" *
          doctest::skip(noCurve())) {
  zmq::context_t ctx;
  auto server = generateKeyPair();
  auto good = generateKeyPair();
  auto stranger = generateKeyPair();
  REQUIRE(server.isOk());
  REQUIRE(good.isOk());
  REQUIRE(stranger.isOk());
  auto zap = ZapHandler::start(ctx, {good->public_key});
  REQUIRE(zap.isOk());
  CurveKeys skeys{server->public_key, server->secret_key, ""};
  auto router = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(skeys));
  REQUIRE(router.isOk());
  auto ep = bindSocket(*router, "tcp://127.0.0.1:*");
  REQUIRE(ep.isOk());

  RpcClient client(
      ctx, *ep, MessageLimits{},
      clientSocketOptions({stranger->public_key, stranger->secret_key, server->public_key}));
  for (int attempt = 0; attempt < 2; ++attempt) {  // a new socket hears it again
    const auto started = std::chrono::steady_clock::now();
    auto reply = client.call(hello(1), 10000ms);
    const auto took = std::chrono::steady_clock::now() - started;
    REQUIRE_FALSE(reply.isOk());
    CHECK(reply.status().code() == Code::kPermissionDenied);
    CHECK(reply.status().message() ==
          "the daemon at " + *ep + " refused this key (not in its allow-list)");
    CHECK(took < 3000ms);  // the handshake's answer, not the 10 s timeout
  }
  CHECK((*zap)->refused() >= 2);

  // An allowed key on the same kind of client still gets through (and is answered).
  RpcClient allowed(ctx, *ep, MessageLimits{},
                    clientSocketOptions({good->public_key, good->secret_key, server->public_key}));
  REQUIRE(allowed.send(hello(2).toFrames()).isOk());
  CHECK(receiveOne(*router, 5000ms).has_value());
}

TEST_CASE("rpc client: ZAP status codes a refused client may hear") {
  CHECK(zapRefusalStatus(400, "tcp://h:1").code() == Code::kPermissionDenied);
  CHECK(zapRefusalStatus(400, "tcp://h:1").message() ==
        "the daemon at tcp://h:1 refused this key (not in its allow-list)");
  CHECK(zapRefusalStatus(500, "tcp://h:1").message() ==
        "the daemon at tcp://h:1 refused this key (ZAP status 500)");
  CHECK(zapRefusalStatus(300, "tcp://h:1").code() == Code::kUnavailable);  // retry
}
