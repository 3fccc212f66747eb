#include "groupsgd/client/central_model_client.h"

#include "groupsgd/client/client.h"

namespace groupsgd::client {

CentralModelClient::CentralModelClient(zmq::context_t& ctx, std::string endpoint,
                                       std::uint64_t param_count, MessageLimits limits,
                                       SocketOptions opts)
    : endpoint_(std::move(endpoint)), ctx_(&ctx), limits_(limits), opts_(opts) {
  auto shards = parseCentralShards(endpoint_, param_count);
  if (!shards) {
    bad_map_ = shards.status();
    return;
  }
  shards_ = std::move(*shards);
  for (const auto& s : shards_) {
    rpcs_.push_back(std::make_unique<RpcClient>(ctx, s.alternatives().front(), limits, opts));
    at_.push_back(0);
  }
}

Result<std::uint64_t> CentralModelClient::fetch(std::uint64_t job_id, std::span<float> params,
                                                std::chrono::milliseconds timeout) {
  GSGD_RETURN_IF_ERROR(bad_map_);
  if (params.size() != shards_.back().end) {
    return invalidArgument("the central model has " + std::to_string(shards_.back().end) +
                           " parameters, not " + std::to_string(params.size()));
  }
  std::uint64_t version = 0;
  for (std::size_t k = 0; k < shards_.size(); ++k) {
    const auto alternatives = shards_[k].alternatives();
    auto v = fetchCentralModel(*rpcs_[k], job_id,
                               params.subspan(shards_[k].begin, shards_[k].size()), timeout);
    // Silent (not a refusal): the shard's standby may serve it now; each other endpoint of
    // its list is asked once.
    for (std::size_t tried = 1;
         !v && v.status().code() != Code::kInvalidArgument && tried < alternatives.size();
         ++tried) {
      at_[k] = (at_[k] + 1) % alternatives.size();
      rpcs_[k] = std::make_unique<RpcClient>(*ctx_, alternatives[at_[k]], limits_, opts_);
      v = fetchCentralModel(*rpcs_[k], job_id, params.subspan(shards_[k].begin, shards_[k].size()),
                            timeout);
    }
    if (!v) {
      if (shards_.size() == 1) return v.status();
      return Status(v.status().code(), "central shard " + std::to_string(k) + " (" +
                                           alternatives[at_[k]] + "): " + v.status().message());
    }
    if (k == 0) version = *v;
  }
  return version;
}

}  // namespace groupsgd::client
