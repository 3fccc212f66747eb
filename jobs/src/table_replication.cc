#include "table_replication.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "groupsgd/common/log.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/jobs/job.h"

namespace groupsgd::jobs {

using centralps::ReplicationKind;
using centralps::ReplicationMessage;

Result<std::unique_ptr<TableLink>> TableLink::create(zmq::context_t& ctx, const std::string& listen,
                                                     const CurveKeys& keys, std::uint64_t term,
                                                     std::uint32_t takeover_ms) {
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(keys));
  if (!sock) return sock.status();
  auto ep = bindSocket(*sock, listen);
  if (!ep) return Status(ep.status().code(), "replication_listen: " + ep.status().toString());
  GSGD_INFO("standby link (job table) on " << *ep << ", term " << term
                                           << ": waiting for a --serve standby");
  return std::unique_ptr<TableLink>(new TableLink(std::move(*sock), *ep, term, takeover_ms));
}

void TableLink::send(const zmq::message_t& to, const ReplicationMessage& m) {
  if (Status s = sendFrames(sock_, centralps::encodeReplication(m), &to); !s) {
    GSGD_WARN("standby link (job table): could not send a "
              << centralps::replicationKindName(m.kind) << ": " << s.toString());
    // Gone (or never there): forgotten until it says hello again, not warned about again.
    if (isStandby(to)) standby_.reset();
  }
}

bool TableLink::isStandby(const zmq::message_t& peer) const {
  return standby_ && standby_->size() == peer.size() &&
         std::memcmp(standby_->data(), peer.data(), peer.size()) == 0;
}

void TableLink::onMessage(const zmq::message_t& from, const std::vector<zmq::message_t>& frames) {
  auto m = centralps::decodeReplication(frames);
  if (!m) {
    GSGD_WARN("standby link (job table): " << m.status().message());
    return;
  }
  switch (m->kind) {
    case ReplicationKind::kHello:
      if (m->text != kServeStandbyHello) {
        // A one-run head's standby: a snapshot naming this daemon, which it refuses.
        ReplicationMessage snap;
        snap.kind = ReplicationKind::kSnapshot;
        snap.term = term_;
        snap.text = kServePrimaryRole;
        send(from, snap);
        return;
      }
      standby_ = zmq::message_t(from.data(), from.size());
      acked_ = 0;
      last_sent_ = {};  // the table at once
      GSGD_INFO("standby link (job table): a --serve standby attached");
      return;
    case ReplicationKind::kSuperseded:
      if (m->term >= term_) {
        GSGD_ERROR("superseded (a promoted standby runs these jobs at term "
                   << m->term << ", this daemon's is " << term_ << "): stepping down, exiting "
                   << kSupersededExitCode);
        std::fflush(nullptr);
        std::_Exit(kSupersededExitCode);
      }
      return;
    case ReplicationKind::kAck:
      // Only the attached standby's, and only of a table sent (revisions only grow).
      if (isStandby(from) && m->version <= revision_) acked_ = std::max(acked_, m->version);
      return;
    case ReplicationKind::kRefused:
      GSGD_WARN("standby link (job table): a standby refused this primary: " << m->text);
      return;
    default:
      GSGD_WARN("standby link (job table): unexpected " << centralps::replicationKindName(m->kind));
  }
}

void TableLink::poll(bool changed, const std::function<std::string()>& table) {
  for (;;) {
    auto readable = pollReadable(sock_, std::chrono::milliseconds(0));
    if (!readable || !*readable) break;
    auto routed = recvRouted(sock_);
    if (!routed) break;
    onMessage(routed->routing_id, routed->frames);
  }
  if (!standby_) return;
  const auto now = Clock::now();
  if (!changed && now - last_sent_ < std::chrono::milliseconds(takeover_ms_ / 4)) return;
  ReplicationMessage m;
  m.kind = ReplicationKind::kHeartbeat;
  m.term = term_;
  m.version = ++revision_;
  m.text = table();
  send(*standby_, m);
  last_sent_ = now;
}

Result<std::unique_ptr<TableFence>> TableFence::create(zmq::context_t& ctx,
                                                       const std::string& primary,
                                                       const CurveKeys& keys, std::uint64_t term) {
  SocketOptions o = clientSocketOptions(keys);
  o.linger_ms = 0;
  auto sock = makeSocket(ctx, zmq::socket_type::dealer, o);
  if (!sock) return sock.status();
  sock->set(zmq::sockopt::immediate, 1);  // nothing queued for a primary that is gone
  GSGD_RETURN_IF_ERROR(connectSocket(*sock, primary));
  return std::unique_ptr<TableFence>(new TableFence(std::move(*sock), term));
}

void TableFence::poll() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(500)) return;
  last_ = now;
  ReplicationMessage m;
  m.kind = ReplicationKind::kSuperseded;
  m.term = term_;
  (void)sendFrames(sock_, centralps::encodeReplication(m));
  for (;;) {  // whatever a still-running old primary sends is read and dropped
    auto readable = pollReadable(sock_, std::chrono::milliseconds(0));
    if (!readable || !*readable) break;
    (void)recvFrames(sock_);
  }
}

}  // namespace groupsgd::jobs
