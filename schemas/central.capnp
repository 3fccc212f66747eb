# Messages served by the central parameter server.
@0xa722e0fe19490a66;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("groupsgd::proto");

# Group PS -> central: replica - base, one tensor of paramCount elements in any encoding
# (compress_deltas; dense and over the part size: sent in parts).
# header.senderId = group id; header.modelVersion = central version the base came from.
struct DeltaPush {
  groupId @0 :UInt32;   # group that produced the delta
  samples @1 :UInt64;   # samples trained into this delta
  steps @2 :UInt32;     # group steps in this delta
  # The group's exchange number (docs/shards.md, "Consistent cut"): one per exchange, the
  # same to every shard, counted up from the group PS's start time in microseconds so a
  # restarted group PS goes on above its predecessor. 0: not numbered (not recorded).
  exchangeSeq @3 :UInt64;
}

# The newest exchange a central PS has taken from one group (a consistent cut's mark).
struct ExchangeMark {
  groupId @0 :UInt32;
  seq @1 :UInt64;
}

# Anyone -> central: send the current model (no tensors).
struct Fetch {
  evaluation @0 :Bool;  # an evaluator's: with keep_best the central PS keeps what it served
}

# Central -> sender: the current model (one float32 tensor), header.modelVersion = its
# version. For a DeltaPush it also says whether the delta was applied.
struct ModelReply {
  applied @0 :Bool;      # DeltaPush only: the delta was merged
  reason @1 :Text;       # why not ("" when applied or for a Fetch)
  staleness @2 :UInt64;  # tau = current version - base version at arrival
  weight @3 :Float32;    # the merge weight used: f(tau) x the sample weighting (0 for a
                         # Fetch or a refused delta)
  runSamples @4 :UInt64; # samples behind every delta merged in this run, those before a
                         # checkpoint resume included (the lr schedules' position)
}

# Anyone -> central: counters, answered with CentralStats.
struct CentralStatsQuery {}

# Coordinator -> central: write a checkpoint of the current model now; answered with
# CheckpointDone once the file is durable (or the write failed).
struct CheckpointRequest {
  # best (keep_best): instead, write the model of version `bestVersion` the central PS
  # served to an evaluator to `bestPath` (same file format); refused if it holds none.
  best @0 :Bool;
  bestVersion @1 :UInt64;
  bestPath @2 :Text;
  # A consistent cut across central shards (docs/shards.md): 1 freeze (queue deltas,
  # answer with the marks), 2 commit (take queued deltas up to `cutMarks`, snapshot,
  # unfreeze, answer once the cut file is durable), 3 release (unfreeze, drop the cut),
  # 4 restore (a restarted head: load this shard's file of cut `cutNumber`, take `cutMarks`).
  cutPhase @3 :UInt8;
  cutMarks @4 :List(ExchangeMark);  # commit: the marks to reach; restore: the cut's marks
  cutNumber @5 :UInt64;             # commit, restore: the cut's number (file cut-N.gsgd)
  cutKeep @6 :UInt64;               # commit: the cut the manifest names now (its file kept)
}

struct CheckpointDone {
  ok @0 :Bool;            # the checkpoint is on disk (fsynced, renamed, directory fsynced)
  error @1 :Text;         # why not, when ok is false
  version @2 :UInt64;     # model version written
  path @3 :Text;          # the file
  bytes @4 :UInt64;       # file size
  durationMs @5 :Float32; # time the write took
  cutMarks @6 :List(ExchangeMark);  # a cut's freeze or commit: the marks at that moment
  pauseMs @7 :Float32;    # a cut's commit: how long deltas were held (freeze to unfreeze)
  runSamples @8 :UInt64;  # a cut's commit: the run's samples at the cut (ModelReply's)
  newestCut @9 :UInt64;   # a cut's freeze: the newest cut this shard wrote or resumed (0 = none)
}

struct CentralStats {
  version @0 :UInt64;          # central model version (deltas applied)
  updatesApplied @1 :UInt64;   # deltas merged
  updatesRefused @2 :UInt64;   # deltas refused (staleness bound, bad values)
  samplesApplied @3 :UInt64;   # samples behind merged deltas
  samplesRefused @4 :UInt64;   # samples behind refused deltas
  badMessages @5 :UInt64;      # malformed messages
  maxStaleness @6 :UInt64;     # largest tau seen in a merged delta
  meanStaleness @7 :Float32;   # mean tau over merged deltas
  checkpointVersion @8 :UInt64;  # version of the newest durable checkpoint (0 = none)
  checkpointFailures @9 :UInt64; # checkpoint writes that failed
  # Standby head (replication_listen; docs/reliability.md): all 0/false without one.
  standbyConfigured @10 :Bool;     # this head accepts a standby
  standbyAttached @11 :Bool;       # one follows it now
  standbyAckedVersion @12 :UInt64; # newest version the standby acknowledged
  standbyLosses @13 :UInt64;       # times a standby was lost (silent past the bound)
  standbyMaxLag @14 :UInt64;       # standby_async: most versions shipped but not acknowledged
  standbyAckWaitMs @15 :Float32;   # synchronous: mean wait for an acknowledgement per update
  standbyAlone @16 :Bool;          # committing alone (standby_alone_ms passed)
  uncommittedDeltas @17 :UInt64;   # deltas refused for want of a standby
}
