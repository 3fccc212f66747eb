#include "groupsgd/jobs/node_shard_intake.h"

#include <chrono>
#include <map>

#include "groupsgd/common/log.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/socket_poll.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::jobs {
namespace {

struct Offered {
  std::string endpoint;
  std::string by;  // "HOST pid PID", for operators
};

std::string rangeText(std::uint64_t begin, std::uint64_t end) {
  return std::to_string(begin) + "-" + std::to_string(end);
}

// Why this head cannot take the offer as its shard (another cut, model or seed), or ok.
Status checkOffer(proto::CentralShardOffer::Reader o, const daemon::DaemonConfig& cfg,
                  const std::vector<centralps::ShardRange>& ranges) {
  const std::size_t k = o.getIndex();
  const std::string shard = "central shard " + std::to_string(k);
  if (k == 0 || k >= ranges.size()) {
    return invalidArgument(shard + " is outside this head's shards 1.." +
                           std::to_string(ranges.size() - 1) + " (central_shards " +
                           std::to_string(ranges.size()) + ")");
  }
  if (o.getCount() != ranges.size()) {
    return invalidArgument(shard + " was cut for central_shards " + std::to_string(o.getCount()) +
                           ", this head's is " + std::to_string(ranges.size()));
  }
  const std::string model = kernels::modelKindName(cfg.model);
  if (model != o.getModel().cStr()) {
    return invalidArgument(shard + " holds model " + o.getModel().cStr() + ", this head's is " +
                           model);
  }
  if (o.getBegin() != ranges[k].begin || o.getEnd() != ranges[k].end) {
    return invalidArgument(shard + " covers parameters " + rangeText(o.getBegin(), o.getEnd()) +
                           ", this head's is " + rangeText(ranges[k].begin, ranges[k].end) +
                           " (the same central_shard_split there?)");
  }
  if (o.getSeed() != cfg.seed) {
    return invalidArgument(shard + " started from seed " + std::to_string(o.getSeed()) +
                           ", this head's is " + std::to_string(cfg.seed));
  }
  if (o.getEndpoint().size() == 0) return invalidArgument(shard + " names no endpoint");
  return Status::ok();
}

std::string missingShards(const std::map<std::size_t, Offered>& offered, std::size_t count) {
  std::string out;
  for (std::size_t k = 1; k < count; ++k) {
    if (!offered.count(k)) out += (out.empty() ? "" : ", ") + std::to_string(k);
  }
  return out;
}

}  // namespace

Result<std::string> awaitNodeShards(zmq::socket_t& sock, const daemon::DaemonConfig& cfg,
                                    const std::vector<centralps::ShardRange>& ranges,
                                    const std::function<bool()>& stopped) {
  MessageLimits limits;
  limits.job_id = cfg.job_id;
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<std::int64_t>(cfg.give_up_s * 1000));
  std::map<std::size_t, Offered> offered;
  std::map<std::string, std::string> refused_by;  // the latest refusal per node
  GSGD_INFO("waiting for node daemons to offer central shards 1.." << ranges.size() - 1);
  while (!stopped()) {
    if (offered.size() + 1 == ranges.size()) {
      std::string list;
      for (const auto& [k, o] : offered) list += (list.empty() ? "" : ",") + o.endpoint;
      return list;
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      std::string why;
      for (const auto& [by, r] : refused_by) why += "; refused " + by + ": " + r;
      return unavailable("central shard(s) " + missingShards(offered, ranges.size()) +
                         " not offered by a node daemon (node_central_shard) within give_up_s (" +
                         std::to_string(cfg.give_up_s) + " s)" + why);
    }
    auto readable = pollReadable(sock, std::chrono::milliseconds(100));
    if (!readable) return readable.status();
    if (!*readable) continue;
    auto routed = recvRouted(sock);
    if (!routed) continue;
    auto msg = decodeMessage(std::move(routed->frames), limits);
    if (msg && msg->kind() == BodyKind::HEARTBEAT) {
      // A node or worker of an earlier head: register again (a node re-offers its shard).
      OutMessage out(cfg.job_id, 0);
      out.header().getBody().initHeartbeatReply().setReregister(true);
      (void)replyTo(sock, routed->routing_id, std::move(out));
      continue;
    }
    Status answer =
        unavailable("the head is waiting for central shards " +
                    missingShards(offered, ranges.size()) + " from node daemons; register again");
    if (!msg) {
      answer = msg.status();
    } else if (msg->kind() == BodyKind::REGISTER &&
               msg->header().getBody().getRegister().hasCentralShard()) {
      auto r = msg->header().getBody().getRegister();
      auto o = r.getCentralShard();
      const std::string by = std::string(r.getHost().cStr()) + " pid " +
                             std::to_string(r.getPid()) + " at " + o.getEndpoint().cStr();
      const std::size_t k = o.getIndex();
      auto held = offered.find(k);
      if (Status ok = checkOffer(o, cfg, ranges); !ok) {
        answer = failedPrecondition("refused: " + ok.message());
        refused_by[by] = ok.message();
        GSGD_WARN("node " << by << ": " << ok.message());
      } else if (held != offered.end() && held->second.endpoint != o.getEndpoint().cStr()) {
        const std::string why =
            "central shard " + std::to_string(k) + " is already offered by node " + held->second.by;
        answer = failedPrecondition("refused: " + why);
        refused_by[by] = why;
        GSGD_WARN("node " << by << ": " << why);
      } else if (held == offered.end()) {
        offered[k] = Offered{o.getEndpoint().cStr(), by};
        GSGD_INFO("central shard " << k << " (parameters " << ranges[k].begin << "-"
                                   << ranges[k].end << ") offered by node " << by);
        answer = unavailable("central shard " + std::to_string(k) +
                             " taken; the run starts once every shard is offered: retry");
      }
    }
    (void)replyTo(sock, routed->routing_id, makeErrorReply(cfg.job_id, 0, answer));
  }
  return aborted("stopped before every central shard was offered");
}

}  // namespace groupsgd::jobs
