# Worker <-> coordinator messages: registration, assignment, liveness, leaving.
@0x850aeb8bf13cc38c;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("groupsgd::proto");

# What a connecting process is.
enum Role {
  trainer @0;    # computes gradients for a group
  evaluator @1;  # reads the central model and reports test accuracy
  tool @2;       # a diagnostic client (tests, groupsgdctl): gets endpoints, trains nothing
  node @3;       # a node daemon (groupsgdd --role node) offering the group PSes it hosts
}

# First message of every worker process (header.senderId = 0).
struct Register {
  role @0 :Role;        # what the process will do
  host @1 :Text;        # hostname, for operators
  pid @2 :UInt32;       # process id, for operators
  name @3 :Text;        # optional operator-chosen name ("" = none)
  workerId @4 :UInt64;  # 0 = a new worker; else the id it has: fetch its current assignment
  endpoints @5 :List(Text);  # node only: endpoints of the group PSes it hosts (bound, idle)
  # A model the daemon does not know (daemon model "external"; groupsgd.torch): trainers
  # and evaluators state the length of their flat parameter vector and a fingerprint of
  # its layout (names, shapes, dtypes). A new registration (workerId 0) also carries the
  # initial parameters as tensor 0: the daemon's central PS starts from the first one.
  paramCount @6 :UInt64;       # 0 = not stated (the built-in models)
  modelFingerprint @7 :Text;   # "" = not stated
  # The job to join, by name (a daemon hosting several jobs: docs/jobs.md). "" = the only
  # job running; refused when several run.
  job @8 :Text;
  # A node daemon registering at a multi-job daemon's front: the group PS slots it offers
  # to the daemon's jobs (0 = not such a node; a job's coordinator ignores it).
  groupSlots @9 :UInt32;
  # With modelFingerprint: the layout it hashes, one "name:shape:dtype" line per parameter
  # (shape as 8x784), so a refusal can name the first parameter that differs. "" = not
  # stated (the refusal then gives the two fingerprints only).
  modelLayout @10 :Text;
  # A node daemon hosting a central shard (node_central_shard, docs/shards.md): what it
  # serves, for a head that gathers shards 1..S-1 from node daemons (index 0 = none).
  centralShard @11 :CentralShardOffer;
}

# The shard a node daemon serves and the cut it computed it from: a head takes it only
# when it is this head's shard `index` (same count, range, model and seed).
struct CentralShardOffer {
  index @0 :UInt32;     # K, 1..S-1 (0 = no shard)
  count @1 :UInt32;     # S, the central_shards it was cut for
  begin @2 :UInt64;     # its range of the flat parameter vector, [begin, end)
  end @3 :UInt64;
  endpoint @4 :Text;    # where it listens
  model @5 :Text;       # model kind ("mlp", ...)
  seed @6 :UInt64;      # the seed of its initial slice
}

# A multi-job daemon's front (its `listen` endpoint) answers Register with this: the job's
# own coordinator, where the worker sends the same Register again and talks from then on,
# with header.jobId = jobId.
struct JobRedirect {
  job @0 :Text;          # the job's name
  jobId @1 :UInt64;      # its id: header.jobId of every later message
  coordinator @2 :Text;  # the job's coordinator endpoint
}

# Coordinator's answer to Register; also sent again after a regroup (new epoch).
struct Assignment {
  workerId @0 :UInt64;        # id to put in header.senderId from now on
  groupId @1 :UInt32;         # the group this worker trains in
  groupEndpoint @2 :Text;     # ZeroMQ endpoint of that group's PS
  centralEndpoint @3 :Text;   # ZeroMQ endpoint of the central PS (evaluators fetch there)
  batchSize @4 :UInt32;       # samples per step for this worker
  exchangePeriod @5 :UInt32;  # K: group steps between exchanges with the central PS
                              # (informational: the configured K; in adaptive mode a
                              # group's own K may differ)
  shardIndex @6 :UInt32;      # this worker's shard of the training set
  shardCount @7 :UInt32;      # number of shards
  model @8 :Text;             # model kind: "mlp" | "softmax" | "cnn" | "external" (a model
                              # the daemon learnt from its workers: Register.paramCount)
  paramCount @9 :UInt64;      # length of the flat parameter vector
  seed @10 :UInt64;           # seed for data shuffling
  heartbeatMs @11 :UInt32;    # how often to send Heartbeat
  compression @12 :Text;      # how to encode gradients: dense | fp16 | sign | topk:RATIO
  groupServerKey @13 :Text;   # CURVE: public key of the node daemon serving that group PS
                              # ("" = the head's key, the one the worker was configured with)
  nodePool @14 :Bool;         # a multi-job daemon's front took this node daemon into its pool:
                              # its jobs come with the heartbeat replies (placements)
  optimizerPlacement @15 :OptimizerPlacement;  # who steps the inner optimizer (optimizer.placement)
  dataRanges @16 :Bool;       # data_allocation ranges: ignore the shard, claim sample ranges
                              # with DataClaim (docs/protocol.md, "Sample ranges")
}

# Where a group's optimizer steps (daemon key optimizer.placement, docs/protocol.md,
# "Optimizer on the workers").
enum OptimizerPlacement {
  server @0;   # the group PS steps its optimizer and answers pushes with the replica
  workers @1;  # the group PS answers pushes with the group's mean gradient; every member
               # steps its own optimizer with it (a trainer without one is refused)
}

# Periodic liveness + statistics (header.senderId = worker id, header.epoch = its epoch).
struct Heartbeat {
  samplesTrained @0 :UInt64;   # samples in gradients this worker computed and pushed so far
  steps @1 :UInt64;            # steps pushed so far
  lastLoss @2 :Float32;        # training loss of the last batch
  computeMs @3 :Float32;       # mean compute time per step since the last heartbeat
  commMs @4 :Float32;          # mean push round trip per step minus its barrier wait
  testAccuracy @5 :Float32;    # evaluator only: last measured test accuracy (-1 = none)
  evaluatedVersion @6 :UInt64; # evaluator only: central version that accuracy belongs to
  batchSize @7 :UInt32;        # batch size in use
  waitMs @8 :Float32;          # mean time per step its gradient waited at the barrier
  recentSteps @9 :List(StepTiming);  # the steps since the last heartbeat (at most 32, newest
                                     # last); empty from a trainer that reports only means
  speedChanged @10 :Bool;      # sent early: the first steps, or its step times shifted
  groupSlots @11 :UInt32;      # a pooled node daemon, to the front: its slots (0 = not one)
  testLoss @12 :Float32 = -1;  # evaluator only: validation loss of evaluatedVersion (-1 = none)
}

# One step of a trainer, from its own timers.
struct StepTiming {
  step @0 :UInt64;       # the trainer's step count after this step (its whole life)
  batch @1 :UInt32;      # samples in it
  computeMs @2 :Float32; # computing the gradient (incl. emulated device time)
  commMs @3 :Float32;    # push round trip minus the barrier wait (incl. a slow link)
  waitMs @4 :Float32;    # its gradient waited this long at the barrier
}

# Coordinator's answer to Heartbeat.
struct HeartbeatReply {
  stop @0 :Bool;        # finish the current step, send Leave, exit
  reregister @1 :Bool;  # the coordinator does not know this worker/epoch: register again
  placements @2 :List(NodePlacement);  # a pooled node daemon: the jobs it serves group PSes for
  measureNow @3 :Bool;  # evaluators: the run is over and waits for its final reading: fetch
                        # and measure the newest central model and report it at once, without
                        # waiting out the evaluation interval (older evaluators ignore it)
  compression @4 :Text; # trainers, compress_gradients auto: encode gradients so from the next
                        # push on (its group's choice; "" = as assigned)
}

# A multi-job daemon's front to a node daemon of its pool: serve `slots` group PSes for
# this job (register at its coordinator as a node, as for a single run).
struct NodePlacement {
  job @0 :Text;          # the job's name
  jobId @1 :UInt64;      # header.jobId of its messages
  coordinator @2 :Text;  # the job's coordinator endpoint
  slots @3 :UInt32;      # group PSes to offer it
  settings @4 :Text;     # JSON: the job's group PS options, in config-file form
}

# Last message of a worker that stops on its own or was told to stop.
struct Leave {
  samplesTrained @0 :UInt64;  # final count, same meaning as in Heartbeat
  steps @1 :UInt64;           # final count of steps pushed
  samplesUnconfirmed @2 :UInt64;  # samples of pushes that got no positive answer (none in
                                  # time, or refused): not in samplesTrained, though a group
                                  # may have counted them (the coordinator reconciles)
}

# data_allocation ranges (docs/protocol.md, "Sample ranges"): positions [begin, end) of
# epoch `epoch`'s permutation of the training set (every process computes it from the
# run seed and the epoch; only positions travel).
struct SampleRange {
  epoch @0 :UInt64;
  begin @1 :UInt64;
  end @2 :UInt64;
}

# Trainer -> coordinator: acknowledges ranges it trained and asks for the next one.
struct DataClaim {
  datasetSize @0 :UInt64;          # the training set size this trainer samples from
  acks @1 :List(SampleRange);      # trained (pushed and answered); each starts where a held
                                   # range starts and ends at or before its end
  done @2 :Bool;                   # the trainer stops: every range it holds beyond acks goes
                                   # back untrained, and none is granted
}

# Coordinator -> trainer: the range to train next (none when done).
struct DataGrant {
  ranges @0 :List(SampleRange);
}
