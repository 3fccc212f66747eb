#include "groupsgd/arbiter/lease_client.h"

#include <algorithm>

#include "arbiter_codec.h"
#include "groupsgd/common/deadline.h"
#include "groupsgd/common/interrupt.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::arbiter {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

LeaseClient::LeaseClient(zmq::context_t& ctx, std::string endpoint, std::uint64_t job_id,
                         LeaseClientOptions opts)
    : ctx_(ctx), endpoint_(std::move(endpoint)), job_id_(job_id), opts_(std::move(opts)) {}

LeaseClient::~LeaseClient() = default;

Status LeaseClient::ensureSocket() {
  if (sock_) return Status::ok();
  SocketOptions so = clientSocketOptions(opts_.curve);
  so.linger_ms = 0;  // a release to a dead arbiter must not hold up the exit
  auto sock = makeSocket(ctx_, zmq::socket_type::dealer, so);
  if (!sock) return sock.status();
  GSGD_RETURN_IF_ERROR(connectSocket(*sock, endpoint_));
  sock_ = std::move(*sock);
  return Status::ok();
}

namespace {

// Sends one message; false (and the socket dropped) when ZeroMQ refuses it.
Status sendOne(std::optional<zmq::socket_t>& sock, ArbiterOut& out) {
  std::vector<zmq::message_t> frames;
  frames.push_back(out.frame());
  Status s = sendFrames(*sock, std::move(frames));
  if (!s) sock.reset();
  return s;
}

// Waits for the answer to `seq` until `deadline`; answers to older requests are
// skipped.
Result<ArbiterIn> awaitAnswer(zmq::socket_t& sock, std::uint64_t seq, Clock::time_point deadline) {
  while (true) {
    const auto left = timeLeft(deadline);
    if (left.count() <= 0) return unavailable("no answer from the arbiter");
    if (interruptRequested()) return interruptedStatus();
    // In slices while an interrupt check is installed (interrupt.h).
    auto readable =
        pollReadable(sock, interruptCheckInstalled() ? std::min(left, kInterruptSlice) : left);
    if (!readable) return readable.status();
    if (!*readable) continue;
    auto frames = recvFrames(sock);
    if (!frames) return frames.status();
    if (frames->size() != 1) continue;
    auto in = ArbiterIn::decode((*frames)[0]);
    if (!in) return in.status();
    if (in->root().getSeq() == seq) return in;
  }
}

}  // namespace

Status LeaseClient::acquire(std::uint64_t worker_id, const std::string& device, std::uint64_t step,
                            bool handoff, bool* locked) {
  if (locked) *locked = false;
  GSGD_RETURN_IF_ERROR(ensureSocket());
  const std::uint64_t seq = ++seq_;
  ArbiterOut out(job_id_, worker_id, seq);
  out.root.setDevice(device);
  auto acquire = out.root.initBody().initAcquire();
  acquire.setStep(step);
  acquire.setHandoff(handoff);
  GSGD_RETURN_IF_ERROR(sendOne(sock_, out));
  const auto give_up = Clock::now() + opts_.max_wait;
  while (true) {
    const auto deadline = std::min(give_up, Clock::now() + opts_.answer_timeout);
    auto in = awaitAnswer(*sock_, seq, deadline);
    if (!in) {
      sock_.reset();  // lazy pirate: a late grant must not reach the next request
      if (Clock::now() >= give_up) return unavailable("no grant from the arbiter within max_wait");
      return in.status();
    }
    auto body = in->root().getBody();
    switch (body.which()) {
      case proto::ArbiterMessage::Body::GRANT:
        return Status::ok();
      case proto::ArbiterMessage::Body::GRANT_LOCKED:
        if (locked) *locked = true;
        return Status::ok();
      case proto::ArbiterMessage::Body::WAITING:
        continue;  // alive; the device is busy
      case proto::ArbiterMessage::Body::ERROR:
        return Status(static_cast<Code>(body.getError().getCode()),
                      "arbiter: " + std::string(body.getError().getMessage()));
      default:
        return invalidArgument("the arbiter answered an acquire with something else");
    }
  }
}

Status LeaseClient::release(std::uint64_t worker_id, const std::string& device, double held_ms) {
  GSGD_RETURN_IF_ERROR(ensureSocket());
  ArbiterOut out(job_id_, worker_id, ++seq_);
  out.root.setDevice(device);
  out.root.initBody().initRelease().setHeldMs(static_cast<float>(held_ms));
  return sendOne(sock_, out);
}

Result<ArbiterCounters> LeaseClient::stats(std::chrono::milliseconds timeout) {
  GSGD_RETURN_IF_ERROR(ensureSocket());
  const std::uint64_t seq = ++seq_;
  ArbiterOut out(job_id_, 0, seq);
  out.root.initBody().setStatsQuery();
  GSGD_RETURN_IF_ERROR(sendOne(sock_, out));
  auto in = awaitAnswer(*sock_, seq, Clock::now() + timeout);
  if (!in) {
    sock_.reset();
    return in.status();
  }
  auto body = in->root().getBody();
  if (body.which() == proto::ArbiterMessage::Body::ERROR) {
    return Status(static_cast<Code>(body.getError().getCode()),
                  "arbiter: " + std::string(body.getError().getMessage()));
  }
  if (body.which() != proto::ArbiterMessage::Body::STATS) {
    return invalidArgument("the arbiter answered a stats query with something else");
  }
  auto st = body.getStats();
  ArbiterCounters c;
  c.policy = st.getPolicy();
  c.grants = st.getGrants();
  c.expired = st.getExpired();
  c.stray_releases = st.getStrayReleases();
  for (auto j : st.getJobs()) {
    c.jobs.push_back({j.getJobId(), j.getGrants(), j.getWaitMs(), j.getHeldMs()});
  }
  return c;
}

}  // namespace groupsgd::arbiter
