#include "job_front.h"

#include "groupsgd/common/log.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/common/zap_handler.h"

namespace groupsgd::jobs {
namespace {

std::string runningList(const std::vector<FrontJob>& jobs) {
  std::string names;
  for (const auto& j : jobs) {
    if (j.running) names += (names.empty() ? "" : ", ") + j.name;
  }
  return names.empty() ? "(none running)" : names;
}

}  // namespace

Result<FrontJob> resolveJob(const std::string& wanted, const std::vector<FrontJob>& jobs) {
  if (!wanted.empty()) {
    for (const auto& j : jobs) {
      if (j.name != wanted) continue;
      if (!j.running) return finished("job '" + wanted + "' has ended");
      return j;
    }
    return notFound("no job '" + wanted + "'; jobs you can join: " + runningList(jobs));
  }
  std::vector<const FrontJob*> running;
  for (const auto& j : jobs) {
    if (j.running) running.push_back(&j);
  }
  if (running.size() == 1) return *running.front();
  if (running.empty()) return unavailable("no job is running yet; retry (or submit one)");
  return invalidArgument(std::to_string(running.size()) +
                         " jobs are running; name one with --job: " + runningList(jobs));
}

Result<JobFront> JobFront::bind(zmq::context_t& ctx, const std::string& listen,
                                const CurveKeys& keys) {
  auto sock = makeSocket(ctx, zmq::socket_type::router, serverSocketOptions(keys));
  if (!sock) return Status(sock.status().code(), "job front: " + sock.status().toString());
  auto ep = bindSocket(*sock, listen);
  if (!ep) return Status(ep.status().code(), "job front: " + ep.status().toString());
  return JobFront(std::move(*sock), *ep, keys);
}

void JobFront::serve(std::chrono::milliseconds timeout, const std::vector<FrontJob>& jobs) {
  if (auto ready = pollReadable(sock_, timeout); !ready) {
    GSGD_ERROR("job front: " << ready.status().message());
    return;
  }
  while (true) {
    zmq::pollitem_t again{sock_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&again, 1, std::chrono::milliseconds(0)) <= 0) return;
    auto routed = recvRouted(sock_);
    if (!routed) continue;
    try {
      handle(routed->routing_id, std::move(routed->frames), jobs);
    } catch (const std::exception& e) {
      refuse(routed->routing_id, internalError(std::string("request failed: ") + e.what()), 0);
    }
  }
}

void JobFront::refuse(const zmq::message_t& from, const Status& why, std::uint64_t job_id) {
  ++refused_;
  GSGD_DEBUG("job front refused: " << why.toString());
  (void)replyTo(sock_, from, makeErrorReply(job_id, 0, why));
}

void JobFront::handle(const zmq::message_t& from, std::vector<zmq::message_t>&& frames,
                      const std::vector<FrontJob>& jobs) {
  MessageLimits limits;
  limits.any_job = true;
  const std::string key = frames.empty() ? std::string() : peerKey(frames.front());
  auto msg = decodeMessage(std::move(frames), limits);
  if (!msg) return refuse(from, msg.status(), 0);
  // Replies carry the sender's job id: its client reads nothing of another job, and it
  // learns its job's id from the redirect's body.
  const std::uint64_t job_id = msg->header().getJobId();
  switch (msg->kind()) {
    case BodyKind::REGISTER: {
      auto r = msg->header().getBody().getRegister();
      if (r.getGroupSlots() > 0) return nodeRegister(from, *msg, key);
      auto job = resolveJob(r.getJob().cStr(), jobs);
      if (!job) return refuse(from, job.status(), job_id);
      OutMessage out(job_id, 0);
      auto redirect = out.header().getBody().initJobRedirect();
      redirect.setJob(job->name);
      redirect.setJobId(job->id);
      redirect.setCoordinator(job->endpoint);
      (void)replyTo(sock_, from, std::move(out));
      return;
    }
    case BodyKind::HEARTBEAT: {
      if (msg->header().getBody().getHeartbeat().getGroupSlots() > 0) {
        return nodeHeartbeat(from, *msg, jobs);
      }
      // A worker whose job coordinator went silent: register again (through us), or stop.
      bool ended = true;
      for (const auto& j : jobs) {
        if (j.id == job_id && j.running) ended = false;
      }
      OutMessage out(job_id, 0);
      auto reply = out.header().getBody().initHeartbeatReply();
      reply.setStop(ended);
      reply.setReregister(!ended);
      (void)replyTo(sock_, from, std::move(out));
      return;
    }
    case BodyKind::LEAVE: {
      const NodePool::Node* node =
          pool_ != nullptr ? pool_->find(msg->header().getSenderId()) : nullptr;
      if (node != nullptr) {
        GSGD_INFO("node daemon " << node->host << " left the pool (" << node->used()
                                 << " slot(s) in use end with their jobs' groups)");
        pool_->remove(msg->header().getSenderId());
        OutMessage out(job_id, 0);
        out.header().getBody().setAck();
        (void)replyTo(sock_, from, std::move(out));
        return;
      }
      return refuse(from, notFound("not registered at the job front"), job_id);
    }
    default:
      return refuse(from,
                    invalidArgument(std::string("the job front does not serve '") +
                                    bodyKindName(msg->kind()) + "'"),
                    job_id);
  }
}

void JobFront::nodeRegister(const zmq::message_t& from, const InMessage& msg,
                            const std::string& key) {
  const std::uint64_t job_id = msg.header().getJobId();
  auto r = msg.header().getBody().getRegister();
  if (pool_ == nullptr)
    return refuse(from, failedPrecondition("this front takes no node daemons"), job_id);
  // The same rule as a single run's coordinator: only keys labelled `node` host group PSes.
  if (!key.empty() && !keys_.hasDaemonRights(key)) {
    return refuse(from,
                  permissionDenied("key " + key +
                                   " may not register as a node daemon "
                                   "(label its allow-list line `node`)"),
                  job_id);
  }
  const std::uint64_t id =
      pool_->add(r.getHost().cStr(), r.getName().cStr(), key, r.getGroupSlots());
  GSGD_INFO("node daemon " << r.getHost().cStr() << " pid " << r.getPid()
                           << " joined the pool with " << r.getGroupSlots() << " group PS slot(s); "
                           << pool_->free() << " of " << pool_->total() << " node slot(s) free");
  OutMessage out(job_id, 0);
  auto a = out.header().getBody().initAssignment();
  a.setWorkerId(id);
  a.setHeartbeatMs(heartbeat_ms_);
  a.setNodePool(true);
  (void)replyTo(sock_, from, std::move(out));
}

void JobFront::nodeHeartbeat(const zmq::message_t& from, const InMessage& msg,
                             const std::vector<FrontJob>& jobs) {
  const std::uint64_t job_id = msg.header().getJobId();
  const std::uint64_t id = msg.header().getSenderId();
  OutMessage out(job_id, 0);
  auto reply = out.header().getBody().initHeartbeatReply();
  if (pool_ == nullptr || !pool_->seen(id)) {
    // Unknown (dropped as silent, or the daemon restarted): join the pool again.
    reply.setReregister(true);
    (void)replyTo(sock_, from, std::move(out));
    return;
  }
  std::vector<std::pair<const FrontJob*, std::uint32_t>> placed;
  for (const auto& [job, slots] : pool_->find(id)->placed) {
    for (const auto& j : jobs) {
      if (j.id == job && j.running) placed.emplace_back(&j, slots);
    }
  }
  auto list = reply.initPlacements(static_cast<unsigned>(placed.size()));
  for (unsigned i = 0; i < placed.size(); ++i) {
    list[i].setJob(placed[i].first->name);
    list[i].setJobId(placed[i].first->id);
    list[i].setCoordinator(placed[i].first->endpoint);
    list[i].setSlots(placed[i].second);
    list[i].setSettings(placed[i].first->settings);
  }
  (void)replyTo(sock_, from, std::move(out));
}

}  // namespace groupsgd::jobs
