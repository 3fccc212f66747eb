// The in-process cluster the cluster tests and the data-plane benchmarks share: a central
// PS and one group PS (group 0) on threads of the calling process, real ZeroMQ sockets on
// 127.0.0.1 (or a given address) in one context, and what the coordinator and a member send them.
// No test framework here (the benchmarks link it too): failures come back as a Status. Thread rule:
// one thread makes, drives and destroys a cluster; the servers run on their own threads
// (ServerThread).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/groupps/group_server.h"
#include "groupsgd/testbed/server_thread.h"

namespace groupsgd::testbed {

// One member of a GroupConfig.
struct GroupMember {
  std::uint64_t worker_id = 0;
  std::uint32_t batch = 32;
  std::string public_key;  // CURVE: the key the group PS admits for it ("" = none)
};

// Workers 1..n, each with this batch.
std::vector<GroupMember> numberedMembers(std::uint32_t n, std::uint32_t batch = 32);

// What a GroupConfig says besides its members.
struct GroupSettings {
  std::uint64_t epoch = 1;
  std::uint32_t exchange_period = 1;
  std::uint32_t step_deadline_ms = 5000;
  float step_cutoff = 0;  // the backup-worker cutoff (groupps/step_cutoff.h); 0: off
  float step_cutoff_late_fraction = 0.25f;
  std::optional<groupps::LrSchedule> lr_schedule{};  // none: the group PS keeps its start lr
  bool flush = false;  // hand the progress over / fetch the model now (as regroups do)
};

// Sends group 0 at group_ep a GroupConfig, as the coordinator does (with the coordinator's
// CURVE keys `as` when the servers use CURVE), and waits for its answer.
Status configureGroup(zmq::context_t& ctx, const std::string& group_ep,
                      const std::vector<GroupMember>& members, const GroupSettings& settings,
                      const CurveKeys& as = {},
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

// Pulls until the group PS has fetched its first model from the central PS (it answers
// "unavailable" until then), for at most `limit`; the last answer otherwise.
Result<client::StepAnswer> pullWhenReady(
    client::GroupClient& client, std::span<float> params,
    std::chrono::milliseconds limit = std::chrono::milliseconds(2000));

class InProcessCluster {
 public:
  explicit InProcessCluster(int io_threads = 1) : ctx(io_threads) {}
  ~InProcessCluster();  // the group PS first, then the central PS, then the ZAP handler
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  // CURVE: starts the ZAP handler admitting these public keys. Call before start(): a
  // handler must be running before anything binds.
  Status admit(std::set<std::string> public_keys);
  // Starts the central PS, then the group PS on its endpoint (gcfg.central_endpoint is
  // set here). thread_names: name the server threads "central" and "group". host: the
  // address both bind (an address of this machine: a network namespace's veth, say).
  Status start(centralps::CentralConfig ccfg, groupps::GroupServerConfig gcfg,
               bool thread_names = false, const std::string& host = "127.0.0.1");
  // configureGroup() on this cluster's group PS.
  Status configure(const std::vector<GroupMember>& members, const GroupSettings& settings,
                   const CurveKeys& as = {});
  // An assignment to the group, as registration hands it to a member.
  client::Assignment assignment(std::uint64_t worker_id, std::uint64_t epoch) const;
  // Flushes the group and returns its counters message (a GroupStats).
  Result<InMessage> flush();

  const std::string& centralEndpoint() const { return central_endpoint_; }
  const std::string& groupEndpoint() const { return group_endpoint_; }
  // The ZAP handler's allow list (after admit()); the servers' configs take it.
  std::shared_ptr<AllowList> allowList() const { return zap ? zap->allowList() : nullptr; }

  zmq::context_t ctx;
  std::unique_ptr<ZapHandler> zap;
  std::unique_ptr<ServerThread<centralps::CentralServer>> central;
  std::unique_ptr<ServerThread<groupps::GroupServer>> group;
  std::size_t params = 0;

 private:
  std::string central_endpoint_, group_endpoint_;
};

}  // namespace groupsgd::testbed
