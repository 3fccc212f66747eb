// Leveled logging to stderr, one line per message:
//   2026-11-28T12:34:56.789Z INFO [group-0] message
// (UTC, milliseconds). When stderr is the journal (systemd's JOURNAL_STREAM names its
// device and inode) the line starts with a syslog priority prefix "<N>" instead of the
// time: journald keeps the level and stamps the line itself.
// Thread rule: any thread may log; each line is written with one write(2).
#pragma once

#include <chrono>
#include <sstream>
#include <string>

namespace groupsgd::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void setLevel(Level level);
Level level();
// Parses "debug|info|warn|error"; returns false on anything else.
bool parseLevel(const std::string& text, Level* out);
// Short tag (e.g. "central", "group-1", "worker-3") printed on every line of this thread.
void setThreadTag(const std::string& tag);
// The calling thread's tag ("" if none); a plain read, safe in a signal handler.
const char* threadTag();
void write(Level level, const std::string& message);

// The parts of write(), for tests. ISO 8601 UTC with milliseconds ("...T12:34:56.789Z").
std::string isoTimestamp(std::chrono::system_clock::time_point t);
// The time at the start of a log line (isoTimestamp's form; what follows is ignored),
// as seconds since the Unix epoch; -1 when the text does not start with one. For tools
// and tests that read log files.
double lineSeconds(const char* line);
// One whole line, newline included: with journal the "<N>" prefix, else the timestamp.
std::string formatLine(Level level, const std::string& tag, const std::string& message,
                       bool journal, std::chrono::system_clock::time_point now);
// Whether journal_stream (JOURNAL_STREAM's value, "DEV:INODE"; null when unset) is the
// file open on fd: a child whose stderr was redirected keeps the variable but not the
// journal.
bool journalOwnsStderr(const char* journal_stream, int fd);

}  // namespace groupsgd::log

#define GSGD_LOG(lvl, expr)                                                    \
  do {                                                                         \
    if (static_cast<int>(lvl) >= static_cast<int>(::groupsgd::log::level())) { \
      std::ostringstream gsgd_os_;                                             \
      gsgd_os_ << expr; /* NOLINT(bugprone-macro-parentheses): a << chain */   \
      ::groupsgd::log::write(lvl, gsgd_os_.str());                             \
    }                                                                          \
  } while (0)
#define GSGD_DEBUG(expr) GSGD_LOG(::groupsgd::log::Level::kDebug, expr)
#define GSGD_INFO(expr) GSGD_LOG(::groupsgd::log::Level::kInfo, expr)
#define GSGD_WARN(expr) GSGD_LOG(::groupsgd::log::Level::kWarn, expr)
#define GSGD_ERROR(expr) GSGD_LOG(::groupsgd::log::Level::kError, expr)
