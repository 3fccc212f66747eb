// groupsgdctl: the control socket's command-line client. The program is runCtl()
// (ops/src/ctl.cc); docs/operations.md is its manual.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "groupsgd/ops/ctl.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> args(argv + 1, argv + argc);
  const int rc =
      groupsgd::ops::runCtl(args, groupsgd::ops::defaultControlSocketPath(), std::cout, std::cerr);
  std::cout.flush();
  return std::cout ? rc : groupsgd::ops::kCtlUsageOrConnection;
}
