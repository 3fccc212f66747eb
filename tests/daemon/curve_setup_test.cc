#include "groupsgd/daemon/curve_setup.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "groupsgd/common/transport.h"

using namespace groupsgd;
using namespace groupsgd::daemon;

namespace {

std::string tempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gsgd-curvecfg-XXXXXX").string();
  return ::mkdtemp(tmpl.data());
}

}  // namespace

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

  const std::string dir = tempDir();
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
