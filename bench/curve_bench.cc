// groupsgd-bench-curve: what CURVE costs on the data plane, measured in one run.
//
// For each tensor size (default 1 and 16 MiB), two identical setups run side by side on
// 127.0.0.1: a central PS and a group PS on threads of one context (two I/O threads, as in
// groupsgdd) and one member, a client::GroupClient in its own context (as in
// groupsgd-worker), pushing gradients; a push is answered with the updated replica when
// its step closes (K = "never exchange"), so a round trip moves 2 x size bytes. One setup
// is plain TCP, the other has CURVE on both links (ZAP handler, allow-list, the member's
// key bound in its GroupConfig), exactly as groupsgdd configures them. Trips alternate
// between the two so a busy machine slows both alike.
//   plain_gbps / curve_gbps   GB/s (1e9 bytes/s) from the median round trip
//   ratio                     curve_gbps / plain_gbps (1 = free)
//
// Flags: --sizes 1,16 (MiB), --seconds S per setup and size, --quick.
#include "bench_cli.h"
#include "bench_util.h"
#include "groupsgd/centralps/central_server.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/groupps/group_server.h"

using namespace groupsgd;
using namespace groupsgd::bench;

namespace {

constexpr std::uint32_t kNeverExchange = ~0u;
constexpr auto kTimeout = std::chrono::milliseconds(120000);

// Central + group PS, plain when `server` keys are empty.
struct Setup : InProcessCluster {
  Setup() : InProcessCluster(2) {}

  Status start(std::size_t params, const CurveKeys& server, const CurveKeys& member) {
    if (server.enabled()) {
      // Started before anything binds, as in groupsgdd.
      GSGD_RETURN_IF_ERROR(admit({server.public_key, member.public_key}));
    }
    centralps::CentralConfig ccfg = benchCentralConfig(params);
    ccfg.curve = server;
    groupps::GroupServerConfig gcfg = benchGroupConfig();
    gcfg.curve = server;
    GSGD_RETURN_IF_ERROR(InProcessCluster::start(ccfg, gcfg, /*thread_names=*/true));
    // Member 1 with its key, as the coordinator (which holds the daemon key) sends it.
    return configure({{1, 32, server.enabled() ? member.public_key : ""}},
                     {1, kNeverExchange, 120000}, server);
  }
};

class Pusher {
 public:
  Pusher(const Setup& s, std::size_t params, const CurveKeys& keys)
      : client_(ctx_, memberAssignment(1, 1, s.groupEndpoint(), params), 1, kTimeout, {}, keys),
        replica_(params),
        grad_(params, 1e-6f) {
    auto pulled = pullWhenReady(client_, replica_, kReadyLimit);
    if (!pulled) {
      std::fprintf(stderr, "curve: cannot start pushing: %s\n", pulled.status().toString().c_str());
      return;
    }
    step_ = pulled->step;
    ready_ = true;
  }
  bool trip() {
    if (!ready_) return false;
    auto r = client_.push(step_, grad_, 32, 0.0f, 0.0f, replica_);
    if (!r || !r->accepted) return false;
    step_ = r->step;
    return true;
  }

 private:
  zmq::context_t ctx_{1};
  client::GroupClient client_;
  std::vector<float> replica_, grad_;
  std::uint64_t step_ = 0;
  bool ready_ = false;
};

json measureSize(std::size_t mib, double seconds, int min_trips, const CurveKeys& server,
                 const CurveKeys& member) {
  const std::size_t params = (mib << 20) / sizeof(float);
  const std::uint64_t trip_bytes = 2 * (mib << 20);
  json row = {{"size_mib", mib}};
  Setup plain, curve;
  for (auto [setup, keys] : {std::pair{&plain, CurveKeys{}}, std::pair{&curve, server}}) {
    if (Status st = setup->start(params, keys, member); !st) {
      std::fprintf(stderr, "curve: cannot start servers: %s\n", st.toString().c_str());
      return row;
    }
  }
  Pusher p_plain(plain, params, CurveKeys{});
  Pusher p_curve(curve, params, member);
  std::vector<double> t_plain, t_curve;
  for (int i = 0; i < 2; ++i) {  // untimed: connections, buffers, page faults
    if (!p_plain.trip() || !p_curve.trip()) return row;
  }
  const auto start = Clock::now();
  for (int i = 0; i < min_trips || secondsSince(start) < 2 * seconds; ++i) {
    auto t0 = Clock::now();
    if (!p_plain.trip()) return row;
    t_plain.push_back(secondsSince(t0));
    t0 = Clock::now();
    if (!p_curve.trip()) return row;
    t_curve.push_back(secondsSince(t0));
  }
  auto gbps = [&](const std::vector<double>& t) {
    return static_cast<double>(trip_bytes) / percentile(t, 0.5) / 1e9;
  };
  for (auto [name, t] : {std::pair{"plain", &t_plain}, std::pair{"curve", &t_curve}}) {
    emit({{"bench", "curve"},
          {"what", std::string(name) + "_push_round_trip"},
          {"size_mib", mib},
          {"trips", t->size()},
          {"p50_ms", percentile(*t, 0.5) * 1e3},
          {"p90_ms", percentile(*t, 0.9) * 1e3},
          {"gbps", gbps(*t)}});
  }
  row["plain_gbps"] = gbps(t_plain);
  row["curve_gbps"] = gbps(t_curve);
  row["ratio"] = row["curve_gbps"].get<double>() / row["plain_gbps"].get<double>();
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  auto app = benchApp("groupsgd-bench-curve", "push bandwidth with and without CURVE");
  bool quick = false;
  std::vector<std::size_t> sizes = {1, 16};
  double seconds = 0;
  app->add_flag("--quick", quick, "short runs (CI smoke test)");
  addList(*app, "--sizes", sizes, "tensor sizes in MiB (default 1,16)");
  auto* seconds_opt =
      app->add_option("--seconds", seconds, "seconds per measurement (default 3, quick 0.5)")
          ->check(kPositive);
  if (auto rc = parseCommandLine(*app, argc, argv)) return *rc;
  if (seconds_opt->count() == 0) seconds = quick ? 0.5 : 3;
  log::setLevel(log::Level::kError);
  auto server = generateKeyPair();
  auto member = generateKeyPair();
  if (!server || !member) {
    std::fprintf(stderr, "curve: this libzmq cannot make CURVE keys\n");
    return 1;
  }
  const CurveKeys server_keys{server->public_key, server->secret_key, server->public_key};
  const CurveKeys member_keys{member->public_key, member->secret_key, server->public_key};
  json rows = json::array();
  bool ok = true;
  for (std::size_t mib : sizes) {
    json row = measureSize(mib, seconds, quick ? 3 : 5, server_keys, member_keys);
    ok = ok && row.contains("ratio");
    rows.push_back(row);
  }
  emit({{"bench", "curve"}, {"quick", quick}, {"sizes", rows}, {"ok", ok}});
  return ok ? 0 : 1;
}
