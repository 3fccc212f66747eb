// CPU time of this process's threads, by thread name, from /proc/self/task (Linux): what
// a measured path costs each thread (the benchmark's evidence of where a round trip's time
// goes, robust to other load on the machine, unlike its wall time).
// Thread rule: free functions; a snapshot may be taken from any thread.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>

namespace groupsgd::bench {

// Seconds of user + system CPU per thread id, with the thread's name.
struct ThreadCpuSnapshot {
  std::map<int, std::pair<std::string, double>> threads;
};

inline ThreadCpuSnapshot threadCpuNow() {
  ThreadCpuSnapshot out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/stat");
    const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto open = s.find('(');
    const auto close = s.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 > s.size()) continue;
    // After the name: state, then fields 4..; utime and stime are fields 14 and 15.
    std::size_t at = close + 2;
    for (int field = 3; field < 14 && at != std::string::npos; ++field) at = s.find(' ', at) + 1;
    if (at == 0 || at >= s.size()) continue;
    const double utime = std::stod(s.substr(at));
    const double stime = std::stod(s.substr(s.find(' ', at) + 1));
    out.threads[std::stoi(e->d_name)] = {s.substr(open + 1, close - open - 1),
                                         (utime + stime) / tick};
  }
  closedir(dir);
  return out;
}

// Adds each thread's CPU between two snapshots into `into`, by thread name.
inline void addThreadCpu(const ThreadCpuSnapshot& before, const ThreadCpuSnapshot& after,
                         std::map<std::string, double>* into) {
  for (const auto& [tid, named] : after.threads) {
    auto it = before.threads.find(tid);
    const double used = named.second - (it == before.threads.end() ? 0.0 : it->second.second);
    if (used > 0) (*into)[named.first] += used;
  }
}

}  // namespace groupsgd::bench
