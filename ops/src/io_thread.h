// The thread that serves an Asio io_context of the control and metrics servers.
// Thread rule: the thread it returns is the only one that runs io.
#pragma once

#include <pthread.h>

#include <exception>
#include <thread>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio/io_context.hpp>

#include "groupsgd/common/log.h"

namespace groupsgd::ops {

// Runs io until it runs out of work, under the log tag `tag` (also the thread's name, as
// top -H and /proc/PID/task/*/comm show it; at most 15 characters); an exception a handler throws
// is logged ("<tag>: handler threw (continuing): ...") and the loop goes on.
inline std::thread startIoThread(boost::asio::io_context& io, const char* tag) {
  return std::thread([&io, tag] {
    log::setThreadTag(tag);
    (void)pthread_setname_np(pthread_self(), tag);
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        GSGD_ERROR(tag << ": handler threw (continuing): " << e.what());
      }
    }
  });
}

}  // namespace groupsgd::ops
