// The job front of a multi-job daemon: the ROUTER at `listen` every worker reaches first.
// A Register is answered with a JobRedirect to the coordinator of the job it names (or
// of the only job running), or refused with the jobs it could join; a Heartbeat (a worker
// whose job coordinator went silent) is told to register again, or to stop when its job
// has ended. The front decodes headers of every job id; each job's own servers accept
// only their job's id. Node daemons register here too (Register.groupSlots): they join
// the daemon's NodePool, heartbeat here, and each reply lists the jobs placed on them.
// Thread rule: owned and served by the host loop's thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/status.h"
#include "groupsgd/jobs/node_pool.h"

namespace groupsgd::jobs {

// What the front knows of one job.
struct FrontJob {
  std::string name;
  std::uint64_t id = 0;
  bool running = false;
  std::string endpoint;  // its coordinator (running jobs)
  std::string settings;  // its group PS options for node daemons (groupSettingsJson)
};

class JobFront {
 public:
  static Result<JobFront> bind(zmq::context_t& ctx, const std::string& listen,
                               const CurveKeys& keys);
  const std::string& endpoint() const { return endpoint_; }
  // Answers the requests that arrive within timeout; jobs() is asked for the job list.
  void serve(std::chrono::milliseconds timeout, const std::vector<FrontJob>& jobs);
  std::uint64_t refused() const { return refused_; }
  // Node daemons join this pool (borrowed; the host owns it) and heartbeat every
  // heartbeat_ms. Without a pool nodes are refused.
  void attachPool(NodePool* pool, std::uint32_t heartbeat_ms) {
    pool_ = pool;
    heartbeat_ms_ = heartbeat_ms;
  }

 private:
  JobFront(zmq::socket_t sock, std::string endpoint, CurveKeys keys)
      : sock_(std::move(sock)), endpoint_(std::move(endpoint)), keys_(std::move(keys)) {}
  void handle(const zmq::message_t& from, std::vector<zmq::message_t>&& frames,
              const std::vector<FrontJob>& jobs);
  // Node daemons (Register / Heartbeat with groupSlots, Leave with a pool id).
  void nodeRegister(const zmq::message_t& from, const InMessage& msg, const std::string& key);
  void nodeHeartbeat(const zmq::message_t& from, const InMessage& msg,
                     const std::vector<FrontJob>& jobs);
  void refuse(const zmq::message_t& from, const Status& why, std::uint64_t job_id);

  zmq::socket_t sock_;
  std::string endpoint_;
  CurveKeys keys_;
  std::uint64_t refused_ = 0;
  NodePool* pool_ = nullptr;
  std::uint32_t heartbeat_ms_ = 1000;
};

// The job a registration naming `wanted` ("" = none) goes to, or why it cannot join.
Result<FrontJob> resolveJob(const std::string& wanted, const std::vector<FrontJob>& jobs);

}  // namespace groupsgd::jobs
