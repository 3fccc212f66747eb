// Checkpoint faults on a real head (docs/reliability.md, "Fault matrix"): a head restarted
// over a checkpoint directory whose newest file is corrupt resumes from the previous good
// one and still reaches its target; a head checkpointing into a full filesystem (a tiny
// tmpfs in a private mount namespace, root only: otherwise exit 77, reported by CTest as
// skipped) keeps training, reports every failed write and leaves the previous checkpoint
// intact. Each prints the figures the fault matrix quotes ("checkpoint fault:" lines).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "groupsgd/centralps/checkpoint.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// CTest's SKIP_RETURN_CODE for these tests: a setup this machine cannot provide.
constexpr int kSkipped = 77;

std::vector<std::pair<std::uint64_t, std::string>> checkpointsIn(const std::string& dir) {
  auto listed = groupsgd::centralps::listCheckpoints(dir);
  return listed ? *listed : std::vector<std::pair<std::uint64_t, std::string>>{};
}

std::unique_ptr<Process> worker(const std::string& dir, const std::string& name,
                                std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {WORKER_PATH, "--coordinator", endpointIn(dir), "--name", name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv, dir + "/" + name + ".log");
}

bool hasEvent(const json& summary, const std::string& kind) {
  for (const auto& e : summary["events"]) {
    if (e["kind"] == kind) return true;
  }
  return false;
}

// Flips 16 bytes in the middle of the file (the payload: its checksum no longer matches).
void flipBytes(const std::string& path) {
  const auto size = std::filesystem::file_size(path);
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  unsigned char buf[16];
  const off_t at = static_cast<off_t>(size / 2);
  REQUIRE(::pread(fd, buf, sizeof buf, at) == static_cast<ssize_t>(sizeof buf));
  for (auto& b : buf) b ^= 0xFF;
  REQUIRE(::pwrite(fd, buf, sizeof buf, at) == static_cast<ssize_t>(sizeof buf));
  ::close(fd);
}

// Daemon flags both cases share: a small model (31 KB checkpoints), one group of two.
std::vector<std::string> headFlags(const std::string& ckpt_dir, std::vector<std::string> more) {
  return withArgs({"--model", "softmax", "--mode", "grouped", "--workers", "2", "--groups", "1",
                   "--heartbeat-ms", "250", "--progress-ms", "250", "--checkpoint-dir", ckpt_dir,
                   "--checkpoint-every-versions", "3"},
                  more);
}

}  // namespace

TEST_CASE(
    "checkpoint fault: a head restarted over a corrupted newest checkpoint resumes from the "
    "previous good one and reaches its target") {
  const std::string dir = makeTempDir();
  const std::string ckpt = dir + "/ckpt";
  constexpr double kTarget = 0.75;
  std::uint64_t newest = 0, previous = 0;
  std::string corrupted;
  {
    auto head = startDaemon(dir, "head-1.log", "tcp://127.0.0.1:0",
                            headFlags(ckpt, {"--max-seconds", "120"}));
    auto w0 = worker(dir, "w0", {"--device-ms", "2"});
    auto w1 = worker(dir, "w1", {"--device-ms", "2"});
    REQUIRE_MESSAGE(waitUntil([&] { return checkpointsIn(ckpt).size() >= 2; }, 60000ms),
                    readFile(dir + "/head-1.log"));
    REQUIRE(::kill(head->pid(), SIGKILL) == 0);
    CHECK(head->wait(10000ms) == std::optional<int>(-SIGKILL));
  }  // the first run's workers are killed with it
  const auto files = checkpointsIn(ckpt);
  REQUIRE(files.size() >= 2);
  newest = files[0].first;
  corrupted = files[0].second;
  previous = files[1].first;
  flipBytes(corrupted);

  const double started = wallNow();
  auto head = startDaemon(
      dir, "head-2.log", "tcp://127.0.0.1:0",
      headFlags(ckpt, {"--target-acc", std::to_string(kTarget), "--max-seconds", "90"}));
  auto evaluator = worker(dir, "evaluator", {"--evaluate", "--eval-interval-ms", "200"});
  auto w0 = worker(dir, "w0b", {"--device-ms", "2"});
  auto w1 = worker(dir, "w1b", {"--device-ms", "2"});
  auto rc = head->wait(120000ms);
  const std::string log = readFile(dir + "/head-2.log");
  INFO("head: " << log);
  REQUIRE(rc == std::optional<int>(0));
  for (auto* p : {evaluator.get(), w0.get(), w1.get()})
    CHECK(p->wait(30000ms) == std::optional<int>(0));
  const json s = json::parse(readFile(dir + "/summary.json"));
  checkAccounting(s);
  // Said clearly: a WARN line and an event naming the skipped file and the one used.
  const double detected = stampOf(log, "the newest checkpoint was unusable");
  CHECK(detected > 0);
  CHECK(hasEvent(s, "checkpoint_skipped"));
  const json& restart = s["head_restart"];
  REQUIRE(restart.is_object());
  CHECK(restart["resumed_version"] == previous);
  REQUIRE(restart["skipped_checkpoints"].size() >= 1);
  CHECK(restart["skipped_checkpoints"][0].get<std::string>().find(corrupted) != std::string::npos);
  CHECK(s["reached"] == true);
  // The accuracy that reached the target (a final evaluation of a later version may be a
  // little lower: the model keeps moving after the report that ended the run).
  CHECK(s["acc_at_target"].get<double>() >= kTarget);
  std::printf(
      "checkpoint fault: corrupted %s (version %llu); detected at load %.2f s after the "
      "start; resumed from version %llu (%llu versions lost); target %.2f reached after "
      "%.1f s (final accuracy %.3f); trained %llu samples\n",
      std::filesystem::path(corrupted).filename().c_str(), static_cast<unsigned long long>(newest),
      detected - started, static_cast<unsigned long long>(previous),
      static_cast<unsigned long long>(newest - previous), kTarget,
      s["time_to_target_s"].get<double>(), s["final_test_acc"].get<double>(),
      llu(s["samples_trained"]));
  reportDone(dir);
}

TEST_CASE(
    "checkpoint fault: checkpoints into a full filesystem fail loudly, the previous one stays "
    "intact, training goes on") {
  if (::geteuid() != 0) {
    std::printf("Skipped: mounting a tmpfs needs root\n");
    std::exit(kSkipped);
  }
  // A private mount namespace for this test process and the daemon it starts: the tmpfs
  // disappears with them, whatever happens.
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    std::printf("Skipped: no private mount namespace (%s)\n", std::strerror(errno));
    std::exit(kSkipped);
  }
  const std::string dir = makeTempDir();
  const std::string ckpt = dir + "/ckpt";
  std::filesystem::create_directories(ckpt);
  // Room for one 31 KB checkpoint and the head's state file, not for a second checkpoint.
  if (::mount("tmpfs", ckpt.c_str(), "tmpfs", 0, "size=48k") != 0) {
    std::printf("Skipped: cannot mount a tmpfs (%s)\n", std::strerror(errno));
    std::exit(kSkipped);
  }
  auto head =
      startDaemon(dir, "head.log", "tcp://127.0.0.1:0", headFlags(ckpt, {"--max-seconds", "120"}));
  auto w0 = worker(dir, "w0", {"--device-ms", "2"});
  auto w1 = worker(dir, "w1", {"--device-ms", "2"});
  const std::string log_path = dir + "/head.log";
  REQUIRE_MESSAGE(waitForText(log_path, "checkpoint write(s) failed", 60000ms), readFile(log_path));
  const auto at_failure = ctl(dir, {"status"});
  REQUIRE(at_failure.is_object());
  const auto samples_at_failure = at_failure["samples_trained"].get<std::uint64_t>();
  // Training goes on.
  const json later = waitForStatus(
      dir,
      [&](const json& st) {
        return st["samples_trained"].get<std::uint64_t>() > samples_at_failure + 3000;
      },
      60000ms);
  REQUIRE(later["samples_trained"].get<std::uint64_t>() > samples_at_failure + 3000);
  REQUIRE(::kill(head->pid(), SIGTERM) == 0);
  auto rc = head->wait(60000ms);
  const std::string log = readFile(log_path);
  INFO("head: " << log);
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(w0->wait(30000ms) == std::optional<int>(0));
  CHECK(w1->wait(30000ms) == std::optional<int>(0));
  const json s = json::parse(readFile(dir + "/summary.json"));
  checkAccounting(s);
  CHECK(hasEvent(s, "checkpoint_failure"));
  CHECK(s["central"]["checkpoint_failures"].get<std::uint64_t>() >= 1);
  CHECK(log.find(std::strerror(ENOSPC)) != std::string::npos);
  // The previous checkpoint is intact and still the newest valid one; no torn file left.
  auto loaded = groupsgd::centralps::loadNewestCheckpoint(ckpt, 0);
  REQUIRE(loaded);
  CHECK(loaded->warnings.empty());
  const auto good = s["central"]["checkpoint_version"].get<std::uint64_t>();
  CHECK(loaded->version == good);
  CHECK(good > 0);
  const double failed_at = stampOf(log, "FAILED");
  const double reported_at = stampOf(log, "checkpoint write(s) failed");
  std::printf(
      "checkpoint fault: ENOSPC on a 48 KiB tmpfs; first write failure at central "
      "version > %llu; reported as an event %.2f s after the central PS's error; "
      "%llu writes failed in all; training went on (%llu -> %llu samples after the "
      "failure); version %llu intact on disk; central version at the end %llu\n",
      static_cast<unsigned long long>(good), reported_at - failed_at,
      llu(s["central"]["checkpoint_failures"]), static_cast<unsigned long long>(samples_at_failure),
      llu(s["samples_trained"]), static_cast<unsigned long long>(loaded->version),
      llu(s["central_version"]));
  std::fflush(stdout);
  ::umount2(ckpt.c_str(), MNT_DETACH);
  removeTestDir(dir);
}
