// The head's replication stream (docs/protocol.md, "Standby replication"): what a primary
// central PS sends its standby (a snapshot, then each merged delta in version order, and
// heartbeats) and what the standby answers (hello, acknowledgements). A small binary
// format of its own: one fixed little-endian header frame, then the tensors as raw float32
// frames, then a text frame. Every message carries the sender's term (its head
// incarnation), so a standby refuses a primary older than the one it follows.
// Thread rule: plain functions and values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/status.h"
#include "groupsgd/common/tensor_view.h"
#include "groupsgd/kernels/optimizer_snapshot.h"

namespace groupsgd::centralps {

enum class ReplicationKind : std::uint16_t {
  kHello = 1,       // standby -> primary: send me a snapshot (term: the term it followed, 0 = none)
  kSnapshot = 2,    // primary -> standby: the whole central state at `version`
  kUpdate = 3,      // primary -> standby: the delta that makes `version` from version - 1
  kAck = 4,         // standby -> primary: `version` is applied here
  kHeartbeat = 5,   // primary -> standby: alive at `version` (answered with an Ack)
  kSuperseded = 6,  // a promoted standby -> the old primary: term `term` exists; step down
  kRefused = 7,     // either way: the last message was refused; `text` says why
  // primary -> standby: the coordinator's state (`text`, JSON; `version`: the central
  // version when it was sent), when it changed, at most every heartbeat period. Not
  // acknowledged: an older one only makes the promoted head issue more again.
  kCoordinatorState = 8,
};
const char* replicationKindName(ReplicationKind kind);

struct ReplicationMessage {
  ReplicationKind kind = ReplicationKind::kHello;
  std::uint64_t term = 0;         // the sender's head incarnation (a standby: the one it follows)
  std::uint64_t version = 0;      // see the kinds above
  std::uint64_t run_samples = 0;  // samples behind the model at `version` (lr schedules)
  std::uint64_t samples = 0;      // kUpdate: samples behind this delta
  std::uint64_t tau = 0;          // kUpdate: its staleness at the primary
  float weight = 0;               // kUpdate: the merge weight the primary used
  double mean_samples = 0;        // the sample weighting's running mean after this version
  std::uint64_t param_count = 0;  // elements of `tensor`
  kernels::OptimizerSnapshot optimizer;  // kSnapshot: the outer optimizer's state
  std::vector<float> tensor;             // kUpdate: the dense delta; kSnapshot: the model
  std::string text;  // kSnapshot: the primary's role (all | coordinator); kRefused: why;
                     // kCoordinatorState: the state
};

// Frames of one message (the ROUTER's routing id not included).
std::vector<zmq::message_t> encodeReplication(const ReplicationMessage& m);
// The same for a kUpdate whose delta is `delta` (seen in place in the group's message)
// rather than m.tensor: the delta is copied once, straight into its frame.
std::vector<zmq::message_t> encodeReplication(const ReplicationMessage& m, const TensorView& delta);
// The message, or InvalidArgument naming what is wrong (bad magic or format, unknown
// kind, a frame missing, truncated or of the wrong size).
// With in_place, a kUpdate's delta is not copied into m.tensor (left empty) but seen in
// its frame through *in_place, valid while `frames` live (a frame zmq left unaligned for
// floats is copied: *in_place empty, m.tensor filled).
Result<ReplicationMessage> decodeReplication(const std::vector<zmq::message_t>& frames,
                                             TensorView* in_place = nullptr);

}  // namespace groupsgd::centralps
