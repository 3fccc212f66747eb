# Messages served by the central parameter server.
@0xa722e0fe19490a66;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("groupsgd::proto");

# Group PS -> central: replica - base, one float32 tensor of paramCount elements.
# header.senderId = group id; header.modelVersion = central version the base came from.
struct DeltaPush {
  groupId @0 :UInt32;   # group that produced the delta
  samples @1 :UInt64;   # samples trained into this delta
  steps @2 :UInt32;     # group steps in this delta
}

# Anyone -> central: send the current model (no tensors).
struct Fetch {}

# Central -> sender: the current model (one float32 tensor), header.modelVersion = its
# version. For a DeltaPush it also says whether the delta was applied.
struct ModelReply {
  applied @0 :Bool;      # DeltaPush only: the delta was merged
  reason @1 :Text;       # why not ("" when applied or for a Fetch)
  staleness @2 :UInt64;  # tau = current version - base version at arrival
  weight @3 :Float32;    # the staleness weight f(tau) used
}

# Anyone -> central: counters, answered with CentralStats.
struct CentralStatsQuery {}

struct CentralStats {
  version @0 :UInt64;          # central model version (deltas applied)
  updatesApplied @1 :UInt64;   # deltas merged
  updatesRefused @2 :UInt64;   # deltas refused (staleness bound, bad values)
  samplesApplied @3 :UInt64;   # samples behind merged deltas
  samplesRefused @4 :UInt64;   # samples behind refused deltas
  badMessages @5 :UInt64;      # malformed messages
  maxStaleness @6 :UInt64;     # largest tau seen in a merged delta
  meanStaleness @7 :Float32;   # mean tau over merged deltas
}
