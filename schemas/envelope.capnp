# The header frame of every groupsgd message. A message is this header, serialised as
# one ZeroMQ frame, followed by the raw tensor frames that `tensors` describes.
@0xe74247b7062a4994;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("groupsgd::proto");
using W = import "worker.capnp";
using G = import "group.capnp";
using C = import "central.capnp";

enum DType {
  float32 @0;  # 4 bytes per element, little-endian IEEE 754; the only dtype accepted
  float16 @1;  # reserved: refused on receipt (half precision travels as encoding fp16)
}

# How a tensor's elements are laid out (docs/kernels.md gives each layout byte by byte).
enum Encoding {
  dense @0;  # every element, in order, as dtype
  fp16 @1;   # every element as IEEE half precision (2 bytes, little-endian)
  topk @2;   # u32 count k, k u32 indices (strictly increasing), k f32 values; absent = 0
  sign @3;   # f32 scale >= 0, then one bit per element, LSB first (1 = -scale, 0 = +scale);
             # padding bits of the last byte are 0
}

# Describes one tensor; its bytes follow as ceil(byteLength / chunkBytes) frames
# (at least one), each chunkBytes long except the last.
struct TensorInfo {
  dtype @0 :DType;          # element type (float32)
  encoding @1 :Encoding;    # how elements are laid out
  elements @2 :UInt64;      # logical element count (float32 values after decoding)
  byteLength @3 :UInt64;    # total bytes over all chunk frames
  chunkBytes @4 :UInt32;    # bytes per chunk frame (the last may be shorter)
}

# A refusal: what went wrong, for a human and for code.
struct ErrorReply {
  code @0 :UInt16;     # groupsgd::Code number (1 invalid argument, 5 too large, ...)
  message @1 :Text;    # one line saying what was wrong
}

# One part of a tensor that travels as a sequence of part messages (docs/protocol.md,
# "Parts"): every part repeats the header (same body), carries one dense tensor slice of
# `tensors[0].elements` elements and says where the slice goes. Parts arrive in order.
struct PartInfo {
  index @0 :UInt32;          # 0 .. count-1, in sending order
  count @1 :UInt32;          # parts of the whole tensor (2 .. 512)
  offset @2 :UInt64;         # first element of this slice in the whole tensor
  totalElements @3 :UInt64;  # elements of the whole tensor
}

struct Header {
  protocolVersion @0 :UInt16;    # must equal the receiver's (currently 2)
  jobId @1 :UInt64;              # the training job; a receiver refuses other jobs
  senderId @2 :UInt64;           # worker id, group id (group PS -> anyone) or 0 (coordinator,
                                 # central PS, a worker not registered yet)
  modelVersion @3 :UInt64;       # model version carried or based on
  step @4 :UInt64;               # group step this message belongs to
  epoch @5 :UInt64;              # membership epoch the sender is in (high 32 bits: the
                                 # head incarnation that issued it)
  tensors @6 :List(TensorInfo);  # tensor frames that follow, in order
  # The message kind is the body's discriminant.
  body :union {
    ack @7 :Void;                            # generic success
    error @8 :ErrorReply;                    # refusal
    register @9 :W.Register;                 # worker -> coordinator
    assignment @10 :W.Assignment;            # coordinator -> worker
    heartbeat @11 :W.Heartbeat;              # worker -> coordinator
    heartbeatReply @12 :W.HeartbeatReply;    # coordinator -> worker
    leave @13 :W.Leave;                      # worker -> coordinator
    pull @14 :G.Pull;                        # worker -> group PS
    push @15 :G.Push;                        # worker -> group PS (+ gradient)
    stepReply @16 :G.StepReply;              # group PS -> worker (+ replica)
    groupConfig @17 :G.GroupConfig;          # coordinator -> group PS
    flush @18 :G.Flush;                      # coordinator -> group PS
    groupStatsQuery @19 :G.GroupStatsQuery;  # anyone -> group PS
    groupStats @20 :G.GroupStats;            # group PS -> sender (of a flush or query)
    deltaPush @21 :C.DeltaPush;              # group PS -> central (+ delta)
    fetch @22 :C.Fetch;                      # anyone -> central
    modelReply @23 :C.ModelReply;            # central -> sender (+ model)
    centralStatsQuery @24 :C.CentralStatsQuery; # anyone -> central
    centralStats @25 :C.CentralStats;        # central -> sender
    checkpointRequest @26 :C.CheckpointRequest;  # coordinator -> central
    checkpointDone @27 :C.CheckpointDone;        # central -> coordinator
    pushCredit @29 :G.PushCredit;            # group PS -> worker: send more parts
    jobRedirect @30 :W.JobRedirect;          # job front -> worker: register at your job
    dataClaim @31 :W.DataClaim;              # trainer -> coordinator (data_allocation ranges)
    dataGrant @32 :W.DataGrant;              # coordinator -> trainer
  }
  part @28 :PartInfo;  # present (hasPart()): this message is one part of a tensor sent in parts
}
