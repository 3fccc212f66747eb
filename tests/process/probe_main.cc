// groupsgd-probe: a misbehaving client for the process tests. It registers as a trainer,
// then sends its group PS a malformed header, a gradient of the wrong length and a
// gradient holding a NaN, and checks that each one is answered with an ErrorReply.
// Prints one line per probe and exits 0 only if every probe was refused.
#include <cmath>
#include <cstdio>
#include <limits>

#include "groupsgd/common/transport.h"
#include "groupsgd/worker/client.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

bool report(const char* what, bool refused, const std::string& detail) {
  std::printf("probe %-16s %s (%s)\n", what, refused ? "refused" : "NOT REFUSED", detail.c_str());
  return refused;
}

// An ErrorReply (any code but "unavailable", which would mean no real answer) counts.
bool expectError(const char* what, Result<InMessage>&& reply) {
  const bool refused = !reply.isOk() && reply.status().code() != Code::kUnavailable;
  return report(what, refused, reply.isOk() ? "answered normally" : reply.status().toString());
}

OutMessage push(const worker::Assignment& a, std::vector<float> grad) {
  OutMessage out(1, a.worker_id);
  out.header().setEpoch(a.epoch);
  auto p = out.header().getBody().initPush();
  p.setBatchSize(a.batch_size);
  p.setLoss(1.0f);
  out.addTensor(std::make_shared<std::vector<float>>(std::move(grad)));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: groupsgd-probe COORDINATOR_ENDPOINT\n");
    return 2;
  }
  zmq::context_t ctx(1);
  worker::CoordinatorClient coord(ctx, argv[1], 1, 5000ms);
  auto a = coord.registerAs(worker::Role::kTrainer, "probe");
  if (!a) {
    std::fprintf(stderr, "probe: cannot register: %s\n", a.status().toString().c_str());
    return 1;
  }
  bool all = true;
  // 1. A header frame that is not Cap'n Proto at all.
  {
    auto sock = makeSocket(ctx, zmq::socket_type::dealer);
    if (!sock || !connectSocket(*sock, a->group_endpoint)) return 1;
    std::vector<zmq::message_t> junk;
    const char bytes[] = "this is not a capnp header!!!!!";  // 32 bytes: word-sized junk
    junk.emplace_back(bytes, 32);
    (void)sendFrames(*sock, std::move(junk));
    zmq::pollitem_t item{sock->handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 5000ms);
    bool refused = false;
    std::string detail = "no answer";
    if (item.revents & ZMQ_POLLIN) {
      auto frames = recvFrames(*sock);
      auto msg = frames ? decodeMessage(std::move(*frames), MessageLimits{})
                        : Result<InMessage>(frames.status());
      if (msg) {
        const Status s = statusFromError(*msg);
        refused = !s.isOk();
        detail = s.toString();
      }
    }
    all &= report("malformed-header", refused, detail);
  }
  RpcClient group(ctx, a->group_endpoint, MessageLimits{});
  // 2. A gradient with the wrong number of elements.
  all &= expectError("wrong-length", group.call(push(*a, std::vector<float>(a->param_count + 7, 0.f)), 5000ms));
  // 3. A gradient holding a NaN.
  std::vector<float> nan_grad(a->param_count, 0.001f);
  nan_grad[a->param_count / 2] = std::numeric_limits<float>::quiet_NaN();
  all &= expectError("nan-gradient", group.call(push(*a, std::move(nan_grad)), 5000ms));
  (void)coord.leave(*a, 0, 0);
  return all ? 0 : 1;
}
