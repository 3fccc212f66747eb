#include "groupsgd/coordinator/background_call.h"

#include <exception>

namespace groupsgd::coordinator {

BackgroundCall BackgroundCall::start(zmq::context_t& ctx, CallTarget target, MessageLimits limits,
                                     OutMessage&& msg, std::chrono::milliseconds timeout) {
  auto call = [&ctx, target = std::move(target), limits, msg = std::move(msg),
               timeout]() mutable -> Result<InMessage> {
    try {  // exceptions stay on this thread
      RpcClient client(ctx, target.endpoint, limits, target.options);
      return client.call(std::move(msg), timeout);
    } catch (const std::exception& e) {
      return internalError(std::string("background call failed: ") + e.what());
    }
  };
  return BackgroundCall(std::async(std::launch::async, std::move(call)));
}

bool BackgroundCall::ready() const {
  return reply_.valid() && reply_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

Result<InMessage> BackgroundCall::take() { return reply_.get(); }

}  // namespace groupsgd::coordinator
