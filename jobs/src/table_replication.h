// A --serve daemon's standby link, the job table's half (docs/jobs.md, "Standby"). Each
// running job's central PS replicates itself on a link of its own
// (centralps/replication_link.h); this one carries what the daemon holds: the job table and
// where each running job's central PS replication link is. Same framing as the central PS's
// stream (centralps/replication.h), so either kind of standby pointed at the wrong kind of
// primary gets an answer it refuses with a clear error.
// Thread rule: TableLink and TableFence are used on the host loop's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "groupsgd/centralps/replication.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/status.h"

namespace groupsgd::jobs {

// A --serve standby says hello with this text; a --serve primary's snapshot answer to
// any other hello (a one-run standby's) names itself with kServePrimaryRole.
inline constexpr const char* kServeStandbyHello = "--serve standby";
inline constexpr const char* kServePrimaryRole = "--serve daemon";

// The primary's end, a ROUTER at replication_listen. To the standby that said hello last:
// the table message (a heartbeat whose text is the table's JSON, its version a revision
// number) at once, on every change and every quarter of standby_takeover_ms. A Superseded
// of a term >= this one's ends the process (exit kSupersededExitCode): a newer head runs
// these jobs. The standby acknowledges each table it applied by its revision (kAck, its
// version): a user's submit is answered once acked() reaches the revision holding it.
class TableLink {
 public:
  static Result<std::unique_ptr<TableLink>> create(zmq::context_t& ctx, const std::string& listen,
                                                   const CurveKeys& keys, std::uint64_t term,
                                                   std::uint32_t takeover_ms);
  const std::string& endpoint() const { return endpoint_; }
  std::uint64_t term() const { return term_; }
  // Serves what arrived and sends the table when due. changed: it changed since the last
  // poll. table(): the message's text, built only when sent. Never blocks.
  void poll(bool changed, const std::function<std::string()>& table);
  // A --serve standby said hello and was not lost since (a send to it failed).
  bool attached() const { return standby_.has_value(); }
  // The last table sent's revision, and the highest the attached standby acknowledged.
  std::uint64_t revision() const { return revision_; }
  std::uint64_t acked() const { return acked_; }

 private:
  using Clock = std::chrono::steady_clock;
  TableLink(zmq::socket_t sock, std::string endpoint, std::uint64_t term, std::uint32_t takeover_ms)
      : sock_(std::move(sock)),
        endpoint_(std::move(endpoint)),
        term_(term),
        takeover_ms_(takeover_ms) {}
  void onMessage(const zmq::message_t& from, const std::vector<zmq::message_t>& frames);
  void send(const zmq::message_t& to, const centralps::ReplicationMessage& m);
  bool isStandby(const zmq::message_t& peer) const;

  zmq::socket_t sock_;
  std::string endpoint_;
  std::uint64_t term_;
  std::uint32_t takeover_ms_;
  std::optional<zmq::message_t> standby_;
  std::uint64_t revision_ = 0;
  std::uint64_t acked_ = 0;  // of the attached standby; 0 after each hello
  Clock::time_point last_sent_{};
};

// A promoted standby's fence: a Superseded of its term to the old primary's table link
// every 500 ms (not connected: dropped, tried again), so the old primary, still running or
// restarted on the same replication_listen, steps down (docs/jobs.md, "Standby").
class TableFence {
 public:
  static Result<std::unique_ptr<TableFence>> create(zmq::context_t& ctx, const std::string& primary,
                                                    const CurveKeys& keys, std::uint64_t term);
  void poll();

 private:
  TableFence(zmq::socket_t sock, std::uint64_t term) : sock_(std::move(sock)), term_(term) {}
  zmq::socket_t sock_;
  std::uint64_t term_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace groupsgd::jobs
