#include "groupsgd/common/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
thread_local std::string t_tag;

bool underJournald() {
  static const bool kJournal = journalOwnsStderr(std::getenv("JOURNAL_STREAM"), STDERR_FILENO);
  return kJournal;
}
}  // namespace

bool journalOwnsStderr(const char* journal_stream, int fd) {
  if (journal_stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  char tail = 0;
  if (std::sscanf(journal_stream, "%llu:%llu%c", &dev, &ino, &tail) != 2) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev &&
         static_cast<unsigned long long>(st.st_ino) == ino;
}

std::string isoTimestamp(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000 - (ms % 1000 < 0 ? 1 : 0));
  const int millis = static_cast<int>(((ms % 1000) + 1000) % 1000);
  std::tm utc{};
  ::gmtime_r(&secs, &utc);
  char text[64];  // room for any int year, so no truncation warning
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
  return text;
}

double lineSeconds(const char* line) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, millis = 0, used = 0;
  if (std::sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &year, &month, &day, &hour, &minute,
                  &second, &millis, &used) != 7 ||
      used != 24) {
    return -1;
  }
  std::tm utc{};
  utc.tm_year = year - 1900;
  utc.tm_mon = month - 1;
  utc.tm_mday = day;
  utc.tm_hour = hour;
  utc.tm_min = minute;
  utc.tm_sec = second;
  return static_cast<double>(::timegm(&utc)) + millis / 1000.0;
}

std::string formatLine(Level l, const std::string& tag, const std::string& message, bool journal,
                       std::chrono::system_clock::time_point now) {
  static const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  static const int kSyslog[] = {7, 6, 4, 3};
  const int i = static_cast<int>(l);
  std::string line;
  if (journal) {
    line = "<" + std::to_string(kSyslog[i]) + ">";  // journald stamps the line itself
  } else {
    line = isoTimestamp(now) + " ";
  }
  line += kNames[i];
  line += ' ';
  if (!tag.empty()) line += "[" + tag + "] ";
  line += message;
  line += '\n';
  return line;
}

void setLevel(Level l) { g_level.store(static_cast<int>(l)); }
Level level() { return static_cast<Level>(g_level.load()); }

constexpr std::array<base::EnumName<Level>, 4> kLevelNames{{
    {Level::kDebug, "debug"},
    {Level::kInfo, "info"},
    {Level::kWarn, "warn"},
    {Level::kError, "error"},
}};

bool parseLevel(const std::string& text, Level* out) {
  return base::parseInto(kLevelNames, text, out);
}

void setThreadTag(const std::string& tag) { t_tag = tag; }
const char* threadTag() { return t_tag.c_str(); }

void write(Level l, const std::string& message) {
  const std::string line =
      formatLine(l, t_tag, message, underJournald(), std::chrono::system_clock::now());
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace groupsgd::log
