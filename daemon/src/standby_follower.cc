#include "standby_follower.h"

#include <algorithm>
#include <chrono>

#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/jobs/job.h"

namespace groupsgd::daemon {
namespace {

using centralps::ReplicationKind;
using centralps::ReplicationMessage;
using Clock = std::chrono::steady_clock;

class Follower {
 public:
  Follower(zmq::socket_t sock, const DaemonConfig& cfg, centralps::StandbyReplica replica,
           FollowedPrimary expected)
      : sock_(std::move(sock)),
        cfg_(cfg),
        replica_(std::move(replica)),
        expected_(std::move(expected)) {}

  // Until a takeover (its reason), stop or a wrong primary (nullopt; wrongPrimary() says).
  std::optional<std::string> run(const std::atomic<bool>& stop, ops::ControlServer* control) {
    hello();
    // A tenth of the bound (at most 50 ms: the control socket is answered between polls).
    const auto tick =
        std::chrono::milliseconds(std::clamp<std::uint32_t>(cfg_.standby_takeover_ms / 10, 2, 50));
    while (!stop.load() && wrong_primary_.isOk()) {
      if (auto why = serveControl(control)) return why;
      auto readable = pollReadable(sock_, tick);
      if (!readable) {
        GSGD_ERROR(readable.status().message());
        return std::nullopt;
      }
      if (*readable) receive();
      const auto now = Clock::now();
      if (!replica_.ready()) {
        if (now - last_hello_ > std::chrono::seconds(1)) hello();  // the primary is not up yet
        continue;
      }
      const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_);
      if (silent.count() > cfg_.standby_takeover_ms) {
        return "the primary has been silent " + std::to_string(silent.count()) +
               " ms (standby_takeover_ms " + std::to_string(cfg_.standby_takeover_ms) + ")";
      }
    }
    return std::nullopt;
  }

  const centralps::StandbyReplica& replica() const { return replica_; }
  const Status& wrongPrimary() const { return wrong_primary_; }
  const std::string& coordinatorState() const { return coordinator_state_; }
  std::uint64_t coordinatorStateAgeMs() const {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - coordinator_state_at_)
            .count());
  }

 private:
  void send(const ReplicationMessage& m) {
    if (Status s = sendFrames(sock_, centralps::encodeReplication(m)); !s) {
      GSGD_WARN("standby: could not send a " << centralps::replicationKindName(m.kind) << ": "
                                             << s.toString());
    }
  }
  void hello() {
    ReplicationMessage m;
    m.kind = ReplicationKind::kHello;
    m.term = replica_.term();
    send(m);
    last_hello_ = Clock::now();
  }
  void ack() { ack(replica_.version()); }
  void ack(std::uint64_t version) {
    ReplicationMessage m;
    m.kind = ReplicationKind::kAck;
    m.term = replica_.term();
    m.version = version;
    send(m);
  }
  // A refused message: the primary is told why, and this standby asks for a new snapshot.
  void refuse(const Status& why) {
    GSGD_ERROR("standby: refused replication: " << why.message());
    ReplicationMessage m;
    m.kind = ReplicationKind::kRefused;
    m.term = replica_.term();
    m.version = replica_.version();
    m.text = why.message();
    send(m);
    hello();
  }

  void receive() {
    auto frames = recvFrames(sock_);
    if (!frames) return;
    TensorView in_place;  // an update's delta, seen in its frame (no copy)
    auto m = centralps::decodeReplication(*frames, &in_place);
    if (!m) return refuse(m.status());
    switch (m->kind) {
      case ReplicationKind::kSnapshot: {
        const bool first = !replica_.ready();
        if (Status s = checkRole(m->text); !s) {
          wrong_primary_ = s;  // final: following it would take over the wrong thing
          return refuse(s);
        }
        if (Status s = replica_.applySnapshot(*m); !s) return refuse(s);
        last_heard_ = Clock::now();
        ack();
        GSGD_INFO("standby: following the primary (incarnation "
                  << m->term << ", role " << m->text << ") from version " << m->version << ", "
                  << m->param_count << " parameters");
        if (first && !cfg_.endpoint_file.empty()) {
          // Where this standby will serve once promoted (its port may still be 0 here).
          (void)writeFileAtomically(cfg_.endpoint_file, cfg_.listen + "\n");
        }
        return;
      }
      case ReplicationKind::kUpdate: {
        if (!m->tensor.empty()) in_place = TensorView{{m->tensor}, m->tensor.size()};
        if (Status s = replica_.checkUpdate(*m, in_place); !s) return refuse(s);
        last_heard_ = Clock::now();
        // Held here, checked: acknowledged before the optimizer step (which cannot fail
        // now), so the primary's wait does not include it. A takeover runs on this
        // thread, after the step.
        ack(m->version);
        if (Status s = replica_.applyUpdate(*m, in_place); !s) return refuse(s);
        return;
      }
      case ReplicationKind::kHeartbeat:
        if (Status s = replica_.checkTerm(m->term); !s) return refuse(s);
        if (!replica_.ready()) return;
        last_heard_ = Clock::now();
        return ack();
      case ReplicationKind::kRefused:  // e.g. another standby is attached: hello again later
        GSGD_WARN("standby: the primary refused this standby: " << m->text);
        return;
      case ReplicationKind::kCoordinatorState:
        // Kept as sent; read only by the promoted coordinator (coordinator_state.cc).
        if (Status s = replica_.checkTerm(m->term); !s) return refuse(s);
        if (!replica_.ready()) return;
        coordinator_state_ = std::move(m->text);
        coordinator_state_at_ = Clock::now();
        return;
      default:
        GSGD_WARN("standby: unexpected " << centralps::replicationKindName(m->kind));
    }
  }

  // A head's standby follows a head (all, coordinator) of the same shard cut; a shard's,
  // exactly its shard. The error names both sides.
  Status checkRole(const std::string& role) const {
    const bool shard = role.rfind("central-shard", 0) == 0;
    const std::string head_word = role.substr(0, role.find(' '));
    if (expected_.head ? !shard && role.substr(head_word.size()) == expected_.text
                       : role == expected_.text) {
      return Status::ok();
    }
    const std::string shards = expected_.head && expected_.text.empty()
                                   ? std::string(", central_shards 1")
                                   : expected_.text;
    return failedPrecondition(
        "the primary at " + cfg_.primary + " is " +
        (shard ? role
               : "a head (role " + role + (role == head_word ? ", central_shards 1" : "") + ")") +
        "; this standby follows " +
        (expected_.head ? std::string("a head (role all or coordinator") + shards + ")"
                        : expected_.text) +
        " (same role, central_shards, shard_index, central_shard_split, model and seed?)");
  }

  std::optional<std::string> serveControl(ops::ControlServer* control) {
    if (control == nullptr) return std::nullopt;
    while (auto req = control->tryPop()) {
      if (req->method() == "failover") {
        if (!replica_.ready()) {
          req->fail(ops::ControlError::kRefused,
                    "this standby has no snapshot of the primary yet: nothing to take over");
          continue;
        }
        nlohmann::ordered_json r = {{"taking_over", true},
                                    {"version", replica_.version()},
                                    {"incarnation", replica_.term() + 1}};
        req->respond(r);
        return std::string("groupsgdctl failover");
      }
      if (req->method() == "status") {
        nlohmann::ordered_json r = {{"role", "standby"},
                                    {"primary", cfg_.primary},
                                    {"following", replica_.ready()},
                                    {"primary_incarnation", replica_.term()},
                                    {"central_version", replica_.version()},
                                    {"run_samples", replica_.runSamples()},
                                    {"coordinator_state", !coordinator_state_.empty()}};
        req->respond(r);
        continue;
      }
      req->fail(ops::ControlError::kRefused,
                "a standby head answers status and failover only (until it takes over)");
    }
    return std::nullopt;
  }

  zmq::socket_t sock_;
  const DaemonConfig& cfg_;
  centralps::StandbyReplica replica_;
  FollowedPrimary expected_;
  Status wrong_primary_ = Status::ok();
  std::string coordinator_state_;  // the primary coordinator's last (kCoordinatorState)
  Clock::time_point coordinator_state_at_{};
  Clock::time_point last_heard_{}, last_hello_{};
};

}  // namespace

Result<std::optional<centralps::ReplicaState>> followPrimary(
    zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
    const centralps::CentralConfig& central, const FollowedPrimary& expected,
    const std::atomic<bool>& stop, ops::ControlServer* control) {
  SocketOptions opts = clientSocketOptions(keys);
  opts.linger_ms = 0;
  auto sock = makeSocket(ctx, zmq::socket_type::dealer, opts);
  if (!sock) return Status(sock.status().code(), "standby: " + sock.status().toString());
  GSGD_RETURN_IF_ERROR(connectSocket(*sock, cfg.primary));
  Follower follower(
      std::move(*sock), cfg,
      centralps::StandbyReplica(central.outer, central.outer_no_decay, central.shards), expected);
  GSGD_INFO("standby: following the primary at " << cfg.primary << "; taking over on " << cfg.listen
                                                 << " after " << cfg.standby_takeover_ms
                                                 << " ms of silence");
  const auto why = follower.run(stop, control);
  if (!follower.wrongPrimary().isOk()) {
    return Status(follower.wrongPrimary().code(), "standby: " + follower.wrongPrimary().message());
  }
  if (!why) return std::optional<centralps::ReplicaState>();
  centralps::ReplicaState state = follower.replica().state();
  state.coordinator_state = follower.coordinatorState();
  state.coordinator_state_age_ms = follower.coordinatorStateAgeMs();
  GSGD_WARN("TAKING OVER: " << *why << "; promoting at version " << state.version
                            << " (primary incarnation " << state.term << ")");
  return std::optional<centralps::ReplicaState>(std::move(state));
}

}  // namespace groupsgd::daemon
