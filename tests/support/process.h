// Child processes for the process tests: spawned with their output in a log file, waited
// for with a deadline, killed if still running when the test ends.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace groupsgd::testing {

class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& log_path);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // Exit code, or nullopt if it did not exit within the timeout (or died by a signal: -sig).
  std::optional<int> wait(std::chrono::milliseconds timeout);
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
  std::optional<int> status_;
};

std::string readFile(const std::string& path);
// Polls until the file exists and is non-empty.
bool waitForFile(const std::string& path, std::chrono::milliseconds timeout);
// Polls until the file contains text.
bool waitForText(const std::string& path, const std::string& text,
                 std::chrono::milliseconds timeout);
// Polls done() every `every` until it holds (true) or the timeout passes (false): tests
// wait for a state, never for a fixed time.
bool waitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout,
               std::chrono::milliseconds every = std::chrono::milliseconds(50));
std::string makeTempDir();
// Removes a test's directory, unless GROUPSGD_KEEP_TEST_DIRS is set (loops hunting a rare
// failure keep every log: scripts/soak.sh).
void removeTestDir(const std::string& dir);
// "exit N", "killed by signal N" or "still running", for test messages.
std::string exitText(const std::optional<int>& status);

}  // namespace groupsgd::testing
