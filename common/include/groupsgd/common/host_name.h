// The name this process gives for its host: where a trainer, a node daemon or the head
// runs, for operators and for placing a group's PS beside its members. GROUPSGD_HOST
// names it (several emulated hosts on one machine, network namespaces that share a
// hostname), else SLURMD_NODENAME (a job step under Slurm, also with several slurmd on
// one machine), else gethostname().
// Thread rule: any thread (reads the environment once per call).
#pragma once

#include <string>

namespace groupsgd {

std::string hostName();

}  // namespace groupsgd
