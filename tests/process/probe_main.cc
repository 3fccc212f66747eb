// groupsgd-probe: a misbehaving client for the process tests. It registers as a trainer,
// then sends its group PS (and the coordinator) the malformed or out-of-place messages
// named on the command line and checks that each one is answered with an ErrorReply.
//   groupsgd-probe COORDINATOR_ENDPOINT [PROBE...]
// Without PROBE names it runs the first three (kDefault); "all" runs every probe.
// Prints one line per probe and exits 0 only if every probe was refused.
// "quarantine" (not part of "all": it quarantines the probe) sends NaN gradients until the
// group PS quarantines it, then checks that its pushes and registrations are refused
// with the quarantine code.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>

#include "groupsgd/client/client.h"
#include "groupsgd/common/transport.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kUnknownWorker = 987654321;

bool report(const std::string& what, bool refused, const std::string& detail) {
  std::printf("probe %-24s %s (%s)\n", what.c_str(), refused ? "refused" : "NOT REFUSED",
              detail.c_str());
  std::fflush(stdout);
  return refused;
}

// An ErrorReply (any code but "unavailable", which would mean no real answer) counts.
bool expectError(const std::string& what, Result<InMessage>&& reply) {
  const bool refused = !reply.isOk() && reply.status().code() != Code::kUnavailable;
  return report(what, refused, reply.isOk() ? "answered normally" : reply.status().toString());
}

// Sends frames as they are (no codec in between) and expects an ErrorReply back.
bool expectErrorForRaw(const std::string& what, zmq::context_t& ctx, const std::string& endpoint,
                       std::vector<zmq::message_t> frames) {
  auto sock = makeSocket(ctx, zmq::socket_type::dealer);
  if (!sock || !connectSocket(*sock, endpoint)) return report(what, false, "cannot connect");
  (void)sendFrames(*sock, std::move(frames));
  zmq::pollitem_t item{sock->handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, 5000ms);
  bool refused = false;
  std::string detail = "no answer";
  if (item.revents & ZMQ_POLLIN) {
    auto got = recvFrames(*sock);
    auto msg =
        got ? decodeMessage(std::move(*got), MessageLimits{}) : Result<InMessage>(got.status());
    if (msg) {
      const Status s = statusFromError(*msg);
      refused = !s.isOk();
      detail = refused ? s.toString() : std::string("answered '") + bodyKindName(msg->kind()) + "'";
    } else {
      detail = "undecodable answer: " + msg.status().toString();
    }
  }
  return report(what, refused, detail);
}

OutMessage push(const client::Assignment& a, std::vector<float> grad, std::uint64_t step = 0) {
  OutMessage out(1, a.worker_id);
  out.header().setEpoch(a.epoch);
  out.header().setStep(step);
  auto p = out.header().getBody().initPush();
  p.setBatchSize(a.batch_size);
  p.setLoss(1.0f);
  out.addTensor(std::make_shared<std::vector<float>>(std::move(grad)));
  return out;
}

struct Probe {
  const char* name;
  bool in_default;
  std::function<bool(const std::string& name)> run;
};

// What every probe works with: the probe's registration and its links to the group PS and
// the coordinator, and the samples of the pushes the group accepted (reported in Leave,
// so accounting holds).
struct ProbeEnv {
  zmq::context_t& ctx;
  client::CoordinatorClient& coord;
  const client::Assignment& a;
  RpcClient& group;
  RpcClient& coordinator;
  std::vector<float> zeros;
  std::uint64_t trained = 0, steps = 0;

  // Pulls (which makes the probe an active member) and pushes one valid gradient for the
  // open step; returns that step, or nullopt.
  std::optional<std::uint64_t> pushValid() {
    OutMessage pull(1, a.worker_id);
    pull.header().setEpoch(a.epoch);
    pull.header().getBody().initPull();
    auto pulled = group.call(std::move(pull), 5000ms);
    if (!pulled) return std::nullopt;
    const std::uint64_t step = pulled->header().getStep();
    auto pushed = group.call(push(a, zeros, step), 15000ms);
    if (!pushed || pushed->kind() != BodyKind::STEP_REPLY) return std::nullopt;
    trained += a.batch_size;
    ++steps;
    return step;
  }
};

// Messages broken in their frames, their tensor or their header.
std::vector<Probe> malformedMessageProbes(ProbeEnv& e) {
  return {
      // A header frame that is not Cap'n Proto at all (32 bytes: word-sized junk).
      {"malformed-header", true,
       [&e](const std::string& n) {
         std::vector<zmq::message_t> junk;
         junk.emplace_back("this is not a capnp header!!!!!", 32);
         return expectErrorForRaw(n, e.ctx, e.a.group_endpoint, std::move(junk));
       }},
      // A gradient with the wrong number of elements.
      {"wrong-length", true,
       [&e](const std::string& n) {
         std::vector<float> g(e.a.param_count + 7, 0.f);
         return expectError(n, e.group.call(push(e.a, std::move(g)), 5000ms));
       }},
      // A gradient holding a NaN.
      {"nan-gradient", true,
       [&e](const std::string& n) {
         std::vector<float> g(e.a.param_count, 0.001f);
         g[e.a.param_count / 2] = std::numeric_limits<float>::quiet_NaN();
         return expectError(n, e.group.call(push(e.a, std::move(g)), 5000ms));
       }},
      // A header claiming protocol version 2 (the group PS speaks 1).
      {"bad-version", false,
       [&e](const std::string& n) {
         OutMessage m = push(e.a, e.zeros);
         m.header().setProtocolVersion(kProtocolVersion + 1);
         return expectError(n, e.group.call(std::move(m), 5000ms));
       }},
      // The same to the coordinator, in a heartbeat.
      {"coordinator-bad-version", false,
       [&e](const std::string& n) {
         OutMessage m(1, e.a.worker_id);
         m.header().setProtocolVersion(kProtocolVersion + 1);
         m.header().getBody().initHeartbeat();
         return expectError(n, e.coordinator.call(std::move(m), 5000ms));
       }},
      // Another training job's message.
      {"wrong-job", false,
       [&e](const std::string& n) {
         OutMessage m = push(e.a, e.zeros);
         m.header().setJobId(7);
         return expectError(n, e.group.call(std::move(m), 5000ms));
       }},
      // A tensor frame one byte longer than the header declares.
      {"frame-too-long", false,
       [&e](const std::string& n) {
         auto frames = push(e.a, e.zeros).toFrames();
         zmq::message_t longer(frames.back().size() + 1);
         std::memcpy(longer.data(), frames.back().data(), frames.back().size());
         static_cast<char*>(longer.data())[frames.back().size()] = 0;
         frames.back() = std::move(longer);
         return expectErrorForRaw(n, e.ctx, e.a.group_endpoint, std::move(frames));
       }},
  };
}

// Well-formed messages from the wrong sender or for the wrong step.
std::vector<Probe> identityAndStepProbes(ProbeEnv& e) {
  return {
      // A push signed with a worker id nobody was given.
      {"unknown-worker", false,
       [&e](const std::string& n) {
         OutMessage m = push(e.a, e.zeros);
         m.header().setSenderId(kUnknownWorker);
         return expectError(n, e.group.call(std::move(m), 5000ms));
       }},
      // The coordinator is told that an unknown worker leaves.
      {"coordinator-unknown-leave", false,
       [&e](const std::string& n) {
         client::Assignment fake = e.a;
         fake.worker_id = kUnknownWorker;
         const Status s = e.coord.leave(fake, 0, 0);
         return report(n, !s.isOk() && s.code() != Code::kUnavailable, s.toString());
       }},
      // A valid gradient for a step the group has not reached.
      {"future-step", false,
       [&e](const std::string& n) {
         OutMessage m = push(e.a, e.zeros);
         m.header().setStep(1ull << 40);
         return expectError(n, e.group.call(std::move(m), 5000ms));
       }},
      // A gradient for a step this worker already pushed for (a replayed message).
      {"replayed-push", false,
       [&e](const std::string& n) {
         auto step = e.pushValid();
         if (!step) return report(n, false, "could not push a valid gradient first");
         return expectError(n, e.group.call(push(e.a, e.zeros, *step), 5000ms));
       }},
      // A gradient for a step before the one this worker last pushed (out of order).
      {"out-of-order-step", false,
       [&e](const std::string& n) {
         auto first = e.pushValid();
         auto second = e.pushValid();
         if (!first || !second) return report(n, false, "could not push valid gradients first");
         return expectError(n, e.group.call(push(e.a, e.zeros, *first), 5000ms));
       }},
  };
}

// NaN gradients until the group quarantines the sender; then its pushes, its registration
// under its id and a new registration are refused as quarantined.
bool quarantineProbe(ProbeEnv& e, const std::string& n) {
  std::vector<float> g(e.a.param_count, 0.001f);
  g[0] = std::numeric_limits<float>::quiet_NaN();
  int sent = 0;
  Status last;
  for (; sent < 100; ++sent) {
    auto r = e.group.call(push(e.a, g), 5000ms);
    last = r.status();
    if (last.code() == Code::kQuarantined || last.code() == Code::kUnavailable) break;
  }
  report(n + "-push", last.code() == Code::kQuarantined,
         last.toString() + " after " + std::to_string(sent) + " NaN pushes");
  if (last.code() != Code::kQuarantined) return false;
  // The coordinator learns it from the group within a few heartbeats.
  const auto deadline = std::chrono::steady_clock::now() + 20000ms;
  Status again;
  do {
    auto r = e.coord.registerAs(client::Role::kTrainer, "probe", e.a.worker_id, {}, e.a.epoch);
    again = r.status();
    if (again.code() == Code::kQuarantined) break;
    std::this_thread::sleep_for(100ms);
  } while (std::chrono::steady_clock::now() < deadline);
  report(n + "-register-id", again.code() == Code::kQuarantined, again.toString());
  auto fresh = e.coord.registerAs(client::Role::kTrainer, "probe");
  return report(n + "-register-new", fresh.status().code() == Code::kQuarantined,
                fresh.status().toString()) &&
         again.code() == Code::kQuarantined;
}

// Every probe, in the order they run.
std::vector<Probe> allProbes(ProbeEnv& e) {
  std::vector<Probe> probes = malformedMessageProbes(e);
  for (auto& p : identityAndStepProbes(e)) probes.push_back(std::move(p));
  probes.push_back(
      {"quarantine", false, [&e](const std::string& n) { return quarantineProbe(e, n); }});
  return probes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: groupsgd-probe COORDINATOR_ENDPOINT [PROBE...|all]\n");
    return 2;
  }
  zmq::context_t ctx(1);
  client::CoordinatorClient coord(ctx, argv[1], 1, 5000ms);
  auto a = coord.registerAs(client::Role::kTrainer, "probe");
  if (!a) {
    std::fprintf(stderr, "probe: cannot register: %s\n", a.status().toString().c_str());
    return 1;
  }
  RpcClient group(ctx, a->group_endpoint, MessageLimits{});
  RpcClient coordinator(ctx, argv[1], MessageLimits{});
  ProbeEnv env{ctx, coord, *a, group, coordinator, std::vector<float>(a->param_count, 0.0f)};
  const std::vector<Probe> probes = allProbes(env);
  std::vector<std::string> wanted(argv + 2, argv + argc);
  bool all = true;
  int ran = 0;
  for (const auto& p : probes) {
    bool selected = wanted.empty() ? p.in_default : false;
    for (const auto& w : wanted) {
      selected |= (w == "all" && std::string(p.name) != "quarantine") || w == p.name;
    }
    if (!selected) continue;
    all &= p.run(p.name);
    ++ran;
  }
  (void)coord.leave(*a, env.trained, env.steps);
  if (ran == 0 || ran < static_cast<int>(wanted.size())) {
    std::fprintf(stderr, "probe: unknown probe name among the arguments\n");
    return 2;
  }
  return all ? 0 : 1;
}
