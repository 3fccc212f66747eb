#include "groupsgd/centralps/replication_link.h"

#include <algorithm>

#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::centralps {

Result<std::unique_ptr<ReplicationLink>> ReplicationLink::create(zmq::context_t& ctx,
                                                                 ReplicationConfig cfg,
                                                                 const CurveKeys& keys) {
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(keys));
  if (!sock) return sock.status();
  auto ep = bindSocket(*sock, cfg.listen);
  if (!ep) return Status(ep.status().code(), "replication_listen: " + ep.status().toString());
  std::unique_ptr<ReplicationLink> link(
      new ReplicationLink(std::move(*sock), std::move(*ep), std::move(cfg)));
  link->lost_since_ = Clock::now();  // no standby yet
  // A promoted head is the only one that can commit (its old primary lost its standby
  // when this one promoted itself): it goes on alone until a standby attaches.
  link->alone_ = link->cfg_.alone_until_attached;
  GSGD_INFO("standby link on " << link->endpoint_ << " ("
                               << (link->cfg_.sync ? "synchronous" : "asynchronous")
                               << "): waiting for a standby"
                               << (link->alone_ ? "; committing alone until one attaches "
                                                  "(a promoted head, its old primary fenced)"
                                                : ""));
  return link;
}

void ReplicationLink::send(const ReplicationMessage& m) {
  if (!standby_) return;
  sendEncoded(encodeReplication(m), m.kind);
}

void ReplicationLink::sendEncoded(std::vector<zmq::message_t> frames, ReplicationKind kind) {
  if (!standby_) return;
  if (Status s = sendFrames(sock_, std::move(frames), &*standby_); !s) {
    GSGD_WARN("standby link: could not send a " << replicationKindName(kind) << ": "
                                                << s.toString());
  }
}

void ReplicationLink::onMessage(const zmq::message_t& from,
                                const std::vector<zmq::message_t>& frames, std::uint64_t version,
                                const Snapshot& snapshot) {
  auto m = decodeReplication(frames);
  if (!m) {
    GSGD_WARN("standby link: " << m.status().message());
    return;
  }
  const bool from_standby = standby_ && standby_->size() == from.size() &&
                            std::equal(static_cast<const char*>(from.data()),
                                       static_cast<const char*>(from.data()) + from.size(),
                                       static_cast<const char*>(standby_->data()));
  switch (m->kind) {
    case ReplicationKind::kHello: {
      if (standby_ && !from_standby &&
          Clock::now() - last_heard_ <= std::chrono::milliseconds(cfg_.loss_ms)) {
        // Another process while the attached standby is alive (a second standby, one of
        // the wrong kind): it waits. Taking it would drop the live standby, which would
        // then stop hearing this head and take over for nothing.
        ReplicationMessage no;
        no.kind = ReplicationKind::kRefused;
        no.term = term_;
        no.text = "a standby is already attached to this head; retrying until it is lost";
        (void)sendFrames(sock_, encodeReplication(no), &from);
        ++hellos_refused_;
        if (hellos_refused_ == 1 || hellos_refused_ % 60 == 0) {
          GSGD_WARN("standby link: a second standby's hello refused ("
                    << hellos_refused_ << " so far): one is attached and alive");
        }
        return;
      }
      standby_ = zmq::message_t(from.data(), from.size());
      ReplicationMessage snap = snapshot();
      snap.term = term_;
      send(snap);
      ++snapshots_;
      acked_ = snap.version;
      state_seen_ = 0;  // a new standby (or one starting over) gets the state again
      last_heard_ = last_heartbeat_ = Clock::now();
      if (alone_) GSGD_WARN("standby link: a standby attached; no longer running alone");
      alone_ = false;
      lost_since_.reset();
      GSGD_INFO("standby attached: snapshot of version " << snap.version << " sent ("
                                                         << snap.param_count << " parameters)");
      return;
    }
    case ReplicationKind::kAck:
      if (!from_standby) return;
      last_heard_ = Clock::now();
      acked_ = std::max(acked_, m->version);
      return;
    case ReplicationKind::kRefused:
      if (!from_standby) return;
      // It asks for a new snapshot (a hello) next; until then it is not attached.
      GSGD_ERROR("the standby refused replication: " << m->text);
      standby_.reset();
      lost_since_ = Clock::now();
      return;
    case ReplicationKind::kSuperseded:
      // Only a standby promoted from this head's stream sends this: a newer head runs.
      GSGD_ERROR("a promoted standby (incarnation "
                 << m->term << ", " << m->text << ") superseded this head (incarnation " << term_
                 << "): stepping down");
      if (cfg_.on_superseded) cfg_.on_superseded(m->text);
      return;
    default:
      GSGD_WARN("standby link: unexpected " << replicationKindName(m->kind));
  }
  (void)version;
}

bool ReplicationLink::receiveOne(std::chrono::milliseconds wait, std::uint64_t version,
                                 const Snapshot& snapshot) {
  zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
  try {
    zmq::poll(&item, 1, wait);
  } catch (const zmq::error_t& e) {
    return false;
  }
  if ((item.revents & ZMQ_POLLIN) == 0) return false;
  auto routed = recvRouted(sock_);
  if (!routed) return true;
  onMessage(routed->routing_id, routed->frames, version, snapshot);
  return true;
}

void ReplicationLink::checkLost(Clock::time_point now) {
  const auto loss = std::chrono::milliseconds(cfg_.loss_ms);
  if (standby_ && now - last_heard_ > loss) {
    ++losses_;
    standby_.reset();
    lost_since_ = now;
    GSGD_ERROR("the standby is LOST (silent over standby_takeover_ms = "
               << cfg_.loss_ms << " ms) at acknowledged version " << acked_ << ": "
               << (cfg_.alone_ms == 0 ? std::string("committing nothing until a standby attaches "
                                                    "(standby_alone_ms 0)")
                                      : "running alone in " + std::to_string(cfg_.alone_ms) +
                                            " ms unless one attaches"));
  }
  if (!standby_ && !alone_ && cfg_.alone_ms > 0 && lost_since_ &&
      now - *lost_since_ >= std::chrono::milliseconds(cfg_.alone_ms)) {
    alone_ = true;
    GSGD_ERROR("RUNNING ALONE without a standby (standby_alone_ms = "
               << cfg_.alone_ms << "): versions from now on exist only here, and if the "
               << "standby is alive behind a partition it may have taken over: SPLIT POSSIBLE");
  }
}

void ReplicationLink::poll(std::uint64_t version, const Snapshot& snapshot) {
  while (receiveOne(std::chrono::milliseconds(0), version, snapshot)) {
  }
  const auto now = Clock::now();
  if (standby_ && now - last_heartbeat_ >= std::chrono::milliseconds(cfg_.loss_ms / 4)) {
    ReplicationMessage hb;
    hb.kind = ReplicationKind::kHeartbeat;
    hb.term = term_;
    hb.version = version;
    send(hb);
    last_heartbeat_ = now;
  }
  sendCoordinatorState(version, now);
  checkLost(now);
}

void ReplicationLink::sendCoordinatorState(std::uint64_t version, Clock::time_point now) {
  // Paced apart from the heartbeats: under load every update is a heartbeat.
  if (!standby_ || !cfg_.coordinator_state ||
      (state_seen_ > 0 && now - state_sent_at_ < std::chrono::milliseconds(cfg_.loss_ms / 4))) {
    return;
  }
  auto text = cfg_.coordinator_state->newerThan(&state_seen_);
  if (!text) return;
  ReplicationMessage m;
  m.kind = ReplicationKind::kCoordinatorState;
  m.term = term_;
  m.version = version;
  m.text = std::move(*text);
  send(m);
  state_sent_at_ = now;
  ++states_sent_;
}

Status ReplicationLink::replicate(ReplicationMessage update, const Snapshot& snapshot) {
  GSGD_RETURN_IF_ERROR(ship(std::move(update), nullptr, snapshot));
  return awaitAck(snapshot);
}

Status ReplicationLink::ship(ReplicationMessage update, const TensorView* delta,
                             const Snapshot& snapshot) {
  awaiting_.reset();
  poll(update.version - 1, snapshot);
  if (!standby_) {
    if (alone_) return Status::ok();
    return unavailable(
        "not committed: no standby attached (standby_alone_ms 0 keeps a head "
        "without its standby from committing)");
  }
  update.term = term_;
  const std::uint64_t v = update.version;
  sendEncoded(delta != nullptr ? encodeReplication(update, *delta) : encodeReplication(update),
              update.kind);
  ++shipped_;
  shipped_at_ = last_heartbeat_ = Clock::now();  // an update is a heartbeat too
  if (!cfg_.sync) {
    max_lag_ = std::max(max_lag_, v - std::min(v, acked_));
    return Status::ok();
  }
  awaiting_ = v;
  return Status::ok();
}

Status ReplicationLink::awaitAck(const Snapshot& snapshot) {
  if (!awaiting_) return Status::ok();  // asynchronous, or running alone
  const std::uint64_t v = *awaiting_;
  awaiting_.reset();
  const auto started = Clock::now();
  // The bound counts from the shipping: the primary's own apply is part of the wait.
  const auto deadline = shipped_at_ + std::chrono::milliseconds(cfg_.loss_ms);
  while (standby_ && acked_ < v) {
    const auto now = Clock::now();
    if (now >= deadline) {
      last_heard_ = now - std::chrono::milliseconds(cfg_.loss_ms) - std::chrono::milliseconds(1);
      checkLost(now);  // lost: it did not acknowledge within the bound
      break;
    }
    receiveOne(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                   std::chrono::milliseconds(1),
               v - 1, snapshot);
  }
  ack_wait_ms_sum_ += std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  if (acked_ >= v) return Status::ok();
  if (alone_) return Status::ok();
  return unavailable("not committed: the standby did not acknowledge version " + std::to_string(v) +
                     " within " + std::to_string(cfg_.loss_ms) + " ms");
}

nlohmann::json ReplicationLink::json() const {
  return {{"endpoint", endpoint_},
          {"sync", cfg_.sync},
          {"attached", standby_.has_value()},
          {"alone", alone_},
          {"acked_version", acked_},
          {"updates_shipped", shipped_},
          {"snapshots_sent", snapshots_},
          {"standby_losses", losses_},
          {"max_lag_versions", max_lag_},
          {"coordinator_states_sent", states_sent_},
          {"mean_ack_wait_ms",
           shipped_ == 0 || !cfg_.sync ? 0.0 : ack_wait_ms_sum_ / static_cast<double>(shipped_)}};
}

}  // namespace groupsgd::centralps
