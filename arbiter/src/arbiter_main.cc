// groupsgd-arbiter: the device arbiter on its own (docs/arbiter.md). main()
// reads as the startup sequence: flags, bind, publish the endpoint, serve until
// SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "groupsgd/arbiter/arbiter_server.h"
#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/log.h"

namespace {

using namespace groupsgd;

std::atomic<bool> g_stop{false};
void onSignal(int) { g_stop.store(true); }

constexpr const char* kUsage = R"(usage: groupsgd-arbiter [options]
Serves leases of shared devices to the workers of several training jobs, so that one
job computes while another communicates (docs/arbiter.md).

  --listen EP             where to listen (default tcp://127.0.0.1:5570; port 0 or *:
                          chosen by the kernel, see --endpoint-file)
  --policy P              none | fifo | crossover (default crossover)
  --weights J=W[,J=W]     crossover: weight per job id (default 1 for every job)
  --lease-timeout-ms MS   take back a lease held longer than this (default 10000)
  --keepalive-ms MS       tell waiting workers every MS that the arbiter is alive
                          (default 200; workers give up after --arbiter-timeout-ms)
  --endpoint-file F       write the bound endpoint into F (atomically)
  --log-level L           debug|info|warn|error (default info)
  --help                  this text
)";

int fail(const std::string& what, int code) {
  std::fprintf(stderr, "groupsgd-arbiter: %s\n", what.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  arbiter::ArbiterConfig cfg;
  std::string policy = "crossover", weights, endpoint_file, log_level = "info";
  bool help = false;
  CLI::App app("groupsgd-arbiter");
  app.set_help_flag();
  app.add_flag("-h,--help", help);
  app.add_option("--listen", cfg.listen);
  app.add_option("--policy", policy);
  app.add_option("--weights", weights);
  app.add_option("--lease-timeout-ms", cfg.lease_timeout_ms);
  app.add_option("--keepalive-ms", cfg.keepalive_ms);
  app.add_option("--endpoint-file", endpoint_file);
  app.add_option("--log-level", log_level);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return fail(std::string(e.what()) + " (see --help)", 2);
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto parsed_policy = arbiter::parsePolicy(policy);
  if (!parsed_policy) return fail(parsed_policy.status().message(), 2);
  cfg.policy = *parsed_policy;
  auto parsed_weights = arbiter::parseJobWeights(weights);
  if (!parsed_weights) return fail(parsed_weights.status().message(), 2);
  cfg.weights = std::move(*parsed_weights);
  log::Level level;
  if (!log::parseLevel(log_level, &level)) return fail("bad --log-level '" + log_level + "'", 2);
  log::setLevel(level);
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::signal(SIGPIPE, SIG_IGN);

  zmq::context_t ctx(1);
  auto server = arbiter::ArbiterServer::create(ctx, cfg);
  if (!server) return fail(server.status().toString(), cfg.keepalive_ms == 0 ? 2 : 1);
  if (!endpoint_file.empty()) {
    if (Status s = writeFileAtomically(endpoint_file, (*server)->endpoint() + "\n"); !s) {
      return fail("cannot write the endpoint file: " + s.toString(), 1);
    }
  }
  (*server)->run(g_stop);
  return 0;
}
