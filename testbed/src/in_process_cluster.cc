#include "groupsgd/testbed/in_process_cluster.h"

#include <thread>

namespace groupsgd::testbed {

std::vector<GroupMember> numberedMembers(std::uint32_t n, std::uint32_t batch) {
  std::vector<GroupMember> members;
  for (std::uint32_t i = 1; i <= n; ++i) members.push_back({i, batch, ""});
  return members;
}

Status configureGroup(zmq::context_t& ctx, const std::string& group_ep,
                      const std::vector<GroupMember>& members, const GroupSettings& settings,
                      const CurveKeys& as, std::chrono::milliseconds timeout) {
  RpcClient rpc(ctx, group_ep, MessageLimits{}, clientSocketOptions(as));
  OutMessage out(1, 0);
  out.header().setEpoch(settings.epoch);
  auto gc = out.header().getBody().initGroupConfig();
  gc.setGroupId(0);
  gc.setExchangePeriod(settings.exchange_period);
  gc.setStepDeadlineMs(settings.step_deadline_ms);
  gc.setStepCutoff(settings.step_cutoff);
  gc.setStepCutoffLateFraction(settings.step_cutoff_late_fraction);
  if (settings.lr_schedule) groupps::toProto(*settings.lr_schedule, gc.initLrSchedule());
  gc.setFlush(settings.flush);
  auto list = gc.initMembers(static_cast<unsigned>(members.size()));
  for (unsigned i = 0; i < members.size(); ++i) {
    list[i].setWorkerId(members[i].worker_id);
    list[i].setBatchSize(members[i].batch);
    list[i].setEpoch(settings.epoch);
    if (!members[i].public_key.empty()) list[i].setPublicKey(members[i].public_key);
  }
  auto reply = rpc.call(std::move(out), timeout);
  return reply ? Status::ok() : reply.status();
}

Result<client::StepAnswer> pullWhenReady(client::GroupClient& client, std::span<float> params,
                                         std::chrono::milliseconds limit) {
  constexpr auto kPause = std::chrono::milliseconds(20);
  Result<client::StepAnswer> r = unavailable("not tried");
  for (auto waited = std::chrono::milliseconds(0); waited <= limit; waited += kPause) {
    r = client.pull(params);
    if (r.isOk() || r.status().code() != Code::kUnavailable) return r;
    std::this_thread::sleep_for(kPause);
  }
  return r;
}

InProcessCluster::~InProcessCluster() {
  group.reset();
  central.reset();
  zap.reset();
}

Status InProcessCluster::admit(std::set<std::string> public_keys) {
  auto z = ZapHandler::start(ctx, std::move(public_keys));
  if (!z) return z.status();
  zap = std::move(*z);
  return Status::ok();
}

Status InProcessCluster::start(centralps::CentralConfig ccfg, groupps::GroupServerConfig gcfg,
                               bool thread_names, const std::string& host) {
  const std::string bind = "tcp://" + host + ":*";
  auto c = centralps::CentralServer::create(ctx, ccfg, bind);
  if (!c) return c.status();
  params = (*c)->paramCount();
  central_endpoint_ = (*c)->endpoint();
  gcfg.central_endpoint = central_endpoint_;
  central = std::make_unique<ServerThread<centralps::CentralServer>>(
      std::move(*c), thread_names ? "central" : nullptr);
  auto g = groupps::GroupServer::create(ctx, gcfg, params, bind);
  if (!g) return g.status();
  group_endpoint_ = (*g)->endpoint();
  group = std::make_unique<ServerThread<groupps::GroupServer>>(std::move(*g),
                                                               thread_names ? "group" : nullptr);
  return Status::ok();
}

Status InProcessCluster::configure(const std::vector<GroupMember>& members,
                                   const GroupSettings& settings, const CurveKeys& as) {
  return configureGroup(ctx, group_endpoint_, members, settings, as);
}

client::Assignment InProcessCluster::assignment(std::uint64_t worker_id,
                                                std::uint64_t epoch) const {
  client::Assignment a;
  a.worker_id = worker_id;
  a.epoch = epoch;
  a.group_endpoint = group_endpoint_;
  a.central_endpoint = central_endpoint_;
  a.param_count = params;
  return a;
}

Result<InMessage> InProcessCluster::flush() {
  RpcClient rpc(ctx, group_endpoint_, MessageLimits{});
  OutMessage out(1, 0);
  out.header().getBody().initFlush();
  auto reply = rpc.call(std::move(out), std::chrono::milliseconds(5000));
  if (!reply) return reply.status();
  if (reply->kind() != BodyKind::GROUP_STATS) {
    return internalError(std::string("flush answered with '") + bodyKindName(reply->kind()) + "'");
  }
  return std::move(*reply);
}

}  // namespace groupsgd::testbed
