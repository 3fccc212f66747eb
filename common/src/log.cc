#include "groupsgd/common/log.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
thread_local std::string t_tag;

bool underJournald() {
  static const bool kJournal = std::getenv("JOURNAL_STREAM") != nullptr;
  return kJournal;
}
}  // namespace

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
  static const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  static const int kSyslog[] = {7, 6, 4, 3};
  const int i = static_cast<int>(l);
  std::string line;
  if (underJournald()) {
    line = "<" + std::to_string(kSyslog[i]) + ">";
  } else {
    using namespace std::chrono;
    const double t = duration<double>(system_clock::now().time_since_epoch()).count();
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%.3f ", t);
    line = stamp;
  }
  line += kNames[i];
  line += ' ';
  if (!t_tag.empty()) line += "[" + t_tag + "] ";
  line += message;
  line += '\n';
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace groupsgd::log
