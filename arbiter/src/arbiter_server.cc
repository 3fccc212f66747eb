#include "groupsgd/arbiter/arbiter_server.h"

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "arbiter_codec.h"
#include "groupsgd/arbiter/arbiter_stats.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::arbiter {
namespace {

using Clock = std::chrono::steady_clock;
double msBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Where a lease request came from, so its grant (and keepalives) can be sent.
struct Asker {
  zmq::message_t routing_id;
  std::uint64_t seq = 0;
  Clock::time_point asked;
};
struct Held {
  Clock::time_point granted;
};
using Slot = std::tuple<std::string, std::uint64_t,
                        std::uint64_t>;  // device, job, worker
Slot slotOf(const std::string& device, LeaseKey k) { return {device, k.job, k.worker}; }

}  // namespace

struct ArbiterServer::State {
  ArbiterConfig cfg;
  zmq::socket_t sock;
  std::string endpoint;
  LeaseTable table;
  std::map<Slot, Asker> waiting;
  std::map<Slot, Held> held;
  ArbiterCounters counters;
  std::map<std::uint64_t, JobLeaseStats> jobs;
  std::map<std::string, DeviceLeaseStats> devices;  // served so far, by name
  mutable std::mutex snapshot_mu;                   // guards published, read from other threads
  ArbiterSnapshot published;
  std::mutex weights_mu;  // guards new_weights, the one thing set from other threads
  std::vector<std::pair<std::uint64_t, double>> new_weights;

  void applyNewWeights() {
    std::lock_guard<std::mutex> lock(weights_mu);
    for (const auto& [job, w] : new_weights) {
      table.setWeight(job, w);
      GSGD_INFO("arbiter: job " << job << " weighs " << w);
    }
    new_weights.clear();
  }

  State(const ArbiterConfig& c, zmq::socket_t s, std::string ep)
      : cfg(c), sock(std::move(s)), endpoint(std::move(ep)), table(c.policy, c.weights) {
    counters.policy = policyName(c.policy);
  }

  void send(const zmq::message_t& to, ArbiterOut& out, bool* delivered = nullptr) {
    std::vector<zmq::message_t> frames;
    frames.push_back(out.frame());
    Status s = sendFrames(sock, std::move(frames), &to);
    if (delivered) *delivered = s.isOk();
    if (!s) GSGD_DEBUG("arbiter: reply not delivered: " << s.message());
  }

  void refuse(const zmq::message_t& to, std::uint64_t seq, Code code, const std::string& why) {
    ArbiterOut out(0, 0, seq);
    auto e = out.root.initBody().initError();
    e.setCode(static_cast<std::uint16_t>(code));
    e.setMessage(why);
    send(to, out);
  }

  // Sends the grants; one that cannot be delivered (its worker is gone) grants
  // on.
  void deliver(std::vector<Grant> grants) {
    std::deque<Grant> todo(grants.begin(), grants.end());
    while (!todo.empty()) {
      Grant g = std::move(todo.front());
      todo.pop_front();
      auto it = waiting.find(slotOf(g.device, g.key));
      if (it == waiting.end()) continue;  // cannot happen: every waiter has an asker
      const auto now = Clock::now();
      ArbiterOut out(g.key.job, g.key.worker, it->second.seq);
      out.root.setDevice(g.device);
      if (g.locked) {
        out.root.initBody().setGrantLocked();
      } else {
        out.root.initBody().setGrant();
      }
      bool delivered = false;
      send(it->second.routing_id, out, &delivered);
      JobLeaseStats& job = jobs[g.key.job];
      job.job_id = g.key.job;
      const double waited = msBetween(it->second.asked, now);
      job.wait_ms += waited;
      waiting.erase(it);
      if (!delivered) {
        for (Grant& next : table.forget(g.device, g.key)) todo.push_back(std::move(next));
        continue;
      }
      ++job.grants;
      ++counters.grants;
      DeviceLeaseStats& dev = deviceStats(g.device);
      ++dev.grants;
      dev.wait_ms += waited;
      held[slotOf(g.device, g.key)] = Held{now};
    }
  }

  void onAcquire(zmq::message_t&& from, proto::ArbiterMessage::Reader m) {
    const std::string device = m.getDevice();
    if (device.empty())
      return refuse(from, m.getSeq(), Code::kInvalidArgument, "acquire names no device");
    LeaseKey key{m.getJobId(), m.getWorkerId()};
    deviceStats(device);              // listed from its first request on, granted or not
    held.erase(slotOf(device, key));  // asking again replaces an old lease
    waiting[slotOf(device, key)] = Asker{std::move(from), m.getSeq(), Clock::now()};
    const auto acquire = m.getBody().getAcquire();
    deliver(table.acquire(device, key, acquire.getStep(), acquire.getHandoff()));
    // Still waiting: say so at once, so the worker knows the arbiter is alive.
    auto it = waiting.find(slotOf(device, key));
    if (it != waiting.end()) keepalive(device, key, it->second);
  }

  void onRelease(proto::ArbiterMessage::Reader m) {
    const std::string device = m.getDevice();
    LeaseKey key{m.getJobId(), m.getWorkerId()};
    bool stray = false;
    auto granted = table.release(device, key, &stray);
    if (stray) {
      ++counters.stray_releases;
      return;
    }
    held.erase(slotOf(device, key));
    JobLeaseStats& job = jobs[key.job];
    job.job_id = key.job;
    job.held_ms += m.getBody().getRelease().getHeldMs();
    deviceStats(device).held_ms += m.getBody().getRelease().getHeldMs();
    deliver(std::move(granted));
  }

  void onStatsQuery(const zmq::message_t& from, std::uint64_t seq) {
    ArbiterOut out(0, 0, seq);
    auto st = out.root.initBody().initStats();
    st.setPolicy(counters.policy);
    st.setGrants(counters.grants);
    st.setExpired(counters.expired);
    st.setStrayReleases(counters.stray_releases);
    auto list = st.initJobs(static_cast<unsigned>(jobs.size()));
    unsigned i = 0;
    for (const auto& [id, j] : jobs) {
      list[i].setJobId(id);
      list[i].setGrants(j.grants);
      list[i].setWaitMs(j.wait_ms);
      list[i].setHeldMs(j.held_ms);
      ++i;
    }
    send(from, out);
  }

  DeviceLeaseStats& deviceStats(const std::string& device) {
    DeviceLeaseStats& d = devices[device];
    d.device = device;
    return d;
  }

  // Copies the counters and each device's holders and queue for snapshot().
  void publish() {
    ArbiterSnapshot snap;
    snap.counters = counters;
    for (const auto& [id, j] : jobs) snap.counters.jobs.push_back(j);
    for (const auto& [name, d] : devices) {
      DeviceLeaseStats now = d;
      for (const LeaseKey& k : table.holders(name)) now.holder_jobs.push_back(k.job);
      now.waiting = table.waiting(name);
      snap.devices.push_back(std::move(now));
    }
    std::lock_guard<std::mutex> lock(snapshot_mu);
    published = std::move(snap);
  }

  void keepalive(const std::string& device, LeaseKey key, const Asker& a) {
    ArbiterOut out(key.job, key.worker, a.seq);
    out.root.setDevice(device);
    out.root.initBody().setWaiting();
    send(a.routing_id, out);
  }

  void serveOne() {
    auto got = recvRouted(sock);
    if (!got) return;
    if (got->frames.size() != 1) {
      return refuse(got->routing_id, 0, Code::kInvalidArgument, "an arbiter message is one frame");
    }
    auto in = ArbiterIn::decode(got->frames[0]);
    if (!in) return refuse(got->routing_id, 0, in.status().code(), in.status().message());
    auto m = in->root();
    switch (m.getBody().which()) {
      case proto::ArbiterMessage::Body::ACQUIRE:
        return onAcquire(std::move(got->routing_id), m);
      case proto::ArbiterMessage::Body::RELEASE:
        return onRelease(m);
      case proto::ArbiterMessage::Body::STATS_QUERY:
        return onStatsQuery(got->routing_id, m.getSeq());
      default:
        return refuse(got->routing_id, m.getSeq(), Code::kInvalidArgument,
                      "the arbiter serves acquire, release and statsQuery");
    }
  }

  // Keepalives to every waiter; leases held too long are taken back.
  void housekeeping() {
    for (const auto& [slot, asker] : waiting) {
      keepalive(std::get<0>(slot), LeaseKey{std::get<1>(slot), std::get<2>(slot)}, asker);
    }
    const auto now = Clock::now();
    std::vector<Slot> expired;
    for (const auto& [slot, h] : held) {
      if (msBetween(h.granted, now) > cfg.lease_timeout_ms) expired.push_back(slot);
    }
    for (const Slot& slot : expired) {
      const auto& [device, job, worker] = slot;
      GSGD_WARN("arbiter: lease of job " << job << " worker " << worker << " on " << device
                                         << " held over " << cfg.lease_timeout_ms
                                         << " ms; taken back");
      ++counters.expired;
      ++deviceStats(device).expired;
      held.erase(slot);
      deliver(table.forget(device, LeaseKey{job, worker}));
    }
  }
};

ArbiterServer::ArbiterServer(std::unique_ptr<State> state) : state_(std::move(state)) {}
ArbiterServer::~ArbiterServer() = default;
const std::string& ArbiterServer::endpoint() const { return state_->endpoint; }

Result<std::unique_ptr<ArbiterServer>> ArbiterServer::create(zmq::context_t& ctx,
                                                             const ArbiterConfig& cfg) {
  if (cfg.keepalive_ms == 0 || cfg.lease_timeout_ms == 0) {
    return invalidArgument("arbiter keepalive and lease timeout must be > 0 ms");
  }
  SocketOptions opts = serverSocketOptions(cfg.curve);
  opts.max_message_bytes = static_cast<std::int64_t>(kMaxArbiterMessageBytes);
  auto sock = makeSocket(ctx, zmq::socket_type::router, opts);
  if (!sock) return sock.status();
  auto ep = bindSocket(*sock, cfg.listen);
  if (!ep) return ep.status();
  return std::unique_ptr<ArbiterServer>(
      new ArbiterServer(std::make_unique<State>(cfg, std::move(*sock), *ep)));
}

void ArbiterServer::setJobWeight(std::uint64_t job, double weight) {
  std::lock_guard<std::mutex> lock(state_->weights_mu);
  state_->new_weights.emplace_back(job, weight);
}

ArbiterSnapshot ArbiterServer::snapshot() const {
  std::lock_guard<std::mutex> lock(state_->snapshot_mu);
  return state_->published;
}

void ArbiterServer::run(const std::atomic<bool>& stop) {
  State& s = *state_;
  GSGD_INFO("arbiter on " << s.endpoint << ", policy " << policyName(s.cfg.policy));
  const auto period = std::chrono::milliseconds(s.cfg.keepalive_ms);
  auto next_housekeeping = Clock::now() + period;
  while (!stop.load()) {
    s.applyNewWeights();
    const auto now = Clock::now();
    const auto until =
        std::min(next_housekeeping - now, Clock::duration(std::chrono::milliseconds(50)));
    auto readable = pollReadable(s.sock, std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::max(until, Clock::duration::zero())));
    if (!readable) {
      GSGD_WARN("arbiter: " << readable.status().message());
      continue;
    }
    if (*readable) {
      // Serve what is queued (bounded, so housekeeping still runs under load).
      for (int i = 0; i < 64 && (s.sock.get(zmq::sockopt::events) & ZMQ_POLLIN); ++i) s.serveOne();
    }
    if (Clock::now() >= next_housekeeping) {
      s.housekeeping();
      s.publish();
      next_housekeeping = Clock::now() + period;
    }
  }
}

}  // namespace groupsgd::arbiter
