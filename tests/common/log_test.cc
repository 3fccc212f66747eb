// The log line format a person reads (and scripts such as tests/netns parse): ISO 8601
// UTC with milliseconds, or the journal's priority prefix when stderr is the journal.
#include "groupsgd/common/log.h"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace groupsgd;
using std::chrono::milliseconds;
using std::chrono::system_clock;

namespace {
system_clock::time_point at(long long unix_ms) {
  return system_clock::time_point(
      std::chrono::duration_cast<system_clock::duration>(milliseconds(unix_ms)));
}
}  // namespace

TEST_CASE("log: ISO 8601 UTC timestamps with milliseconds") {
  CHECK(log::isoTimestamp(at(0)) == "1970-01-01T00:00:00.000Z");
  CHECK(log::isoTimestamp(at(1795845069270)) == "2026-11-28T05:51:09.270Z");
  CHECK(log::isoTimestamp(at(951782400005)) == "2000-02-29T00:00:00.005Z");
  // Milliseconds are truncated, never rounded into the next second.
  CHECK(log::isoTimestamp(at(1795845069999) + std::chrono::microseconds(900)) ==
        "2026-11-28T05:51:09.999Z");
}

TEST_CASE("log: a line: timestamp, level, tag, message; plain for the journal") {
  const auto t = at(1795845069270);
  CHECK(log::formatLine(log::Level::kInfo, "group-0", "step 3", false, t) ==
        "2026-11-28T05:51:09.270Z INFO [group-0] step 3\n");
  CHECK(log::formatLine(log::Level::kWarn, "", "slow", false, t) ==
        "2026-11-28T05:51:09.270Z WARN slow\n");
  CHECK(log::formatLine(log::Level::kError, "central", "bad", true, t) ==
        "<3>ERROR [central] bad\n");
  CHECK(log::formatLine(log::Level::kDebug, "", "x", true, t) == "<7>DEBUG x\n");
}

TEST_CASE("log: a line's time read back as Unix seconds") {
  CHECK(log::lineSeconds("2026-11-28T05:51:09.270Z INFO x") == doctest::Approx(1795845069.270));
  CHECK(log::lineSeconds("1970-01-01T00:00:00.000Z") == 0.0);
  const auto now = system_clock::now();
  const double back =
      log::lineSeconds(log::formatLine(log::Level::kWarn, "", "m", false, now).c_str());
  const double now_s = std::chrono::duration<double>(now.time_since_epoch()).count();
  CHECK(back <= now_s);
  CHECK(back > now_s - 0.001);                             // milliseconds, truncated
  CHECK(log::lineSeconds("1795845069.270 INFO x") == -1);  // the old form
  CHECK(log::lineSeconds("<6>INFO x") == -1);              // the journal's form
  CHECK(log::lineSeconds("") == -1);
}

TEST_CASE("log: JOURNAL_STREAM counts only when it names the file on stderr") {
  char path[] = "/tmp/gsgd-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  const std::string same = std::to_string(static_cast<unsigned long long>(st.st_dev)) + ":" +
                           std::to_string(static_cast<unsigned long long>(st.st_ino));
  const std::string other = std::to_string(static_cast<unsigned long long>(st.st_dev)) + ":" +
                            std::to_string(static_cast<unsigned long long>(st.st_ino) + 1);
  CHECK(log::journalOwnsStderr(same.c_str(), fd));
  CHECK_FALSE(log::journalOwnsStderr(other.c_str(), fd));  // a redirected child's stderr
  CHECK_FALSE(log::journalOwnsStderr(nullptr, fd));
  CHECK_FALSE(log::journalOwnsStderr("", fd));
  CHECK_FALSE(log::journalOwnsStderr("garbage", fd));
  CHECK_FALSE(log::journalOwnsStderr((same + "x").c_str(), fd));
  ::close(fd);
  ::unlink(path);
}
