# The device arbiter's messages (docs/arbiter.md). One frame per message, no tensors: a
# worker asks for the shared device it computes on before each step's compute and gives
# it back after. Separate from the envelope because an arbiter serves several jobs (and
# several daemons) at once and knows nothing of their models.
@0xedd4131d2f5dd436;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("groupsgd::proto");

# worker -> arbiter: "I am ready to compute step `step` on `device`".
struct Acquire {
  step @0 :UInt64;  # the group step the compute belongs to (a job's round)
  handoff @1 :Bool; # the worker takes the device's lock file while it computes, so under
                    # an exclusive policy it may be granted ahead of the holder's release
                    # (answered grantLocked) and the holder's unlock hands the device over
}

# worker -> arbiter: the compute is done; no answer is sent.
struct Release {
  heldMs @0 :Float32;  # how long the worker held the device (for the arbiter's stats)
}

# arbiter -> worker: a refusal (malformed request, wrong protocol version).
struct ArbiterError {
  code @0 :UInt16;   # groupsgd::Code number
  message @1 :Text;  # one line for a human
}

# arbiter -> anyone: counters since the arbiter started.
struct ArbiterStats {
  policy @0 :Text;                # none | fifo | crossover
  grants @1 :UInt64;              # leases handed out
  expired @2 :UInt64;             # leases taken back after leaseTimeoutMs
  strayReleases @3 :UInt64;       # releases of a lease the sender did not hold
  jobs @4 :List(JobStats);        # per job, by job id
}

struct JobStats {
  jobId @0 :UInt64;     # the job
  grants @1 :UInt64;    # leases its workers got
  waitMs @2 :Float64;   # summed time its workers waited for a grant
  heldMs @3 :Float64;   # summed time its workers held a device (their own report)
}

struct ArbiterMessage {
  protocolVersion @0 :UInt16;  # must equal the receiver's (currently 1)
  jobId @1 :UInt64;            # the sender's job (its --job-id); 0 for tools
  workerId @2 :UInt64;         # the sender's worker id in that job; 0 for tools
  device @3 :Text;             # the shared device's name (acquire, release)
  seq @4 :UInt64;              # request number chosen by the sender; answers echo it
  body :union {
    acquire @5 :Acquire;            # worker -> arbiter
    release @6 :Release;            # worker -> arbiter
    grant @7 :Void;                 # arbiter -> worker: the device is yours
    waiting @8 :Void;               # arbiter -> worker: queued; sent every keepalive period
    error @9 :ArbiterError;         # arbiter -> sender
    statsQuery @10 :Void;           # anyone -> arbiter
    stats @11 :ArbiterStats;        # arbiter -> sender
    grantLocked @12 :Void;          # arbiter -> worker (an Acquire with handoff, policy
                                    # fifo or crossover): the device is yours once you
                                    # hold its lock; the holder before you may still be
                                    # computing and unlocks it when done
  }
}
