// groupsgd-bench-dataplane: data-plane throughput against raw TCP on loopback, in one run.
//
// For each tensor size (1, 16, 64 and 256 MiB; 256 only without --quick), a central PS and
// a group PS run on threads of this process (tcp://127.0.0.1:*, one zmq context with two
// I/O threads as in groupsgdd), the group has one member, and a client::GroupClient (own
// context, one I/O thread, as in groupsgd-worker) pushes gradients. A push is answered when
// its step closes, with the updated replica, so one round trip moves 2 x size bytes:
//   groupsgd_gbps   push round trips with K = "never exchange" (pure worker <-> group path)
//   k1_gbps         the same with K = 1: every step also ships a delta to the central PS
//                   and rebases on its answer, on the group PS thread
//   exchange_gbps   DeltaPush -> ModelReply round trips straight to the central PS (the
//                   group -> central exchange by itself)
//   tcp_gbps        the same bytes over a plain TCP socket pair on 127.0.0.1, echoed back
//                   by a thread that first reads the whole message (store and forward)
// GB/s = 1e9 bytes/s, computed from the median round trip. ratio = groupsgd / tcp.
// Then: the full-step latency of a 1 MiB model with 8 members pushing in lockstep (8
// GroupClients on threads, K = 1): per step, first push sent to last reply received.
//
// Flags: --quick, --sizes 1,16,64 (MiB), --seconds S per measurement, --only
// tcp,push,k1,exchange (a subset, e.g. to profile one path), --no-latency,
// --no-tune-malloc (glibc's default allocator settings instead of the ones groupsgdd and
// groupsgd-worker set at start, tuneAllocatorForLargeBuffers(); see docs/benchmarks.md).
// --tune-malloc (the default) is still accepted. --part-kib N: the part size tensors
// travel in (docs/protocol.md, "Parts"; default kDefaultPartBytes), for tuning it.
//
// Two sides in two processes (two hosts, or two network namespaces over veth:
// scripts/bench/dataplane_netns.sh): `--serve-only --bind ADDR [--endpoint-file FILE]`
// hosts the servers of every size (and of the step latency) and the TCP echo on ADDR and
// publishes their endpoints (dataplane_remote.h) until SIGINT/SIGTERM; `--connect
// FILE|JSON` runs the pushing clients, the exchanges and the TCP round trips against them,
// and prints what the one-process run prints, plus "remote". One --connect per server.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "bench_cli.h"
#include "bench_util.h"
#include "dataplane_remote.h"
#include "groupsgd/centralps/central_server.h"
#include "groupsgd/codec/parts.h"
#include "groupsgd/common/log.h"
#include "groupsgd/groupps/group_server.h"
#include "tcp_echo.h"
#include "thread_cpu.h"

using namespace groupsgd;
using namespace groupsgd::bench;

namespace {

constexpr double kTargetRatio = 0.9;           // push round trip / TCP, at 16 MiB and up
constexpr double kExchangeTargetRatio = 0.85;  // central exchange / TCP
std::uint32_t g_part_bytes = kDefaultPartBytes;
constexpr std::uint32_t kNeverExchange = ~0u;
constexpr auto kTimeout = std::chrono::milliseconds(120000);
constexpr const char* kLoopback = "127.0.0.1";
constexpr std::size_t kLatencyParams = (1u << 20) / sizeof(float);  // the 1 MiB model

struct Timing {
  std::vector<double> seconds;        // one per round trip
  std::map<std::string, double> cpu;  // CPU seconds over those trips, by thread name
  double gbps(std::uint64_t bytes_per_trip) const {
    const double median = percentile(seconds, 0.5);
    return median > 0 ? static_cast<double>(bytes_per_trip) / median / 1e9 : 0.0;
  }
};

// Times round trips of several kinds in alternation (one trip of each per round), so a
// busy machine slows them alike; every kind first runs twice untimed (buffers, page
// faults, connections). Stops after min_rounds rounds and min_seconds, or at a failure
// (that kind's timing is then cleared).
std::vector<Timing> timeInterleaved(const std::vector<std::function<bool()>>& trips, int min_rounds,
                                    double min_seconds) {
  std::vector<Timing> out(trips.size());
  std::vector<bool> alive(trips.size(), true);
  for (std::size_t k = 0; k < trips.size(); ++k) {
    for (int i = 0; i < 2 && alive[k]; ++i) alive[k] = trips[k]();
  }
  const auto start = Clock::now();
  for (int round = 0; round < min_rounds || secondsSince(start) < min_seconds; ++round) {
    for (std::size_t k = 0; k < trips.size(); ++k) {
      if (!alive[k]) continue;
      // The CPU snapshots stay outside the timed interval.
      const ThreadCpuSnapshot cpu0 = threadCpuNow();
      const auto t0 = Clock::now();
      alive[k] = trips[k]();
      out[k].seconds.push_back(secondsSince(t0));
      addThreadCpu(cpu0, threadCpuNow(), &out[k].cpu);
    }
    if (std::none_of(alive.begin(), alive.end(), [](bool a) { return a; })) break;
  }
  for (std::size_t k = 0; k < trips.size(); ++k) {
    if (!alive[k]) out[k].seconds.clear();
  }
  return out;
}

// ---- groupsgd ---------------------------------------------------------------------------

// ZeroMQ I/O threads are named "<prefix>/ZMQbg/IO/<n>": 1 the pushing worker's, 2 the
// servers' (groupsgdd's two), 3 the exchanging client's (a group PS's link to central).
constexpr int kWorkerThreads = 1;
constexpr int kServerThreads = 2;
constexpr int kExchangeThreads = 3;

zmq::context_t namedContext(int prefix) {
  zmq::context_t ctx(1);
  ctx.set(zmq::ctxopt::thread_name_prefix, prefix);
  return ctx;
}

// A central PS serving `params` zero-initialised parameters and one group PS (group 0)
// on named threads, both on `host` (an address of this machine; 127.0.0.1 in one
// process) in one context with two I/O threads (as in groupsgdd).
struct Servers : testbed::InProcessCluster {
  Servers() : InProcessCluster(2) {}
  Status start(std::size_t params, const std::string& host) {
    centralps::CentralConfig ccfg = benchCentralConfig(params);
    ccfg.staleness.max_staleness = 1u << 30;  // the exchange trips move the version on
    ccfg.part_bytes = g_part_bytes;
    groupps::GroupServerConfig gcfg = benchGroupConfig();
    gcfg.part_bytes = g_part_bytes;
    ctx.set(zmq::ctxopt::thread_name_prefix, kServerThreads);  // before its first socket
    return InProcessCluster::start(ccfg, gcfg, /*thread_names=*/true, host);
  }
};

// One member pushing gradients through the group PS (GroupConfig with K as given first).
class PushTrips {
 public:
  PushTrips(const Target& t, std::size_t params, std::uint32_t k, std::uint64_t epoch)
      : client_(ctx_, memberAssignment(1, epoch, t.group_ep, params), 1, kTimeout),
        replica_(params) {
    client_.setPartBytes(g_part_bytes);
    Status st = configureMembers(ctx_, t.group_ep, 1, epoch, k);
    auto pulled =
        st ? pullWhenReady(client_, replica_, kReadyLimit) : Result<client::StepAnswer>(st);
    if (!pulled) {
      std::fprintf(stderr, "dataplane: cannot start pushing: %s\n",
                   pulled.status().toString().c_str());
      return;
    }
    step_ = pulled->step;
    ready_ = true;
  }
  bool trip() {
    if (!ready_) return false;
    // As groupsgd-worker does: the gradient is computed into the client's send buffer
    // (here: filled once per buffer), which the push sends without a copy.
    auto grad = client_.gradientBuffer();
    if (filled_.insert(grad.data()).second) std::fill(grad.begin(), grad.end(), 1e-6f);
    auto r = client_.push(step_, grad, 32, 0.0f, 0.0f, replica_);
    if (!r || !r->accepted) {
      std::fprintf(stderr, "dataplane: push failed: %s\n",
                   r ? r->reason.c_str() : r.status().toString().c_str());
      return false;
    }
    step_ = r->step;
    return true;
  }

 private:
  zmq::context_t ctx_ = namedContext(kWorkerThreads);  // as in groupsgd-worker: one I/O thread
  client::GroupClient client_;
  std::vector<float> replica_;
  std::set<const float*> filled_;  // send buffers that hold the gradient already
  std::uint64_t step_ = 0;
  bool ready_ = false;
};

// DeltaPush -> ModelReply straight to the central PS, as a group PS sends them (the group
// id is one no group PS uses).
class ExchangeTrips {
 public:
  ExchangeTrips(const Target& t, std::size_t params)
      : rpc_(ctx_, t.central_ep, MessageLimits{}),
        delta_(std::make_shared<const std::vector<float>>(params, 1e-7f)),
        model_(params) {}
  bool trip() {
    OutMessage out(1, kGroup);
    out.header().setModelVersion(version_);
    auto d = out.header().getBody().initDeltaPush();
    d.setGroupId(kGroup);
    d.setSamples(32);
    d.setSteps(1);
    out.addTensor(delta_);
    // As the group PS sends it: in parts; the answer comes in the central PS's parts.
    const auto deadline = Clock::now() + kTimeout;
    for (auto& part : std::move(out).toParts(g_part_bytes)) {
      if (!rpc_.send(std::move(part))) return failed("send");
    }
    auto r = rpc_.receive(deadline);
    if (!r || r->kind() != BodyKind::MODEL_REPLY ||
        !r->header().getBody().getModelReply().getApplied()) {
      return failed(r ? "not applied" : r.status().toString().c_str());
    }
    if (Status s = receiveTensorInto(rpc_, *r, model_, deadline); !s)
      return failed(s.toString().c_str());
    version_ = r->header().getModelVersion();
    return true;
  }

 private:
  static bool failed(const char* why) {
    std::fprintf(stderr, "dataplane: exchange failed: %s\n", why);
    return false;
  }
  static constexpr std::uint32_t kGroup = 7;
  zmq::context_t ctx_ = namedContext(kExchangeThreads);
  RpcClient rpc_;
  Payload delta_;
  std::vector<float> model_;
  std::uint64_t version_ = 0;  // tau stays 0 while nobody else exchanges
};

// Which measurements run (--only tcp,push,k1,exchange; all by default).
struct Selection {
  bool tcp = true, push = true, k1 = true, exchange = true;
  // The kinds named (each checked by the command line); all of them when none is.
  static Selection of(const std::vector<std::string>& names) {
    if (names.empty()) return {};
    auto has = [&](const char* name) {
      return std::find(names.begin(), names.end(), name) != names.end();
    };
    return {has("tcp"), has("push"), has("k1"), has("exchange")};
  }
};

// CPU seconds per GB moved, by thread, over a kind's timed trips ("total": all threads):
// where a round trip's time goes, whatever else runs on the machine.
json cpuPerGb(const Timing& t, std::uint64_t bytes_per_trip) {
  const double gb =
      static_cast<double>(bytes_per_trip) * static_cast<double>(t.seconds.size()) / 1e9;
  json out = json::object();
  if (gb <= 0) return out;
  double total = 0;
  for (const auto& [name, seconds] : t.cpu) {
    if (seconds / gb >= 0.001) out[name] = seconds / gb;
    total += seconds;
  }
  out["total"] = total / gb;
  return out;
}

// The measurements of one size against servers of that size, wherever they are. Each
// Target takes one run: the group is configured at epochs 1 and 2.
json measureAgainst(const Target& target, std::size_t mib, const Selection& only, int min_trips,
                    double min_seconds) {
  const std::size_t bytes = mib << 20;
  const std::size_t params = bytes / sizeof(float);
  const std::uint64_t trip_bytes = 2 * bytes;
  json row = {{"size_mib", mib}};

  // tcp, push (K never) and the central exchange alternate; then K = 1 on its own, since
  // its exchanges run on after each reply and would overlap whatever is timed next.
  Timing tcp, push, k1, exch;
  {
    TcpEchoClient echo(target.echo_host, target.echo_port, bytes);
    if (only.tcp && !echo.ok()) {
      std::fprintf(stderr, "dataplane: cannot reach the TCP echo at %s:%u\n",
                   target.echo_host.c_str(), static_cast<unsigned>(target.echo_port));
    }
    PushTrips pusher(target, params, kNeverExchange, 1);
    ExchangeTrips exchanger(target, params);
    std::vector<std::function<bool()>> trips;
    std::vector<Timing*> into;
    auto add = [&](bool on, std::function<bool()> fn, Timing* t) {
      if (!on) return;
      trips.push_back(std::move(fn));
      into.push_back(t);
    };
    add(
        only.tcp && echo.ok(), [&] { return echo.roundTrip(); }, &tcp);
    add(
        only.push, [&] { return pusher.trip(); }, &push);
    add(
        only.exchange, [&] { return exchanger.trip(); }, &exch);
    auto timed = timeInterleaved(trips, min_trips, min_seconds * static_cast<double>(trips.size()));
    for (std::size_t i = 0; i < timed.size(); ++i) *into[i] = std::move(timed[i]);
  }
  if (only.k1) {
    PushTrips pusher(target, params, 1, 2);
    k1 = std::move(timeInterleaved({[&] { return pusher.trip(); }}, min_trips, min_seconds)[0]);
  }

  const std::pair<const char*, const Timing*> all[] = {{"tcp_round_trip", &tcp},
                                                       {"push_round_trip", &push},
                                                       {"push_round_trip_k1", &k1},
                                                       {"central_exchange", &exch}};
  for (const auto& [name, t] : all) {
    if (t->seconds.empty()) continue;
    emit({{"bench", "dataplane"},
          {"what", name},
          {"size_mib", mib},
          {"bytes_per_trip", trip_bytes},
          {"trips", t->seconds.size()},
          {"p50_ms", percentile(t->seconds, 0.5) * 1e3},
          {"p90_ms", percentile(t->seconds, 0.9) * 1e3},
          {"gbps", t->gbps(trip_bytes)},
          {"cpu_s_per_gb", cpuPerGb(*t, trip_bytes)}});
  }
  row["groupsgd_gbps"] = push.gbps(trip_bytes);
  row["tcp_gbps"] = tcp.gbps(trip_bytes);
  row["ratio"] = row["tcp_gbps"].get<double>() > 0
                     ? row["groupsgd_gbps"].get<double>() / row["tcp_gbps"].get<double>()
                     : 0.0;
  row["k1_gbps"] = k1.gbps(trip_bytes);
  row["exchange_gbps"] = exch.gbps(trip_bytes);
  row["exchange_ratio"] = row["tcp_gbps"].get<double>() > 0
                              ? row["exchange_gbps"].get<double>() / row["tcp_gbps"].get<double>()
                              : 0.0;
  row["tcp_cpu_s_per_gb"] = cpuPerGb(tcp, trip_bytes).value("total", 0.0);
  row["push_cpu_s_per_gb"] = cpuPerGb(push, trip_bytes).value("total", 0.0);
  row["part_kib"] = g_part_bytes >> 10;
  return row;
}

// One size in this process: its servers and the TCP echo on 127.0.0.1.
json measureSize(std::size_t mib, const Selection& only, int min_trips, double min_seconds) {
  Servers s;
  if (Status st = s.start((mib << 20) / sizeof(float), kLoopback); !st) {
    std::fprintf(stderr, "dataplane: cannot start servers: %s\n", st.toString().c_str());
    return {{"size_mib", mib}};
  }
  TcpEchoServer echo(kLoopback);
  return measureAgainst({s.centralEndpoint(), s.groupEndpoint(), kLoopback, echo.port()}, mib, only,
                        min_trips, min_seconds);
}

// 8 members of one group (K = 1) push a 1 MiB gradient in lockstep; per step, the time
// from the first push sent to the last reply received. `group_ep`: a group PS with a
// model of kLatencyParams parameters, used by no one else.
json measureStepLatency(const std::string& group_ep, std::uint32_t members, int steps) {
  const std::size_t params = kLatencyParams;
  {
    zmq::context_t ctx(1);
    if (!configureMembers(ctx, group_ep, members, 1, 1)) return {};
  }
  std::vector<std::vector<Clock::time_point>> sent(members), done(members);
  std::atomic<bool> failed{false};
  std::barrier pulled(members);  // nobody pushes before every member is active
  std::vector<std::thread> threads;
  for (std::uint32_t m = 0; m < members; ++m) {
    threads.emplace_back([&, m] {
      zmq::context_t ctx(1);  // as a separate worker process would have
      client::GroupClient client(ctx, memberAssignment(m + 1, 1, group_ep, params), 1, kTimeout);
      std::vector<float> replica(params), grad(params, 1e-6f);
      std::uint64_t step = pullAndMeet(client, replica, failed, pulled);
      for (int i = 0; i < steps && !failed; ++i) {
        sent[m].push_back(Clock::now());
        auto a = client.push(step, grad, 32, 0.0f, 0.0f, replica);
        done[m].push_back(Clock::now());
        if (!a || !a->accepted) {
          failed = true;
          break;
        }
        step = a->step;
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed) return {};
  std::vector<double> ms;
  const int skip = std::min(5, steps / 10);  // warm-up steps
  for (int i = skip; i < steps; ++i) {
    Clock::time_point first = sent[0][i], last = done[0][i];
    for (std::uint32_t m = 1; m < members; ++m) {
      first = std::min(first, sent[m][i]);
      last = std::max(last, done[m][i]);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(last - first).count());
  }
  const double total_s =
      std::chrono::duration<double>(done[0].back() - sent[0][static_cast<std::size_t>(skip)])
          .count();
  json j = {{"bench", "dataplane"},
            {"what", "step_latency"},
            {"model_mib", 1},
            {"members", members},
            {"steps", ms.size()},
            {"p50_ms", percentile(ms, 0.5)},
            {"p90_ms", percentile(ms, 0.9)},
            {"p99_ms", percentile(ms, 0.99)},
            {"max_ms", percentile(ms, 1.0)},
            {"steps_per_s", static_cast<double>(ms.size()) / total_s}};
  emit(j);
  return j;
}

// The step latency in this process: its own servers on 127.0.0.1.
json measureStepLatencyHere(std::uint32_t members, int steps) {
  Servers s;
  if (!s.start(kLatencyParams, kLoopback)) return {};
  return measureStepLatency(s.groupEndpoint(), members, steps);
}

// ---- two processes: --serve-only here, --connect elsewhere -----------------------------

// --serve-only: the servers of every size (and of the step latency) and the TCP echo on
// `host`, until SIGINT or SIGTERM. Their endpoints (dataplane_remote.h) go to stdout and,
// written whole, to `endpoint_file`. One --connect run per start: it configures the
// groups at fixed epochs.
int serve(const std::string& host, const std::vector<std::size_t>& sizes, bool latency,
          const std::string& endpoint_file) {
  // Blocked before any thread starts, so only sigwait() below sees them and no I/O thread
  // is ever interrupted.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::vector<std::unique_ptr<Servers>> servers;
  auto start = [&](std::size_t params) -> const Servers* {
    servers.push_back(std::make_unique<Servers>());
    if (Status st = servers.back()->start(params, host); !st) {
      std::fprintf(stderr, "dataplane: cannot start servers on %s: %s\n", host.c_str(),
                   st.toString().c_str());
      return nullptr;
    }
    return servers.back().get();
  };
  json spec = {
      {"bench", "dataplane"}, {"serving", true}, {"host", host}, {"part_kib", g_part_bytes >> 10}};
  json rows = json::array();
  for (std::size_t mib : sizes) {
    const Servers* s = start((mib << 20) / sizeof(float));
    if (s == nullptr) return 1;
    rows.push_back(
        {{"size_mib", mib}, {"central", s->centralEndpoint()}, {"group", s->groupEndpoint()}});
  }
  spec["sizes"] = rows;
  if (latency) {
    const Servers* s = start(kLatencyParams);
    if (s == nullptr) return 1;
    spec["latency"] = {
        {"model_mib", 1}, {"central", s->centralEndpoint()}, {"group", s->groupEndpoint()}};
  }
  TcpEchoServer echo(host);
  if (!echo.ok()) {
    std::fprintf(stderr, "dataplane: cannot listen on %s for the TCP echo: %s\n", host.c_str(),
                 std::strerror(errno));
    return 1;
  }
  spec["echo_port"] = echo.port();
  if (!endpoint_file.empty()) {
    if (Status st = writeFileWhole(endpoint_file, spec.dump() + "\n"); !st) {
      std::fprintf(stderr, "dataplane: %s\n", st.toString().c_str());
      return 1;
    }
  }
  emit(spec);
  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "dataplane: serving stopped by signal %d\n", sig);
  return 0;
}

// Picks the sizes of `spec` that `wanted` names (all of them when it is empty); false with
// a message when one is not served.
bool pickSizes(const RemoteSpec& spec, const std::vector<std::size_t>& wanted,
               std::vector<std::pair<std::size_t, Target>>& out) {
  if (wanted.empty()) {
    out = spec.sizes;
    return true;
  }
  for (std::size_t mib : wanted) {
    auto it = std::find_if(spec.sizes.begin(), spec.sizes.end(),
                           [&](const auto& s) { return s.first == mib; });
    if (it == spec.sizes.end()) {
      std::fprintf(stderr,
                   "dataplane: --sizes: %zu MiB is not served at %s (start the server "
                   "with it in --sizes)\n",
                   mib, spec.host.c_str());
      return false;
    }
    out.push_back(*it);
  }
  return true;
}

// The command line.
struct DataplaneOptions {
  bool quick = false, latency = true, tune_malloc = true, serve_only = false;
  std::string connect, bind = kLoopback, endpoint_file;
  std::vector<std::size_t> asked_sizes;
  double seconds = 0;
  std::vector<std::string> only_list;
  std::uint32_t part_kib = kDefaultPartBytes >> 10;
  int minTrips() const { return quick ? 3 : 5; }
  int latencySteps() const { return quick ? 100 : 500; }
  std::vector<std::size_t> sizes() const {
    if (!asked_sizes.empty()) return asked_sizes;
    return quick ? std::vector<std::size_t>{1, 16, 64} : std::vector<std::size_t>{1, 16, 64, 256};
  }
};

// Parses the command line into o; an exit code when that is the end of it (help, an error).
std::optional<int> parseOptions(int argc, char** argv, DataplaneOptions& o) {
  auto app = benchApp("groupsgd-bench-dataplane",
                      "push and exchange bandwidth against raw TCP; three modes: everything in "
                      "this process (default), --serve-only (servers, for a --connect elsewhere), "
                      "--connect (clients against such servers)");
  bool no_latency = false, tune_malloc_flag = false, no_tune_malloc = false;
  app->add_flag("--quick", o.quick, "sizes 1,16,64 and short runs (CI smoke test)");
  addList(*app, "--sizes", o.asked_sizes, "tensor sizes in MiB (default 1,16,64,256)");
  app->add_flag("--no-latency", no_latency, "skip the step-latency measurement");
  // As groupsgdd and groupsgd-worker run: allocator tuned, unless asked otherwise.
  app->add_flag("--tune-malloc", tune_malloc_flag, "tune the allocator (the default)");
  app->add_flag("--no-tune-malloc", no_tune_malloc, "leave glibc's allocator settings alone");
  auto* serve_opt = app->add_flag("--serve-only", o.serve_only,
                                  "run the servers (and a TCP echo) only, until SIGTERM");
  auto* connect_opt = app->add_option("--connect", o.connect,
                                      "measure against the servers a --serve-only run wrote "
                                      "(its endpoint file, or that JSON)");
  serve_opt->excludes(connect_opt);
  app->add_option("--bind", o.bind, "--serve-only: the IPv4 address to bind (default 127.0.0.1)")
      ->needs(serve_opt);
  app->add_option("--endpoint-file", o.endpoint_file, "--serve-only: where to write the endpoints")
      ->needs(serve_opt);
  auto* seconds_opt =
      app->add_option("--seconds", o.seconds, "seconds per measurement (default 3, quick 0.5)")
          ->check(kPositive)
          ->excludes(serve_opt);
  app->add_option("--only", o.only_list, "a subset of tcp,push,k1,exchange")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::IsMember({"tcp", "push", "k1", "exchange"}))
      ->excludes(serve_opt);
  // With --connect the server's part size holds.
  app->add_option("--part-kib", o.part_kib, "chunk size of the pushes in KiB (default 4096)")
      ->check(CLI::Range(1u, 1u << 20))
      ->excludes(connect_opt);
  if (auto rc = parseCommandLine(*app, argc, argv)) return *rc;
  o.latency = !no_latency;
  o.tune_malloc = !no_tune_malloc;
  if (seconds_opt->count() == 0) o.seconds = o.quick ? 0.5 : 3;
  return std::nullopt;
}

// What to measure: the sizes, how to measure one size and the step latency, and (with
// --connect) where the servers are.
struct MeasurePlan {
  std::vector<std::size_t> sizes;
  std::function<json(std::size_t)> measure;
  std::function<json()> measure_latency;
  json remote;
};

// Servers in this process, started per measurement.
MeasurePlan localPlan(const DataplaneOptions& o, const Selection& only) {
  MeasurePlan plan;
  plan.sizes = o.sizes();
  plan.measure = [only, min_trips = o.minTrips(), seconds = o.seconds](std::size_t mib) {
    return measureSize(mib, only, min_trips, seconds);
  };
  plan.measure_latency = [steps = o.latencySteps()] { return measureStepLatencyHere(8, steps); };
  return plan;
}

// The servers a --serve-only run published (--connect); nullopt, with a message, when
// they cannot serve what is asked. Their part size holds from here on.
std::optional<MeasurePlan> remotePlan(const DataplaneOptions& o, const Selection& only) {
  auto spec = parseRemoteSpec(o.connect);
  if (!spec) {
    std::fprintf(stderr, "dataplane: %s\n", spec.status().message().c_str());
    return std::nullopt;
  }
  std::vector<std::pair<std::size_t, Target>> remote_sizes;
  if (!pickSizes(*spec, o.asked_sizes, remote_sizes)) return std::nullopt;
  if (o.latency && !spec->latency_group) {
    std::fprintf(stderr,
                 "dataplane: the server at %s serves no step-latency group (started "
                 "with --no-latency): pass --no-latency here too\n",
                 spec->host.c_str());
    return std::nullopt;
  }
  g_part_bytes = spec->part_bytes;
  MeasurePlan plan;
  for (const auto& [mib, target] : remote_sizes) plan.sizes.push_back(mib);
  plan.measure = [remote_sizes, only, min_trips = o.minTrips(),
                  seconds = o.seconds](std::size_t mib) {
    for (const auto& [m, target] : remote_sizes) {
      if (m == mib) return measureAgainst(target, mib, only, min_trips, seconds);
    }
    return json{{"size_mib", mib}};
  };
  plan.measure_latency = [group = spec->latency_group.value_or(""), steps = o.latencySteps()] {
    return measureStepLatency(group, 8, steps);
  };
  plan.remote = {{"host", spec->host}, {"echo_port", remote_sizes.front().second.echo_port}};
  return plan;
}

// Runs the plan: one row per size, then the step latency; "ok" says whether all ran.
json measureAll(const MeasurePlan& plan, const DataplaneOptions& o, const Selection& only) {
  json summary = {{"bench", "dataplane"},
                  {"quick", o.quick},
                  {"malloc_tuned", o.tune_malloc},
                  {"target_ratio", kTargetRatio},
                  {"exchange_target_ratio", kExchangeTargetRatio},
                  {"part_kib", g_part_bytes >> 10}};
  if (!plan.remote.is_null()) summary["remote"] = plan.remote;
  json rows = json::array();
  bool ok = true;
  bool target_met = true;
  bool exchange_met = true;
  for (std::size_t mib : plan.sizes) {
    json row = plan.measure(mib);
    ok = ok && row.contains("ratio") && (!only.push || row["groupsgd_gbps"].get<double>() > 0) &&
         (!only.tcp || row["tcp_gbps"].get<double>() > 0);
    if (row.contains("ratio") && mib >= 16) {
      target_met = target_met && row["ratio"].get<double>() >= kTargetRatio;
      exchange_met = exchange_met && row["exchange_ratio"].get<double>() >= kExchangeTargetRatio;
    }
    rows.push_back(row);
  }
  summary["sizes"] = rows;
  summary["ratio_target_met_at_16mib_and_up"] = target_met;
  summary["exchange_target_met_at_16mib_and_up"] = exchange_met;
  if (o.latency) {
    json lat = plan.measure_latency();
    ok = ok && !lat.empty();
    summary["step_latency_1mib_8w"] = lat.empty() ? json()
                                                  : json{{"p50_ms", lat["p50_ms"]},
                                                         {"p99_ms", lat["p99_ms"]},
                                                         {"steps_per_s", lat["steps_per_s"]}};
  }
  summary["ok"] = ok;
  return summary;
}

}  // namespace

int main(int argc, char** argv) {
  // The pushing client and the TCP client run on this thread: named for the CPU figures.
  pthread_setname_np(pthread_self(), "bench-client");
  DataplaneOptions o;
  if (auto rc = parseOptions(argc, argv, o)) return *rc;
  const Selection only = Selection::of(o.only_list);
  g_part_bytes = o.part_kib << 10;
  if (sockaddr_in unused{}; o.serve_only && !ipv4Address(o.bind, 0, unused)) {
    std::fprintf(stderr, "dataplane: --bind '%s' is not an IPv4 address\n", o.bind.c_str());
    return 2;
  }
  log::setLevel(log::Level::kError);
  if (o.tune_malloc && !tuneMalloc()) {
    std::fprintf(stderr, "dataplane: mallopt refused the settings\n");
    return 1;
  }
  if (o.serve_only) return serve(o.bind, o.sizes(), o.latency, o.endpoint_file);
  const std::optional<MeasurePlan> plan =
      o.connect.empty() ? localPlan(o, only) : remotePlan(o, only);
  if (!plan) return 2;
  const json summary = measureAll(*plan, o, only);
  emit(summary);
  return summary["ok"].get<bool>() ? 0 : 1;
}
