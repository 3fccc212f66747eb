// groupsgd-worker: the reference trainer (or, with --evaluate, the evaluator).
#include <csignal>
#include <cstdio>

#include "groupsgd/common/allocator.h"
#include "groupsgd/common/crash_report.h"
#include "groupsgd/common/log.h"
#include "groupsgd/worker/options.h"
#include "groupsgd/worker/trainer.h"

namespace {
std::atomic<bool> g_interrupted{false};
void onSignal(int) { g_interrupted.store(true); }
}  // namespace

int main(int argc, char** argv) {
  using namespace groupsgd;
  auto opts = worker::parseWorkerOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (!opts) {
    std::fprintf(stderr, "groupsgd-worker: %s\n", opts.status().message().c_str());
    return 2;
  }
  if (opts->help) {
    std::fputs(worker::workerUsage(), stdout);
    return 0;
  }
  log::Level level;
  if (!log::parseLevel(opts->log_level, &level)) {
    std::fprintf(stderr, "groupsgd-worker: bad --log-level '%s'\n", opts->log_level.c_str());
    return 2;
  }
  log::setLevel(level);
  if (!opts->evaluate) {
    // Before registering: a worker that cannot compute should not join a job.
    if (kernels::KernelStatus st = kernels::checkModelDevice(opts->device); !st.ok()) {
      std::fprintf(stderr, "groupsgd-worker: --device %s: %s (use --device cpu)\n",
                   kernels::modelDeviceName(opts->device).c_str(), st.message.c_str());
      return 2;
    }
  }
  (void)tuneAllocatorForLargeBuffers();  // warm buffers for frames and replicas
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  installCrashReport("groupsgd-worker");
  zmq::context_t ctx(1);
  return opts->evaluate ? worker::runEvaluator(ctx, *opts, g_interrupted)
                        : worker::runTrainer(ctx, *opts, g_interrupted);
}
