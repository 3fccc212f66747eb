#include "groupsgd/jobs/serve_standby.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/jobs/job.h"
#include "groupsgd/jobs/job_config.h"
#include "table_replication.h"

namespace groupsgd::jobs {
namespace {

using centralps::ReplicationKind;
using centralps::ReplicationMessage;
using Clock = std::chrono::steady_clock;

Result<zmq::socket_t> dealerTo(zmq::context_t& ctx, const CurveKeys& keys,
                               const std::string& endpoint) {
  SocketOptions opts = clientSocketOptions(keys);
  opts.linger_ms = 0;
  auto sock = makeSocket(ctx, zmq::socket_type::dealer, opts);
  if (!sock) return sock.status();
  GSGD_RETURN_IF_ERROR(connectSocket(*sock, endpoint));
  return std::move(*sock);
}

void sendTo(zmq::socket_t& sock, const ReplicationMessage& m, const std::string& what) {
  if (Status s = sendFrames(sock, centralps::encodeReplication(m)); !s) {
    GSGD_WARN("standby: could not send a " << centralps::replicationKindName(m.kind) << " to "
                                           << what << ": " << s.toString());
  }
}

// One running job's central PS stream: the same exchange as a one-run standby head's
// (hello, snapshot, updates acknowledged once checked, heartbeats acknowledged), into a
// StandbyReplica.
class JobStream {
 public:
  JobStream(std::string name, std::string endpoint, zmq::socket_t sock,
            centralps::StandbyReplica replica, std::string role)
      : name_(std::move(name)),
        endpoint_(std::move(endpoint)),
        sock_(std::move(sock)),
        replica_(std::move(replica)),
        role_(std::move(role)) {
    hello();
  }
  zmq::socket_t& socket() { return sock_; }
  const std::string& endpoint() const { return endpoint_; }
  const centralps::StandbyReplica& replica() const { return replica_; }
  // The replica with the job coordinator's last state (as a one-run standby's takeover).
  centralps::ReplicaState takeoverState() const {
    centralps::ReplicaState state = replica_.state();
    state.coordinator_state = coordinator_state_;
    state.coordinator_state_age_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - coordinator_state_at_)
            .count());
    return state;
  }
  const std::string& name() const { return name_; }
  Clock::time_point lastHeard() const { return last_heard_; }

  void hello() {
    ReplicationMessage m;
    m.kind = ReplicationKind::kHello;
    m.term = replica_.term();
    send(m);
    last_hello_ = Clock::now();
  }
  // A job whose central PS did not answer yet (bound after the table said where): again.
  void helloIfUnanswered() {
    if (!replica_.ready() && Clock::now() - last_hello_ > std::chrono::seconds(1)) hello();
  }
  // Every message waiting.
  void receiveAll() {
    for (;;) {
      zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, std::chrono::milliseconds(0));
      } catch (const zmq::error_t&) {
        return;
      }
      if ((item.revents & ZMQ_POLLIN) == 0) return;
      receive();
    }
  }

 private:
  void send(const ReplicationMessage& m) { sendTo(sock_, m, "job '" + name_ + "'"); }
  void ack(std::uint64_t version) {
    ReplicationMessage m;
    m.kind = ReplicationKind::kAck;
    m.term = replica_.term();
    m.version = version;
    send(m);
  }
  void refuse(const Status& why) {
    GSGD_ERROR("standby: job '" << name_ << "': refused replication: " << why.message());
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
    last_heard_ = Clock::now();
    TensorView in_place;
    auto m = centralps::decodeReplication(*frames, &in_place);
    if (!m) return refuse(m.status());
    switch (m->kind) {
      case ReplicationKind::kSnapshot:
        if (m->text != role_) {
          return refuse(failedPrecondition("job '" + name_ +
                                           "': the primary's central PS is of role '" + m->text +
                                           "', the table says '" + role_ + "'"));
        }
        if (Status s = replica_.applySnapshot(*m); !s) return refuse(s);
        ack(replica_.version());
        GSGD_INFO("standby: job '" << name_ << "': following its central PS (incarnation "
                                   << m->term << ") from version " << m->version);
        return;
      case ReplicationKind::kUpdate:
        if (!m->tensor.empty()) in_place = TensorView{{m->tensor}, m->tensor.size()};
        if (Status s = replica_.checkUpdate(*m, in_place); !s) return refuse(s);
        ack(m->version);  // checked: held here (the step below cannot fail)
        if (Status s = replica_.applyUpdate(*m, in_place); !s) return refuse(s);
        return;
      case ReplicationKind::kHeartbeat:
        if (Status s = replica_.checkTerm(m->term); !s) return refuse(s);
        if (replica_.ready()) ack(replica_.version());
        return;
      case ReplicationKind::kCoordinatorState:  // the job's ledger and run log; not acked
        if (Status s = replica_.checkTerm(m->term); !s) return refuse(s);
        if (!replica_.ready()) return;
        coordinator_state_ = std::move(m->text);
        coordinator_state_at_ = Clock::now();
        return;
      default:
        GSGD_WARN("standby: job '" << name_ << "': unexpected "
                                   << centralps::replicationKindName(m->kind));
    }
  }

  std::string name_, endpoint_;
  zmq::socket_t sock_;
  centralps::StandbyReplica replica_;
  std::string role_;
  Clock::time_point last_hello_{}, last_heard_{};
  std::string coordinator_state_;  // the job coordinator's last (kCoordinatorState)
  Clock::time_point coordinator_state_at_{};
};

class ServeFollower {
 public:
  ServeFollower(zmq::context_t& ctx, const daemon::DaemonConfig& cfg, const CurveKeys& keys,
                zmq::socket_t table_sock)
      : ctx_(ctx), cfg_(cfg), keys_(keys), table_sock_(std::move(table_sock)) {}

  // Until a takeover (its reason), a stop (nullopt) or a wrong primary (error() says).
  std::optional<std::string> run(const std::atomic<bool>& stop, ops::ControlServer* control) {
    helloTable();
    const auto tick =
        std::chrono::milliseconds(std::clamp<std::uint32_t>(cfg_.standby_takeover_ms / 10, 2, 50));
    while (!stop.load() && error_.isOk()) {
      if (auto why = serveControl(control)) return why;
      std::vector<zmq::pollitem_t> items{{table_sock_.handle(), 0, ZMQ_POLLIN, 0}};
      for (auto& j : jobs_) items.push_back({j->socket().handle(), 0, ZMQ_POLLIN, 0});
      try {
        zmq::poll(items.data(), items.size(), tick);
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) {
          error_ = unavailable(std::string("standby: poll: ") + e.what());
          break;
        }
      }
      // Every queued message is read before anyone's silence is judged.
      receiveTable();
      for (auto& j : jobs_) {
        j->receiveAll();
        j->helloIfUnanswered();
      }
      const auto now = Clock::now();
      if (!following_) {
        if (now - last_hello_ > std::chrono::seconds(1)) helloTable();
        continue;
      }
      // The primary is silent when its table link and every job's link are: a host loop
      // held up (a job starting) while its jobs' central PSes stream on is not a death.
      Clock::time_point heard = last_heard_;
      for (const auto& j : jobs_) heard = std::max(heard, j->lastHeard());
      const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - heard);
      if (silent.count() > cfg_.standby_takeover_ms) {
        return "the primary has been silent " + std::to_string(silent.count()) +
               " ms (standby_takeover_ms " + std::to_string(cfg_.standby_takeover_ms) + ")";
      }
    }
    return std::nullopt;
  }

  const Status& error() const { return error_; }

  ServeTakeover takeover() {
    for (auto& j : jobs_) j->receiveAll();  // what is queued still counts
    ServeTakeover t;
    t.term = term_;
    t.role = role_;
    t.table = table_;
    for (auto& j : jobs_) {
      if (!j->replica().ready()) {
        GSGD_ERROR("standby: job '" << j->name() << "' has no replica here (its central PS "
                                    << "never sent a snapshot): it cannot be taken over");
        continue;
      }
      t.jobs[j->name()] = FollowedJob{j->takeoverState(), j->endpoint()};
    }
    return t;
  }

 private:
  void helloTable() {
    ReplicationMessage m;
    m.kind = ReplicationKind::kHello;
    m.term = term_;
    m.text = kServeStandbyHello;
    sendTo(table_sock_, m, "the primary");
    last_hello_ = Clock::now();
  }

  void receiveTable() {
    for (;;) {
      zmq::pollitem_t item{table_sock_.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, std::chrono::milliseconds(0));
      } catch (const zmq::error_t&) {
        return;
      }
      if ((item.revents & ZMQ_POLLIN) == 0) return;
      auto frames = recvFrames(table_sock_);
      if (!frames) return;
      auto m = centralps::decodeReplication(*frames);
      if (!m) {
        GSGD_WARN("standby: from the primary: " << m.status().message());
        continue;
      }
      if (m->kind == ReplicationKind::kSnapshot) {
        // A one-run head's central PS answered: this standby follows a --serve daemon.
        error_ = failedPrecondition(
            "the primary at " + cfg_.primary + " is the head of one run (role " + m->text +
            "); a --serve standby follows a --serve daemon's replication_listen (a one-run "
            "head's standby is groupsgdd --role standby without --serve)");
        ReplicationMessage r;
        r.kind = ReplicationKind::kRefused;
        r.text = error_.message();
        sendTo(table_sock_, r, "the primary");
        return;
      }
      if (m->kind != ReplicationKind::kHeartbeat) continue;
      if (m->term < term_) {
        GSGD_WARN("standby: a table of term " << m->term << " after term " << term_ << ": ignored");
        continue;
      }
      if (!applyTable(*m)) continue;
      // Held here: the primary answers a submit once this reaches the table holding it.
      ReplicationMessage ack;
      ack.kind = ReplicationKind::kAck;
      ack.term = m->term;
      ack.version = m->version;
      sendTo(table_sock_, ack, "the primary");
    }
  }

  // False: not the table's JSON (ignored, not acknowledged).
  bool applyTable(const ReplicationMessage& m) {
    nlohmann::json j = nlohmann::json::parse(m.text, nullptr, false);
    if (j.is_discarded() || !j.contains("table") || !j.contains("role")) {
      GSGD_WARN("standby: a table message that is not the table's JSON: ignored");
      return false;
    }
    if (!following_) {
      GSGD_INFO("standby: following the --serve primary at " << cfg_.primary << " (term " << m.term
                                                             << ", role " << j["role"] << ")");
      if (!cfg_.endpoint_file.empty()) {
        // Where this standby's front will be once promoted.
        (void)writeFileAtomically(cfg_.endpoint_file, cfg_.listen + "\n");
      }
    }
    following_ = true;
    last_heard_ = Clock::now();
    term_ = m.term;
    role_ = j["role"].get<std::string>();
    table_ = j["table"];
    const nlohmann::json links = j.value("replication", nlohmann::json::object());
    // Streams for the running jobs with a link; none for the others.
    std::vector<std::unique_ptr<JobStream>> kept;
    for (const auto& row : table_.value("jobs", nlohmann::json::array())) {
      const std::string name = row.value("name", "");
      if (row.value("state", "") != "running" || !links.contains(name)) continue;
      const std::string ep = links[name].get<std::string>();
      auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const auto& s) {
        return s && s->name() == name && s->endpoint() == ep;
      });
      if (it != jobs_.end()) {
        kept.push_back(std::move(*it));
        continue;
      }
      if (auto stream = follow(name, ep, row.value("config", nlohmann::json::object()))) {
        kept.push_back(std::move(stream));
      }
    }
    jobs_ = std::move(kept);
    return true;
  }

  // A stream for job `name` at its central PS's link `ep`, its replica built as the
  // primary's central PS is (the job file over these flags).
  std::unique_ptr<JobStream> follow(const std::string& name, const std::string& ep,
                                    const nlohmann::json& job) {
    daemon::DaemonConfig base = cfg_;
    base.role = role_;
    base.primary.clear();
    auto jcfg = parseJobConfig(job, base);
    if (!jcfg) {
      GSGD_ERROR("standby: job '" << name << "': its configuration does not parse here: "
                                  << jcfg.status().message() << " (not followed)");
      return nullptr;
    }
    const centralps::CentralConfig central = centralConfigFor(*jcfg, keys_);
    auto sock = dealerTo(ctx_, keys_, ep);
    if (!sock) {
      GSGD_ERROR("standby: job '" << name << "': " << sock.status().toString());
      return nullptr;
    }
    GSGD_INFO("standby: job '" << name << "': following its central PS at " << ep);
    return std::make_unique<JobStream>(
        name, ep, std::move(*sock),
        centralps::StandbyReplica(central.outer, central.outer_no_decay, central.shards), role_);
  }

  std::optional<std::string> serveControl(ops::ControlServer* control) {
    if (control == nullptr) return std::nullopt;
    while (auto req = control->tryPop()) {
      if (req->method() == "failover") {
        if (!following_) {
          req->fail(ops::ControlError::kRefused,
                    "this standby has no job table of the primary yet: nothing to take over");
          continue;
        }
        req->respond(nlohmann::ordered_json{{"taking_over", true}, {"term", term_ + 1}});
        return std::string("groupsgdctl failover");
      }
      if (req->method() == "status") {
        nlohmann::ordered_json jobs = nlohmann::ordered_json::array();
        for (const auto& j : jobs_) {
          jobs.push_back({{"name", j->name()},
                          {"following", j->replica().ready()},
                          {"primary_incarnation", j->replica().term()},
                          {"central_version", j->replica().version()}});
        }
        req->respond(nlohmann::ordered_json{{"role", "standby"},
                                            {"serve", true},
                                            {"primary", cfg_.primary},
                                            {"following", following_},
                                            {"primary_term", term_},
                                            {"jobs", jobs}});
        continue;
      }
      req->fail(ops::ControlError::kRefused,
                "a --serve standby answers status and failover only (until it takes over)");
    }
    return std::nullopt;
  }

  zmq::context_t& ctx_;
  const daemon::DaemonConfig& cfg_;
  const CurveKeys& keys_;
  zmq::socket_t table_sock_;
  std::vector<std::unique_ptr<JobStream>> jobs_;
  bool following_ = false;
  std::uint64_t term_ = 0;
  std::string role_;
  nlohmann::json table_;
  Status error_ = Status::ok();
  Clock::time_point last_heard_{}, last_hello_{};
};

}  // namespace

Result<std::optional<ServeTakeover>> followServePrimary(zmq::context_t& ctx,
                                                        const daemon::DaemonConfig& cfg,
                                                        const CurveKeys& keys,
                                                        const std::atomic<bool>& stop,
                                                        ops::ControlServer* control) {
  auto sock = dealerTo(ctx, keys, cfg.primary);
  if (!sock) return Status(sock.status().code(), "standby: " + sock.status().toString());
  ServeFollower follower(ctx, cfg, keys, std::move(*sock));
  GSGD_INFO("standby (--serve): following the primary at "
            << cfg.primary << "; taking over with its front on " << cfg.listen << " after "
            << cfg.standby_takeover_ms << " ms of silence");
  const auto why = follower.run(stop, control);
  if (!follower.error().isOk()) {
    return Status(follower.error().code(), "standby: " + follower.error().message());
  }
  if (!why) return std::optional<ServeTakeover>();
  ServeTakeover t = follower.takeover();
  GSGD_WARN("TAKING OVER: " << *why << "; promoting with " << t.jobs.size()
                            << " running job(s) from their replicas (primary term " << t.term
                            << ")");
  return std::optional<ServeTakeover>(std::move(t));
}

}  // namespace groupsgd::jobs
