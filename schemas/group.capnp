# Messages served by a group parameter server: member pulls and pushes, and the
# coordinator's configuration and flush requests.
@0xb740cf0e8a56a5ab;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("groupsgd::proto");

# Worker asks for the current group replica (no tensors). Also used to (re)join.
struct Pull {}

# Worker's gradient for header.step: tensor 0, paramCount elements in any encoding (dense
# and over the part size: sent in parts, docs/protocol.md "Parts").
# optimizer.placement workers: a second tensor, when the last StepReply asked for it
# (attachParameters), holds the member's parameters as they are at this step's start.
struct Push {
  batchSize @0 :UInt32;   # samples behind this gradient (its averaging weight)
  loss @1 :Float32;       # mean training loss of the batch
  computeMs @2 :Float32;  # time spent computing it (incl. emulated device time)
  skipped @3 :Bool;       # the member skipped this step (its gradient was not finite): it
                          # counts at the barrier with batchSize 0 and a zero tensor, no weight
  # The last bufferCount values of the tensor are not gradient but the member's current
  # buffers (batch-norm running statistics, groupsgd.torch sync_buffers): the group PS
  # sets the replica's range to their batch-weighted mean (placement server) instead of
  # stepping it, and leaves the range out of the gradient norm bound. Every push to a
  # group PS states the same count (0 = none: the C++ trainers).
  bufferCount @4 :UInt64;
}

# Flow control of a push sent in parts (docs/protocol.md, "Flow control"): the member
# may send the parts with index < `parts`. A member sends its first parts up to its
# window unasked; the rest only once the group PS admitted the push within its memory
# budget. The push's answer is still the StepReply (or an error).
struct PushCredit {
  parts @0 :UInt32;  # parts of this push the member may have sent in all
}

# What a member must do after this reply.
enum Directive {
  continue @0;  # keep training in this group
  reassign @1;  # your membership here has ended: register again with your worker id
  stop @2;      # you were drained: send Leave and exit
}

# What a StepReply's first tensor holds.
enum ReplyContent {
  replica @0;       # the group's parameters: load them (a Pull, placement server, or a
                    # member resynchronised: late, joining; its optimizer state restarts)
  meanGradient @1;  # placement workers, a completed step: the group's batch-weighted mean
                    # gradient, for the member's own optimizer step. A second tensor, when
                    # present, is a correction the member adds to its parameters first.
}

# Answer to Pull and Push: the replica for header.step (one float32 tensor), or with
# optimizer.placement workers the step's mean gradient (content).
# Sent for a Push only when that step completed (the barrier released).
struct StepReply {
  accepted @0 :Bool;        # Push only: false when the gradient was dropped (late, moved)
  reason @1 :Text;          # why it was dropped ("" when accepted)
  waitMs @2 :Float32;       # Push only: how long the gradient waited at the barrier
  batchSize @3 :UInt32;     # batch to use from the next step on (0 = unchanged)
  directive @4 :Directive;  # what to do next
  creditBytes @5 :UInt64;   # flow control: bytes of the next push (in parts) the member
                            # may send at once, room already reserved (0 = the window)
  content @6 :ReplyContent;   # what the first tensor is
  attachParameters @7 :Bool;  # workers placement: attach your parameters to the next push
  resetOptimizer @8 :Bool;    # workers placement: clear your optimizer's state before this
                              # step (a member joined or rejoined: all restart together)
}

# One member of a group as configured by the coordinator.
struct Member {
  workerId @0 :UInt64;     # worker id from its Assignment
  batchSize @1 :UInt32;    # batch it should use (the pushed batch is the averaging weight)
  epoch @2 :UInt64;        # epoch of its latest assignment; older pushes are refused
  leaving @3 :Directive;   # continue = member; reassign / stop = its next gradient is its
                           # last here (included in the step), then it is told so and removed
  publicKey @4 :Text;      # Z85 CURVE key it registered with; its pushes and pulls must
                           # come over a connection authenticated with it ("" = no CURVE)
}

# Coordinator -> group PS: who is in the group from header.epoch on. Answered by Ack.
struct GroupConfig {
  groupId @0 :UInt32;          # this group's id
  members @1 :List(Member);    # the full member list (replaces the previous one)
  exchangePeriod @2 :UInt32;   # K
  stepDeadlineMs @3 :UInt32;   # a step closes this long after its first push at the latest
                               # (0 = keep the group PS's current deadline)
  flush @4 :Bool;              # send the pending delta to the central PS now (regroups)
  stepCutoff @5 :Float32;      # > 0: a step with all but floor(members x stepCutoffLateFraction)
                               # pushes in closes at its release + max(this x the median
                               # release-to-quorum time, median + 4 MAD); 0: off
  stepCutoffLateFraction @6 :Float32;
  lrSchedule @7 :LrSchedule;   # the group optimizer's learning rate by the run's samples
                               # applied (baseLr 0: keep the lr the group PS started with)
}

enum LrScheduleKind {
  constant @0;
  warmupLinear @1;
  cosine @2;
  step @3;
}

# The group optimizer's learning-rate schedule (docs/config.md, "Learning-rate schedules").
struct LrSchedule {
  kind @0 :LrScheduleKind;
  baseLr @1 :Float32;           # optimizer.lr (live: `set` re-sends it)
  warmupSamples @2 :UInt64;     # linear warm-up from 0 over these samples
  decayEndSamples @3 :UInt64;   # warmupLinear, cosine: min_lr from here on
  minLr @4 :Float32;
  stepSamples @5 :UInt64;       # step: lr x stepGamma^floor(samples / stepSamples)
  stepGamma @6 :Float32;
}

# Coordinator -> group PS: send the pending delta to the central PS now and answer
# with GroupStats once the central PS has answered (or refused).
struct Flush {}

# Anyone -> group PS: report counters without flushing.
struct GroupStatsQuery {}

# Group PS counters (answer to Flush and GroupStatsQuery).
struct GroupStats {
  groupId @0 :UInt32;
  step @1 :UInt64;             # group steps completed
  samplesReceived @2 :UInt64;  # samples in gradients accepted into a step
  samplesDropped @3 :UInt64;   # samples in gradients dropped (late, refused by central)
  samplesPending @4 :UInt64;   # samples applied to the replica but not yet sent to central
  samplesInFlight @5 :UInt64;  # samples in a delta the central PS has not answered yet
  lateGradients @6 :UInt64;    # gradients that arrived after their step closed
  badMessages @7 :UInt64;      # messages refused as malformed / wrong size / non-finite
  exchanges @8 :UInt64;        # deltas the central PS applied
  refusedExchanges @9 :UInt64; # deltas the central PS refused
  lastLoss @10 :Float32;       # batch-weighted mean loss of the last completed step
  members @11 :UInt32;         # configured members
  acknowledged @12 :List(MemberSamples);  # per worker: samples of acknowledged pushes
  identityRefused @13 :UInt64; # requests refused: sent under another worker's id, or a
                               # coordinator request from a key that is not the daemons'
  quarantined @14 :List(UInt64);  # workers quarantined here for repeated bad updates
  replayedPushes @15 :UInt64;     # pushes refused as replays (a step already pushed)
  quarantineRefusals @16 :UInt64; # messages refused because their sender is quarantined
  badParts @17 :UInt64;        # parts of a push refused (missing, repeated, out of range,
                               # oversize, over the window) or arriving for no open push
  pushesWaited @18 :UInt64;    # pushes in parts that waited for room in the memory budget
  stepsCut @19 :UInt64;        # steps the cutoff closed without some members (their pushes late)
  learningRate @20 :Float32;   # the group optimizer's lr at its last step (the schedule's; since
                               # a GroupConfig, the schedule's at runSamples)
  runSamples @21 :UInt64;      # the run's samples applied as this group PS counts them: the
                               # central total of its last answer + its own since (the
                               # schedule's position)
}

# Samples of one worker's pushes that this group acknowledged (accepted or counted dropped).
struct MemberSamples {
  workerId @0 :UInt64;
  samples @1 :UInt64;
}
