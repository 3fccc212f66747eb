// groupsgd-bench-memory: peak resident memory of a central PS and of a group PS serving a
// large model (25M float32 parameters, 100 MB; --quick: 2.5M) while 8 workers push a few
// synchronous steps (K = 1, so every step is also exchanged with the central PS).
//
// Each server runs alone in a child process forked before any ZeroMQ context exists, so
// its VmHWM (peak resident set, /proc/PID/status) is its own: the central PS in one child,
// the group PS in another; the workers (GroupClients on threads) live in this process.
// Targets: central <= 3 x model + 64 MiB; group <= (members + 4) x model.
//
// Flags: --quick, --params N, --workers N (8), --steps N (5).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <fstream>
#include <functional>
#include <memory>

#include "bench_cli.h"
#include "bench_util.h"
#include "groupsgd/centralps/central_server.h"
#include "groupsgd/common/log.h"
#include "groupsgd/groupps/group_server.h"

using namespace groupsgd;
using namespace groupsgd::bench;

namespace {

constexpr auto kTimeout = std::chrono::milliseconds(120000);

// Set by SIGTERM in a server child; its run() loop checks it at least every 100 ms.
std::atomic<bool> g_stop{false};
extern "C" void onTerm(int) { g_stop.store(true); }

// A field of /proc/PID/status in bytes (the kernel reports kB); 0 if absent.
std::uint64_t statusBytes(pid_t pid, const std::string& field) {
  std::ifstream f(pid == 0 ? std::string("/proc/self/status")
                           : "/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

struct Child {
  pid_t pid = -1;
  std::string endpoint;  // what the server bound, read from its pipe
};

// Forks a child that builds a server with make(ctx), writes its endpoint to a pipe and
// serves until SIGTERM. The parent must not have created a zmq context yet.
template <typename Make>
Child spawnServer(Make make) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGTERM, onTerm);
    int code = 1;
    {
      zmq::context_t ctx(2);  // as in groupsgdd
      auto server = make(ctx);
      if (server) {
        const std::string ep = (*server)->endpoint() + "\n";
        if (::write(fds[1], ep.data(), ep.size()) == static_cast<ssize_t>(ep.size())) {
          ::close(fds[1]);
          (*server)->run(g_stop);
          code = 0;
        }
      } else {
        std::fprintf(stderr, "memory: server failed: %s\n", server.status().toString().c_str());
      }
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  Child c{pid, ""};
  char ch;
  while (::read(fds[0], &ch, 1) == 1 && ch != '\n') c.endpoint.push_back(ch);
  ::close(fds[0]);
  return c;
}

void stopChild(const Child& c) {
  if (c.pid <= 0) return;
  ::kill(c.pid, SIGTERM);
  int status = 0;
  ::waitpid(c.pid, &status, 0);
}

// `workers` members push `steps` steps each in lockstep; false if any call failed.
bool drive(const std::string& group_ep, std::size_t params, std::uint32_t workers, int steps) {
  zmq::context_t ctx(1);
  if (Status s = configureMembers(ctx, group_ep, workers, 1, /*k=*/1); !s) {
    std::fprintf(stderr, "memory: configure failed: %s\n", s.toString().c_str());
    return false;
  }
  std::atomic<bool> failed{false};
  std::barrier pulled(static_cast<std::ptrdiff_t>(workers));
  std::vector<std::thread> threads;
  for (std::uint32_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      client::GroupClient client(ctx, memberAssignment(w + 1, 1, group_ep, params), 1, kTimeout);
      std::vector<float> replica(params), grad(params, 1e-6f);
      std::uint64_t step = pullAndMeet(client, replica, failed, pulled);
      for (int i = 0; i < steps && !failed; ++i) {
        auto a = client.push(step, grad, 32, 0.0f, 0.0f, replica);
        if (!a || !a->accepted) {
          std::fprintf(stderr, "memory: push failed: %s\n",
                       a ? a->reason.c_str() : a.status().toString().c_str());
          failed = true;
          break;
        }
        step = a->step;
      }
    });
  }
  for (auto& t : threads) t.join();
  // Let the last exchange with the central PS land before the peaks are read.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return !failed;
}

json serverFigures(const char* name, pid_t pid, std::uint64_t idle_rss, std::uint64_t model,
                   std::uint64_t target) {
  const std::uint64_t peak = statusBytes(pid, "VmHWM");
  json j = {{"bench", "memory"},
            {"server", name},
            {"model_bytes", model},
            {"rss_after_start_bytes", idle_rss},
            {"peak_bytes", peak},
            {"rss_at_end_bytes", statusBytes(pid, "VmRSS")},
            {"peak_model_multiple", static_cast<double>(peak) / static_cast<double>(model)},
            {"target_bytes", target},
            {"peak_vs_target", static_cast<double>(peak) / static_cast<double>(target)},
            {"target_met", peak <= target}};
  emit(j);
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  auto app = benchApp("groupsgd-bench-memory", "resident memory of the servers per model byte");
  bool quick = false;
  std::size_t params = 0;
  std::uint32_t workers = 8;
  int steps = 5;
  app->add_flag("--quick", quick, "a smaller model (CI smoke test)");
  auto* params_opt =
      app->add_option("--params", params, "model parameters (default 25,000,000; quick 2,500,000)")
          ->check(kPositive);
  app->add_option("--workers", workers, "workers pushing (default 8)")->check(kPositive);
  app->add_option("--steps", steps, "steps measured (default 5)")->check(kPositive);
  if (auto rc = parseCommandLine(*app, argc, argv)) return *rc;
  if (params_opt->count() == 0) params = quick ? 2500000 : 25000000;
  log::setLevel(log::Level::kError);
  const std::uint64_t model = params * sizeof(float);
  const std::uint64_t process_base = statusBytes(0, "VmRSS");  // libraries, no model

  Child central = spawnServer([&](zmq::context_t& ctx) {
    return centralps::CentralServer::create(ctx, benchCentralConfig(params), "tcp://127.0.0.1:*");
  });
  Child group;
  if (!central.endpoint.empty()) {
    group = spawnServer([&](zmq::context_t& ctx) {
      groupps::GroupServerConfig cfg = benchGroupConfig();
      cfg.central_endpoint = central.endpoint;
      return groupps::GroupServer::create(ctx, cfg, params, "tcp://127.0.0.1:*");
    });
  }
  bool ok = !central.endpoint.empty() && !group.endpoint.empty();
  const std::uint64_t central_idle = statusBytes(central.pid, "VmRSS");
  const std::uint64_t group_idle = statusBytes(group.pid, "VmRSS");
  const auto t0 = Clock::now();
  ok = ok && drive(group.endpoint, params, workers, steps);
  const double drive_s = secondsSince(t0);

  json summary = {{"bench", "memory"},
                  {"quick", quick},
                  {"params", params},
                  {"model_bytes", model},
                  {"workers", workers},
                  {"steps", steps},
                  {"process_baseline_bytes", process_base},
                  {"drive_s", drive_s}};
  if (ok) {
    const json c =
        serverFigures("central", central.pid, central_idle, model, 3 * model + (64ull << 20));
    const json g = serverFigures("group", group.pid, group_idle, model, (workers + 4ull) * model);
    for (const char* k :
         {"peak_bytes", "target_bytes", "peak_model_multiple", "peak_vs_target", "target_met"}) {
      summary[std::string("central_") + k] = c[k];
      summary[std::string("group_") + k] = g[k];
    }
  }
  summary["ok"] = ok;
  stopChild(group);
  stopChild(central);
  emit(summary);
  return ok ? 0 : 1;
}
