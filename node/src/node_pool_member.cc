#include "node_pool_member.h"

#include <map>
#include <memory>
#include <set>
#include <thread>

#include "groupsgd/common/log.h"
#include "groupsgd/daemon/group_server_setup.h"
#include "node_head.h"

namespace groupsgd::node {
namespace {

using Clock = std::chrono::steady_clock;

// One placement served on its own thread until the job ends or the front drops it.
struct Runner {
  std::uint32_t slots = 0;
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::thread thread;
};

void serveJob(const DaemonConfig& node_cfg, zmq::context_t& ctx, const CurveKeys& keys,
              const client::NodePlacement& p, std::uint32_t slots, Runner& r) {
  log::setThreadTag("node job " + p.job);
  DaemonConfig cfg = node_cfg;
  if (Status s = applyGroupSettings(p.settings, &cfg); !s) {
    GSGD_ERROR("job '" << p.job << "': its group PS settings are refused: " << s.toString());
    r.done.store(true);
    return;
  }
  cfg.job_id = p.job_id;
  cfg.job_name = p.job;
  cfg.node_groups = slots;
  cfg.coordinator = p.coordinator;
  client::CoordinatorClient coord(ctx, p.coordinator, p.job_id, std::chrono::milliseconds(5000),
                                  keys);
  // A coordinator that declared this node dead forgets it: serve it again, fresh.
  while (!r.stop.load() && serveHead(cfg, ctx, coord, keys, r.stop, [] {}) == HeadEnd::kHeadLost) {
  }
  r.done.store(true);
}

class PoolMember {
 public:
  PoolMember(const DaemonConfig& cfg, zmq::context_t& ctx, const CurveKeys& keys)
      : cfg_(cfg), ctx_(ctx), keys_(keys) {}
  ~PoolMember() { stopAll(/*wait=*/true); }

  // Starts the placements new to this node (or grown), stops those no longer listed.
  void reconcile(const std::vector<client::NodePlacement>& placements) {
    std::set<std::uint64_t> listed;
    for (const auto& p : placements) {
      listed.insert(p.job_id);
      auto& runners = jobs_[p.job_id];
      std::uint32_t served = 0;
      for (const auto& r : runners) served += r->slots;
      if (p.slots <= served) continue;
      auto r = std::make_unique<Runner>();
      r->slots = p.slots - served;
      GSGD_INFO("job '" << p.job << "' (id " << p.job_id << ") placed " << r->slots
                        << " group PS slot(s) here; its coordinator is " << p.coordinator);
      Runner* raw = r.get();
      r->thread = std::thread([this, p, raw] { serveJob(cfg_, ctx_, keys_, p, raw->slots, *raw); });
      runners.push_back(std::move(r));
    }
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (listed.count(it->first) != 0) {
        ++it;
        continue;
      }
      // Not joined here: a runner may be waiting for its (gone) coordinator to answer,
      // and the front must keep hearing this node meanwhile.
      for (auto& r : it->second) {
        r->stop.store(true);
        retiring_.push_back(std::move(r));
      }
      GSGD_INFO("job id " << it->first << " released its slots here");
      it = jobs_.erase(it);
    }
    joinRetired(/*wait=*/false);
  }

  // wait: join them all (the node stops); else they finish on their own.
  void stopAll(bool wait) {
    for (auto& [id, runners] : jobs_) {
      for (auto& r : runners) {
        r->stop.store(true);
        retiring_.push_back(std::move(r));
      }
    }
    jobs_.clear();
    joinRetired(wait);
  }

 private:
  void joinRetired(bool wait) {
    for (auto it = retiring_.begin(); it != retiring_.end();) {
      if (!wait && !(*it)->done.load()) {
        ++it;
        continue;
      }
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = retiring_.erase(it);
    }
  }

  const DaemonConfig& cfg_;
  zmq::context_t& ctx_;
  const CurveKeys& keys_;
  std::map<std::uint64_t, std::vector<std::unique_ptr<Runner>>> jobs_;
  std::vector<std::unique_ptr<Runner>> retiring_;  // stopped, joined once done
};

}  // namespace

int servePool(const DaemonConfig& cfg, zmq::context_t& ctx, client::CoordinatorClient& front,
              client::Assignment me, const CurveKeys& keys, const std::atomic<bool>& stop,
              const std::function<void()>& between_heartbeats) {
  GSGD_INFO("in the pool of the multi-job daemon at " << cfg.coordinator << ": " << cfg.node_groups
                                                      << " group PS slot(s) offered");
  PoolMember member(cfg, ctx, keys);
  client::HeartbeatStats stats;
  stats.group_slots = cfg.node_groups;
  auto last_answer = Clock::now();
  int failures = 0;
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(me.heartbeat_ms));
    between_heartbeats();
    auto hb = front.heartbeat(me, stats);
    if (!hb) {
      if (++failures % 10 == 0) {
        GSGD_WARN("the daemon's front is silent or refuses (" << hb.status().toString()
                                                              << "); placed jobs keep serving");
      }
      if (Clock::now() - last_answer >
          std::chrono::milliseconds(static_cast<std::int64_t>(cfg.give_up_s * 1000))) {
        GSGD_ERROR("the daemon's front silent for " << cfg.give_up_s << " s; giving up");
        return 1;
      }
      continue;
    }
    failures = 0;
    last_answer = Clock::now();
    if (hb->stop) break;
    if (hb->reregister) {
      // A restarted daemon: its jobs have new coordinators and are placed afresh.
      GSGD_WARN("the daemon does not know this node (restarted?); joining its pool again");
      member.stopAll(/*wait=*/false);
      auto again = registerNode(front, client::Role::kTool, {}, stop, cfg.give_up_s);
      if (!again || !again->node_pool) {
        if (stop.load()) break;
        GSGD_ERROR("cannot join the daemon's pool again: "
                   << (again ? "it is no multi-job daemon now" : again.status().toString()));
        return 1;
      }
      me = *again;
      continue;
    }
    member.reconcile(hb->placements);
  }
  member.stopAll(/*wait=*/true);
  (void)front.leave(me, 0, 0);
  return 0;
}

}  // namespace groupsgd::node
