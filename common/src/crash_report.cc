#include "groupsgd/common/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdint>

#include "groupsgd/common/log.h"

namespace groupsgd {

namespace {

const char* g_program = "groupsgd";

// Only async-signal-safe calls from here on: write(2), backtrace_symbols_fd (which
// does not allocate) and backtrace, whose library was loaded at install time.
void writeString(const char* s) {
  if (s != nullptr) (void)!write(STDERR_FILENO, s, strlen(s));
}

void writeNumber(long n) {
  char buf[24];
  char* p = buf + sizeof(buf);
  *--p = '\0';
  const bool negative = n < 0;
  unsigned long u = negative ? 0ul - static_cast<unsigned long>(n) : static_cast<unsigned long>(n);
  do {
    *--p = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (negative) *--p = '-';
  writeString(p);
}

void writeHex(std::uintptr_t v) {
  char buf[2 + 2 * sizeof(v) + 1];
  char* p = buf + sizeof(buf);
  *--p = '\0';
  do {
    *--p = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  *--p = 'x';
  *--p = '0';
  writeString(p);
}

void onFatal(int sig, siginfo_t* info, void*) {
  writeString("\n");
  writeString(g_program);
  writeString(": fatal signal ");
  writeNumber(sig);
  writeString(" (");
  writeString(sigabbrev_np(sig));
  writeString(") in pid ");
  writeNumber(static_cast<long>(getpid()));
  if (const char* tag = log::threadTag(); tag[0] != '\0') {
    writeString(", thread ");
    writeString(tag);
  }
  if (info != nullptr && info->si_code > 0 &&
      (sig == SIGSEGV || sig == SIGBUS)) {  // a fault, not a kill
    writeString(", address ");
    writeHex(reinterpret_cast<std::uintptr_t>(info->si_addr));
  }
  writeString("; stack:\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // Die of the same signal: the handler was installed with SA_RESETHAND, so re-raising
  // reaches the default action (core dump, exit status 128 + sig).
  raise(sig);
}

}  // namespace

void installCrashReport(const char* program) {
  g_program = program;
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc_s now, not inside the handler
  // The main thread's stack overflowing must still leave a report: an alternate stack.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  (void)sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = onFatal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace groupsgd
