// On a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) write the program's name,
// the signal, the faulting thread's log tag and a raw stack (addresses with the symbols
// glibc can name) to stderr, then die of the same signal, so exit codes, core dumps and
// systemd's view stay what they would have been. A crash on a cluster node then leaves a
// stack in the journal (or a process test's log) even where no core is kept.
// Thread rule: install once, early in main(), before threads start.
#pragma once

namespace groupsgd {

// `program` must outlive the process (a string literal).
void installCrashReport(const char* program);

}  // namespace groupsgd
