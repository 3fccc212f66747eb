// The primary's end of the standby link (docs/reliability.md, "Standby head"): a ROUTER
// socket at replication_listen where one standby says hello, gets a snapshot, then every
// update before (synchronous) or while (asynchronous) the primary applies it, and a
// heartbeat every quarter of the loss bound (and, paced the same, the coordinator's state
// when it changed). A standby silent past the bound is lost:
// with alone_ms 0 the primary then commits nothing until a standby attaches again (no
// split is possible); with alone_ms > 0 it runs alone after that long, loudly (a partition
// can then split the run). A promoted head (alone_until_attached) commits alone until its
// first standby attaches: its old primary can no longer commit, so no split is possible.
// A Superseded message of a term >= this one's calls on_superseded (the daemon steps down).
//
// Thread rule: created on any thread, then used only by the central PS's serving thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/latest_text.h"
#include "groupsgd/common/status.h"

namespace groupsgd::centralps {

struct ReplicationConfig {
  std::string listen;            // where the standby connects ("" = no standby)
  bool sync = true;              // answer an exchange only once the standby has its version
  std::uint32_t loss_ms = 1000;  // standby silent this long: lost (its takeover bound)
  std::uint32_t alone_ms = 0;    // lost this long: run alone (0 = never; commit nothing)
  // A promoted head (its old primary fenced): commit alone until the first standby
  // attaches, as a promoted head without replication_listen does; from then on as above.
  bool alone_until_attached = false;
  std::function<void(const std::string&)> on_superseded;  // a newer head exists
  // The coordinator's state, sent to the standby when it changed (at most every
  // heartbeat period) and once after each snapshot (null: none to send).
  std::shared_ptr<const LatestText> coordinator_state;
};

class ReplicationLink {
 public:
  using Snapshot = std::function<ReplicationMessage()>;
  static Result<std::unique_ptr<ReplicationLink>> create(zmq::context_t& ctx, ReplicationConfig cfg,
                                                         const CurveKeys& keys);
  const std::string& endpoint() const { return endpoint_; }
  void setTerm(std::uint64_t term) { term_ = term; }

  // Serves what the standby sent (hello: a snapshot from `snapshot`; acks; superseded),
  // sends a heartbeat when due, and notices a lost standby. Never blocks.
  void poll(std::uint64_t version, const Snapshot& snapshot);
  // The update for update.version, before the primary applies it. Ok: commit it (the
  // standby acknowledged it, or asynchronous, or running alone). An error: do not apply
  // it; the message says why (no standby attached, or it was lost waiting for the ack).
  // ship() then awaitAck().
  Status replicate(ReplicationMessage update, const Snapshot& snapshot);
  // The two halves, so the primary can apply the update while the standby receives it:
  // ship() sends it (its delta `delta`, copied once into the frame; m.tensor when null)
  // without waiting. An error: do not apply it (no standby attached). Ok: apply it, but
  // tell no one it is committed before awaitAck() is ok (synchronous: the standby
  // acknowledged it; at once when asynchronous or running alone). awaitAck()'s error (the
  // standby lost waiting, or it refused): the update is not committed, and the caller
  // undoes what it applied. At most one update awaits its acknowledgement at a time.
  Status ship(ReplicationMessage update, const TensorView* delta, const Snapshot& snapshot);
  Status awaitAck(const Snapshot& snapshot);
  // Whether a shipped update awaits its acknowledgement (synchronous, a standby attached).
  bool awaiting() const { return awaiting_.has_value(); }

  // Counters for the log and the stats: attached, updates shipped, max async lag, ...
  nlohmann::json json() const;
  bool attached() const { return standby_.has_value(); }
  bool alone() const { return alone_; }
  std::uint64_t ackedVersion() const { return acked_; }
  std::uint64_t losses() const { return losses_; }
  // Hellos of another process refused while the attached standby was alive.
  std::uint64_t hellosRefused() const { return hellos_refused_; }
  std::uint64_t maxLag() const { return max_lag_; }
  double meanAckWaitMs() const {
    return shipped_ == 0 || !cfg_.sync ? 0.0 : ack_wait_ms_sum_ / static_cast<double>(shipped_);
  }

 private:
  ReplicationLink(zmq::socket_t sock, std::string endpoint, ReplicationConfig cfg)
      : sock_(std::move(sock)), endpoint_(std::move(endpoint)), cfg_(std::move(cfg)) {}
  using Clock = std::chrono::steady_clock;
  void onMessage(const zmq::message_t& from, const std::vector<zmq::message_t>& frames,
                 std::uint64_t version, const Snapshot& snapshot);
  void send(const ReplicationMessage& m);
  void sendEncoded(std::vector<zmq::message_t> frames, ReplicationKind kind);
  void checkLost(Clock::time_point now);
  void sendCoordinatorState(std::uint64_t version, Clock::time_point now);
  bool receiveOne(std::chrono::milliseconds wait, std::uint64_t version, const Snapshot& snapshot);

  zmq::socket_t sock_;
  std::string endpoint_;
  ReplicationConfig cfg_;
  std::uint64_t term_ = 0;
  std::optional<zmq::message_t> standby_;  // the attached standby's routing id
  Clock::time_point last_heard_{};
  Clock::time_point last_heartbeat_{};
  std::optional<Clock::time_point> lost_since_;  // no standby since (start, or lost)
  bool alone_ = false;
  std::uint64_t acked_ = 0;  // newest version the standby acknowledged
  std::uint64_t shipped_ = 0, snapshots_ = 0, losses_ = 0, max_lag_ = 0, hellos_refused_ = 0;
  double ack_wait_ms_sum_ = 0;  // time awaitAck() blocked (after the primary's own apply)
  std::optional<std::uint64_t> awaiting_;  // shipped (synchronous), not yet acknowledged
  Clock::time_point shipped_at_{};
  std::uint64_t state_seen_ = 0;  // the coordinator state's number the standby has (0: none)
  Clock::time_point state_sent_at_{};
  std::uint64_t states_sent_ = 0;
};

}  // namespace groupsgd::centralps
