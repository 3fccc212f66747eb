#include "groupsgd/daemon/curve_setup.h"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "groupsgd/common/transport.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::daemon;

TEST_CASE("config: curve keys from JSON and flags; one without the other is refused") {
  DaemonConfig c;
  REQUIRE(
      applyJson(
          nlohmann::json::parse(R"({"curve": {"secret_key_file": "/k", "allow_file": "/a"}})"), &c)
          .isOk());
  CHECK(c.curve_secret_key_file == "/k");
  CHECK(c.curve_allow_file == "/a");
  CHECK(validate(c).isOk());
  CHECK(toJson(c)["curve"]["allow_file"] == "/a");
  CHECK(applyJson(nlohmann::json::parse(R"({"curve": {"secret": "/k"}})"), &c).code() ==
        Code::kInvalidArgument);
  DaemonConfig f;
  bool help = false;
  REQUIRE(applyFlags({"--curve-secret-key-file", "/s.key"}, &f, &help).isOk());
  CHECK(f.curve_secret_key_file == "/s.key");
  CHECK(validate(f).code() == Code::kInvalidArgument);  // no allow-list
}

TEST_CASE(
    "curve setup: plain without keys; with keys the ZAP handler runs and admits the daemon's own "
    "key") {
  zmq::context_t ctx;
  DaemonConfig plain;
  auto none = startCurve(ctx, plain);
  REQUIRE(none.isOk());
  CHECK_FALSE(none->keys.enabled());
  CHECK(none->zap == nullptr);

  const groupsgd::testing::TempDir tmp;
  const std::string dir = tmp.path();
  auto pair = generateKeyPair();
  REQUIRE(writeKeyPair(dir + "/server", *pair).isOk());
  std::ofstream(dir + "/allow") << "# nobody else\n";
  DaemonConfig cfg;
  cfg.curve_secret_key_file = dir + "/server.key";
  cfg.curve_allow_file = dir + "/allow";
  auto setup = startCurve(ctx, cfg);
  REQUIRE(setup.isOk());
  CHECK(setup->keys.public_key == pair->public_key);
  CHECK(setup->keys.server_public_key == pair->public_key);
  REQUIRE(setup->zap != nullptr);
  // The daemon's own roles connect with its key: admitted.
  auto router = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(setup->keys));
  REQUIRE(router.isOk());
  auto ep = bindSocket(*router, "tcp://127.0.0.1:*");
  REQUIRE(ep.isOk());
  auto dealer = makeSocket(ctx, zmq::socket_type::dealer, clientSocketOptions(setup->keys));
  REQUIRE(dealer.isOk());
  REQUIRE(connectSocket(*dealer, *ep).isOk());
  std::vector<zmq::message_t> frames;
  frames.emplace_back(std::string("hello"));
  REQUIRE(sendFrames(*dealer, std::move(frames)).isOk());
  zmq::pollitem_t item{router->handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(5000));
  REQUIRE((item.revents & ZMQ_POLLIN) != 0);
  auto got = recvRouted(*router);
  REQUIRE(got.isOk());
  CHECK(peerKey(got->frames.front()) == pair->public_key);
  // A second daemon in the same context cannot start another handler.
  CHECK_FALSE(startCurve(ctx, cfg).isOk());
  // A readable secret key is refused.
  REQUIRE(::chmod(cfg.curve_secret_key_file.c_str(), 0640) == 0);
  zmq::context_t other;
  auto refused = startCurve(other, cfg);
  CHECK(refused.status().code() == Code::kPermissionDenied);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "curve setup: per-node pairs: the head gives `node` lines a daemon's rights; a node "
    "with its own pair trusts the head's key; a reload revokes a node") {
  const groupsgd::testing::TempDir tmp;
  const std::string dir = tmp.path();
  auto head = generateKeyPair(), node = generateKeyPair(), worker = generateKeyPair();
  REQUIRE(writeKeyPair(dir + "/server", *head).isOk());
  REQUIRE(writeKeyPair(dir + "/node", *node).isOk());
  std::ofstream(dir + "/allow") << worker->public_key << " w1\n"
                                << node->public_key << " node  # n1\n";
  DaemonConfig hc;
  hc.curve_secret_key_file = dir + "/server.key";
  hc.curve_allow_file = dir + "/allow";
  zmq::context_t head_ctx;
  auto hs = startCurve(head_ctx, hc);
  REQUIRE(hs.isOk());
  CHECK(hs->keys.hasDaemonRights(head->public_key));
  CHECK(hs->keys.hasDaemonRights(node->public_key));
  CHECK_FALSE(hs->keys.hasDaemonRights(worker->public_key));
  CHECK(hs->keys.allowed->contains(worker->public_key));
  CHECK(hs->keys.allowed->contains(node->public_key));
  // The node's line removed: neither admitted nor a daemon after the reload.
  std::ofstream(dir + "/allow") << worker->public_key << " w1\n";
  REQUIRE(reloadAllowList(hc, hs->zap.get(), hs->keys.public_key, hs->daemons.get()).isOk());
  CHECK_FALSE(hs->keys.hasDaemonRights(node->public_key));
  CHECK_FALSE(hs->keys.allowed->contains(node->public_key));

  // The node: its own pair, the head's key as the server key, admitted with rights.
  std::ofstream(dir + "/node-allow") << worker->public_key << "\n";
  std::ofstream(dir + "/server.pub.copy") << head->public_key << "\n";
  DaemonConfig nc;
  nc.role = "node";
  nc.coordinator = "tcp://127.0.0.1:5555";
  nc.curve_secret_key_file = dir + "/node.key";
  nc.curve_allow_file = dir + "/node-allow";
  nc.curve_server_key_file = dir + "/server.pub.copy";
  CHECK(validate(nc).isOk());
  zmq::context_t node_ctx;
  auto ns = startCurve(node_ctx, nc);
  REQUIRE(ns.isOk());
  CHECK(ns->keys.public_key == node->public_key);
  CHECK(ns->keys.server_public_key == head->public_key);
  CHECK(ns->keys.hasDaemonRights(head->public_key));
  CHECK_FALSE(ns->keys.hasDaemonRights(worker->public_key));
  CHECK(ns->keys.allowed->contains(head->public_key));
  // Only a node names the head's key, and only with its own pair.
  DaemonConfig wrong = nc;
  wrong.role = "all";
  CHECK(validate(wrong).code() == Code::kInvalidArgument);
  std::filesystem::remove_all(dir);
}
