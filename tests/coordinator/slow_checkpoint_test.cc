// A checkpoint that takes long at the central PS must not stop the coordinator's loop:
// heartbeats keep being answered (so no live worker is declared dead) and the control
// request is answered when the central PS is done.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "groupsgd/client/client.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/ops/control_client.h"
#include "groupsgd/ops/control_server.h"
#include "support/fake_server.h"

using namespace groupsgd;
using namespace std::chrono;

namespace {

constexpr auto kCheckpointTakes = milliseconds(1500);

// Stands in for the central PS: answers a CheckpointRequest kCheckpointTakes late (while
// still answering anything else at once), stats queries with zeros, the rest with errors.
class SlowCentral {
 public:
  explicit SlowCentral(zmq::context_t& ctx)
      : server_(ctx, [this](const InMessage& msg) { return answer(msg); }) {}
  const std::string& endpoint() const { return server_.endpoint(); }
  bool checkpointAsked() const { return asked_.load(); }

 private:
  testing::FakeServer::Reply answer(const InMessage& msg) {
    OutMessage out(1, 0);
    if (msg.kind() == BodyKind::CHECKPOINT_REQUEST) {
      asked_ = true;
      auto d = out.header().getBody().initCheckpointDone();
      d.setOk(true);
      d.setVersion(7);
      d.setPath("/slow/ckpt");
      d.setBytes(64);
      d.setDurationMs(static_cast<float>(kCheckpointTakes.count()));
      return {std::move(out), kCheckpointTakes};
    }
    if (msg.kind() == BodyKind::CENTRAL_STATS_QUERY) {
      out.header().getBody().initCentralStats();
      return {std::move(out)};
    }
    return {makeErrorReply(1, 0, unavailable("not in this test"))};
  }

  std::atomic<bool> asked_{false};
  testing::FakeServer server_;  // last: its thread stops before asked_ goes
};

}  // namespace

TEST_CASE("coordinator: heartbeats are answered while a slow checkpoint is written") {
  zmq::context_t ctx(1);
  SlowCentral central(ctx);
  daemon::DaemonConfig cfg;
  cfg.role = "coordinator";  // no group PS is needed: only an evaluator registers
  cfg.mode = daemon::Mode::kSync;
  cfg.workers = 1;
  cfg.listen = "tcp://127.0.0.1:0";
  cfg.heartbeat_ms = 50;
  cfg.heartbeat_misses = 2;
  cfg.step_deadline_ms = 100;  // silent for 200 ms = dead: far less than the checkpoint
  cfg.progress_ms = 0;
  coordinator::Topology topo;
  topo.central_endpoint = central.endpoint();
  const std::string socket = (std::filesystem::temp_directory_path() /
                              ("groupsgd_slow_ckpt_" + std::to_string(::getpid()) + ".sock"))
                                 .string();
  ops::ControlServerOptions copts;
  copts.path = socket;
  auto control = ops::ControlServer::start(copts);
  REQUIRE(control.isOk());
  coordinator::CoordinatorDeps deps;
  deps.control = control->get();
  auto coordinator = coordinator::Coordinator::create(ctx, cfg, topo, {}, std::move(deps));
  REQUIRE(coordinator.isOk());
  std::atomic<bool> stop{false};
  std::future<nlohmann::json> summary =
      std::async(std::launch::async, [&] { return (*coordinator)->run(stop); });

  // An evaluator heartbeats every 50 ms; each answer must come quickly.
  client::CoordinatorClient client(ctx, (*coordinator)->endpoint(), cfg.job_id, milliseconds(3000));
  auto me = client.registerAs(client::Role::kEvaluator, "eval");
  REQUIRE(me.isOk());
  std::atomic<bool> checkpoint_done{false};
  milliseconds slowest{0};
  int failures = 0, during_checkpoint = 0;
  std::thread heartbeats([&] {
    while (true) {
      const auto t0 = steady_clock::now();
      auto answer = client.heartbeat(*me, {});
      slowest = std::max(slowest, duration_cast<milliseconds>(steady_clock::now() - t0));
      if (!answer) ++failures;
      if (answer && answer->stop) break;
      if (central.checkpointAsked() && !checkpoint_done) ++during_checkpoint;
      std::this_thread::sleep_for(milliseconds(50));  // a trainer's heartbeat period, not a wait
    }
    (void)client.leave(*me, 0, 0);
  });

  auto ctl = ops::ControlClient::connect(socket, milliseconds(2000));
  REQUIRE(ctl.isOk());
  const auto t0 = steady_clock::now();
  auto reply = ctl->call("checkpoint", nlohmann::json::object(), milliseconds(10000));
  const auto took = steady_clock::now() - t0;
  checkpoint_done = true;
  REQUIRE(reply.isOk());
  CHECK((*reply)["ok"] == true);
  CHECK((*reply)["result"]["version"] == 7);
  CHECK(took >= kCheckpointTakes);
  auto status = ctl->call("workers", nlohmann::json::object(), milliseconds(2000));
  REQUIRE(status.isOk());
  CHECK((*status)["result"]["workers"][0]["state"] == "active");  // not declared dead

  stop = true;
  const nlohmann::json s = summary.get();
  heartbeats.join();
  CHECK(failures == 0);
  CHECK(during_checkpoint >= 5);        // heartbeats went on while the checkpoint ran
  CHECK(slowest < milliseconds(1000));  // none waited for the checkpoint
  CHECK(s["stop_reason"] == "stop requested");
}

TEST_CASE("coordinator: its method table answers exactly the methods the control server accepts") {
  std::vector<std::string> accepted;
  for (const auto& m : ops::defaultControlMethods()) accepted.push_back(m.name);
  std::sort(accepted.begin(), accepted.end());
  CHECK(coordinator::Coordinator::controlMethodNames() == accepted);  // a std::map: sorted
}
