// An evaluator's reader of the central model: from the central PS, or, when the head hands
// out a shard map (docs/shards.md), from every shard, each range read into its place.
// Thread rule: one owning thread (it holds one RpcClient per shard).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "groupsgd/common/central_shard_map.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::client {

class CentralModelClient {
 public:
  // endpoint: one endpoint or a shard map over param_count parameters (a bad map is
  // reported by every fetch).
  CentralModelClient(zmq::context_t& ctx, std::string endpoint, std::uint64_t param_count,
                     MessageLimits limits, SocketOptions opts);
  const std::string& endpoint() const { return endpoint_; }
  // The model into params (param_count elements); its version (shard 0's when sharded:
  // each shard counts its own). Shards are read one after the other; a shard with a
  // failover list (EP|EP) that does not answer is asked at the next endpoint of its list,
  // which is kept for later fetches (its standby took over).
  Result<std::uint64_t> fetch(std::uint64_t job_id, std::span<float> params,
                              std::chrono::milliseconds timeout);

 private:
  std::string endpoint_;
  Status bad_map_ = Status::ok();
  std::vector<CentralShard> shards_;
  std::vector<std::unique_ptr<RpcClient>> rpcs_;
  std::vector<std::size_t> at_;  // per shard: the endpoint of its failover list in use
  zmq::context_t* ctx_;
  MessageLimits limits_;
  SocketOptions opts_;
};

}  // namespace groupsgd::client
