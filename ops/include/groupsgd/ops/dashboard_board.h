// The dashboard's state as the HTTP thread serves it (GET /api/state of the metrics
// endpoint, docs/operations.md "Watching a run"): each job's coordinator publishes its
// view (one JSON object, already serialized) about twice a second, a multi-job daemon
// also its job table; the endpoint joins the newest of each into one JSON document. The
// publishers do the serializing, so a poll costs the HTTP thread a string copy.
// Read-only by design: nothing here reaches back into a coordinator.
// Thread rule: every method may be called from any thread (one mutex).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace groupsgd::ops {

class DashboardBoard {
 public:
  // serve: a multi-job daemon (the page shows its job list).
  explicit DashboardBoard(bool serve = false);

  // A job's view (a serialized JSON object) replaces its previous one.
  void publishJob(const std::string& job, std::string view_json);
  // A job that ended keeps its last view until the daemon ends or removeJob().
  void removeJob(const std::string& job);
  // The multi-job daemon's job table (a serialized JSON object: jobs, group_slots).
  void publishJobTable(std::string table_json);

  // {"daemon": {"version", "serve", "pid", "uptime_s"}, "job_table": {...} | null,
  //  "jobs": {"NAME": {...}, ...}}
  std::string stateJson() const;

 private:
  const bool serve_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::map<std::string, std::string> jobs_;  // name -> view
  std::string job_table_ = "null";
};

}  // namespace groupsgd::ops
