// CURVE identity checks of the parameter servers, in process: a central PS and a group PS
// with the daemon key pair behind a ZAP handler, clients with allowed worker keys.
#include <doctest/doctest.h>

#include "cluster_fixture.h"
#include "groupsgd/common/zap_handler.h"

using namespace groupsgd;
using namespace groupsgd::testing;
using namespace groupsgd::testbed;
using namespace std::chrono_literals;

namespace {

bool noCurve() {
  static const bool none = zmq_has("curve") == 0;
  return none;
}

CurveKeys keysOf(const CurveKeyPair& own, const CurveKeyPair& server) {
  return CurveKeys{own.public_key, own.secret_key, server.public_key};
}

struct KeyedCluster : InProcessCluster {
  CurveKeyPair server = *generateKeyPair();
  CurveKeyPair wa = *generateKeyPair();
  CurveKeyPair wb = *generateKeyPair();

  KeyedCluster() {
    REQUIRE(admit({server.public_key, wa.public_key, wb.public_key}).isOk());
    centralps::CentralConfig ccfg;
    ccfg.model = kernels::ModelKind::kSoftmax;
    ccfg.curve = keysOf(server, server);
    ccfg.curve.allowed = allowList();  // the servers check it on every message
    groupps::GroupServerConfig gcfg;
    gcfg.curve = ccfg.curve;
    REQUIRE(start(ccfg, gcfg).isOk());
  }

  // GroupConfig with workers 1 (key wa) and 2 (key wb), sent with the given keys.
  Status configure(const CurveKeys& as) {
    return InProcessCluster::configure({{1, 8, wa.public_key}, {2, 8, wb.public_key}}, {}, as);
  }

  client::Assignment assignment(std::uint64_t worker_id) const {
    return InProcessCluster::assignment(worker_id, 1);
  }
};

Status askCentral(zmq::context_t& ctx, const std::string& ep, const CurveKeys& as, BodyKind kind,
                  std::size_t params) {
  RpcClient rpc(ctx, ep, MessageLimits{}, clientSocketOptions(as));
  OutMessage out(1, 0);
  if (kind == BodyKind::DELTA_PUSH) {
    auto d = out.header().getBody().initDeltaPush();
    d.setSamples(8);
    d.setSteps(1);
    out.addTensor(std::make_shared<const std::vector<float>>(params, 0.0f));
  } else if (kind == BodyKind::FETCH) {
    out.header().getBody().initFetch();
  } else {
    out.header().getBody().initCentralStatsQuery();
  }
  auto reply = rpc.call(std::move(out), 5000ms);
  return reply ? Status::ok() : reply.status();
}

}  // namespace

TEST_CASE("curve cluster: a worker key cannot act as another worker or as the coordinator" *
          doctest::skip(noCurve())) {
  KeyedCluster k;
  const CurveKeys daemon = keysOf(k.server, k.server);
  const CurveKeys a = keysOf(k.wa, k.server);
  const CurveKeys b = keysOf(k.wb, k.server);
  // Only the daemons' key configures the group.
  CHECK(k.configure(a).code() == Code::kPermissionDenied);
  REQUIRE(k.configure(daemon).isOk());

  std::vector<float> params(k.params);
  client::GroupClient honest(k.ctx, k.assignment(1), 1, 5000ms, {}, a);
  CHECK(pullWhenReady(honest, params).isOk());
  client::GroupClient impostor(k.ctx, k.assignment(1), 1, 5000ms, {}, b);  // b claims id 1
  CHECK(impostor.pull(params).status().code() == Code::kPermissionDenied);
  std::vector<float> grad(k.params, 0.0f);
  CHECK(impostor.push(0, grad, 8, 0.1f, 1.0f, params).status().code() == Code::kPermissionDenied);

  // The central PS: any admitted key may fetch; only the daemons' key pushes or reads stats.
  const std::string central = (*k.central)->endpoint();
  CHECK(askCentral(k.ctx, central, a, BodyKind::FETCH, k.params).isOk());
  CHECK(askCentral(k.ctx, central, a, BodyKind::DELTA_PUSH, k.params).code() ==
        Code::kPermissionDenied);
  CHECK(askCentral(k.ctx, central, a, BodyKind::CENTRAL_STATS_QUERY, k.params).code() ==
        Code::kPermissionDenied);
  CHECK(askCentral(k.ctx, central, daemon, BodyKind::CENTRAL_STATS_QUERY, k.params).isOk());

  // The refusals are counted in the group's stats (read with the daemons' key).
  RpcClient rpc(k.ctx, (*k.group)->endpoint(), MessageLimits{}, clientSocketOptions(daemon));
  OutMessage q(1, 0);
  q.header().getBody().initGroupStatsQuery();
  auto stats = rpc.call(std::move(q), 5000ms);
  REQUIRE(stats.isOk());
  CHECK(stats->header().getBody().getGroupStats().getIdentityRefused() == 3);
  CHECK(k.zap->refused() == 0);
}

TEST_CASE("curve cluster: a key removed from the live allow-list is refused from its next message" *
          doctest::skip(noCurve())) {
  KeyedCluster k;
  REQUIRE(k.configure(keysOf(k.server, k.server)).isOk());
  std::vector<float> params(k.params);
  // Both connections are open and admitted before the removal.
  client::GroupClient a(k.ctx, k.assignment(1), 1, 5000ms, {}, keysOf(k.wa, k.server));
  client::GroupClient b(k.ctx, k.assignment(2), 1, 5000ms, {}, keysOf(k.wb, k.server));
  REQUIRE(pullWhenReady(a, params).isOk());
  REQUIRE(pullWhenReady(b, params).isOk());
  const std::string central = (*k.central)->endpoint();
  RpcClient fetcher(k.ctx, central, MessageLimits{}, clientSocketOptions(keysOf(k.wa, k.server)));
  OutMessage f1(1, 0);
  f1.header().getBody().initFetch();
  REQUIRE(fetcher.call(std::move(f1), 5000ms).isOk());

  const AllowListChange c = k.zap->allowList()->replace({k.server.public_key, k.wb.public_key});
  CHECK(c.removed == 1);
  auto refused = a.pull(params);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.status().code() == Code::kPermissionDenied);
  CHECK(refused.status().message().find("no longer in the allow-list") != std::string::npos);
  OutMessage f2(1, 0);
  f2.header().getBody().initFetch();
  auto fetched = fetcher.call(std::move(f2), 5000ms);  // the same open connection
  REQUIRE_FALSE(fetched.isOk());
  CHECK(fetched.status().code() == Code::kPermissionDenied);
  CHECK(b.pull(params).isOk());  // the key that stayed works on
}
