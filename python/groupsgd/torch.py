"""Train a PyTorch nn.Module with groupsgd (docs/pytorch.md).

    w = groupsgd.torch.Worker(model, coordinator="tcp://10.0.0.1:5555", name="w3")
    for x, y in groupsgd.torch.tensor_batches(w, train_x, train_y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        w.step(loss)          # pushes the gradients, loads the group's new replica
    w.close()

The parameters live in one flat float32 buffer that each ``param.data`` views, and the
gradients in a second one that each ``param.grad`` views; the C++ client sends the
gradient buffer and writes the replica into the parameter buffer directly. By default the
optimizer runs at the group parameter server and the script has no optimizer of its own;
with the daemon's ``optimizer.placement`` = ``workers`` the script's own torch optimizer
steps on the group's mean gradient instead (``Worker(model, optimizer=opt)``).

Floating-point buffers (batch-norm running statistics) follow the parameters in the flat
layout (``sync_buffers=True``, the default): each push carries the worker's current
values, the group sets them to the members' batch-weighted mean at every step, and they
travel to the central PS and into checkpoints with the parameters. ``sync_buffers=False``
keeps them local to each process, as before (docs/pytorch.md, "Buffers").
"""

import contextlib
import ctypes
import hashlib
import math
import os
import struct
import time
import weakref
import zlib

import numpy as np
import torch

from . import _core

__all__ = [
    "Worker",
    "Evaluator",
    "ShardBatchSampler",
    "tensor_batches",
    "accuracy",
    "layout",
    "fingerprint",
    "layout_text",
    "save_model_file",
    "load_checkpoint",
    "synced_buffers",
    "recalibrate_batch_norm",
]


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def synced_buffers(model):
    """(name, module, key) of every buffer groupsgd averages and checkpoints with
    sync_buffers: the persistent floating-point ones (batch-norm running_mean and
    running_var; not num_batches_tracked, an integer, nor a buffer registered with
    persistent=False, e.g. a constant mask), in named_buffers() order, each once."""
    out, seen = [], set()
    for prefix, module in model.named_modules():
        for key, b in module._buffers.items():
            if (b is None or not b.is_floating_point() or id(b) in seen
                    or key in module._non_persistent_buffers_set):
                continue
            seen.add(id(b))
            out.append((f"{prefix}.{key}" if prefix else key, module, key))
    return out


def layout(model, buffers=True):
    """(name, shape, dtype) of every parameter, in the order they are flattened; then,
    with `buffers`, of every synced buffer (synced_buffers), its dtype marked
    "<dtype> buffer"."""
    out = [(n, tuple(p.shape), _dtype_name(p.dtype)) for n, p in model.named_parameters()]
    if buffers:
        for n, module, key in synced_buffers(model):
            b = module._buffers[key]
            out.append((n, tuple(b.shape), _dtype_name(b.dtype) + " buffer"))
    return out


def layout_text(model, buffers=True):
    """The layout as text, one "name:shape:dtype" line each (shape as 8x784; a buffer's
    dtype as "float32 buffer"): what fingerprint() hashes, sent with the registration so
    that the daemon's refusal of a mismatched model names the first entry that differs."""
    return "\n".join(f"{n}:{'x'.join(map(str, s))}:{d}" for n, s, d in layout(model, buffers))


def fingerprint(model, buffers=True):
    """A short hash of the layout; the daemon refuses a worker whose differs (a model
    without floating-point buffers has the same fingerprint either way)."""
    return hashlib.sha256(layout_text(model, buffers).encode()).hexdigest()[:16]


def _session_property(name, doc=None):
    """A read-only property returning self._session.<name>."""
    return property(lambda self: getattr(self._session, name), doc=doc)


def _options(coordinator, name, job_id, compress, curve_secret_key_file, curve_server_key_file,
             timeout_ms, connect_timeout_ms, give_up_s, log_level, extra_args, job=""):
    args = ["--coordinator", coordinator, "--job-id", str(job_id), "--log-level", log_level]
    if job:
        args += ["--job", job]
    if name:
        args += ["--name", name]
    if compress:
        args += ["--compress", compress]
    if curve_secret_key_file or curve_server_key_file:
        args += ["--curve-secret-key-file", str(curve_secret_key_file or ""),
                 "--curve-server-key-file", str(curve_server_key_file or "")]
    if timeout_ms is not None:
        args += ["--timeout-ms", str(timeout_ms)]
    if connect_timeout_ms is not None:
        args += ["--connect-timeout-ms", str(connect_timeout_ms)]
    if give_up_s is not None:
        args += ["--give-up-s", str(give_up_s)]
    return args + list(extra_args)


def save_model_file(model, path, buffers=True):
    """Writes the model's initial parameters (and, with `buffers`, its synced buffers: the
    workers' sync_buffers must be the same) for groupsgdd --external-model-file (the daemon
    then starts from them instead of from the first worker's)."""
    tensors = list(model.parameters())
    if buffers:
        tensors += [module._buffers[key] for _, module, key in synced_buffers(model)]
    flat = np.concatenate([t.detach().cpu().reshape(-1).numpy().astype("<f4") for t in tensors])
    with open(path, "wb") as f:
        f.write(f"groupsgd-model 1 {flat.size} {fingerprint(model, buffers)}\n".encode())
        f.write(flat.tobytes())


def _split_flat(flat, params):
    """Views of `flat` shaped as `params`, in order: the layout of groupsgd's flat vector
    (the model's parameters() order, each flattened row-major)."""
    views, offset = [], 0
    for p in params:
        n = p.numel()
        views.append(flat[offset:offset + n].view_as(p))
        offset += n
    return views


# The daemon's checkpoint file (centralps/src/checkpoint.cc; docs/operations.md,
# "Checkpoints"): a 64-byte little-endian header, then the float32 payload; format 2 adds
# the outer optimizer's state after it (a 24-byte section header, then the state), which
# a model loaded here has no use for.
_CKPT_MAGIC = b"GSGDCKPT"
_CKPT_FORMATS = (1, 2)
_CKPT_STATE_HEADER = 24
_CKPT_HEADER = struct.Struct("<8sIIQQQII Q I I")  # 64 bytes
_CKPT_FLOAT32 = 1


def load_checkpoint(model, path):
    """Loads a groupsgdd checkpoint file (`ckpt-<version>.gsgd` or `best.ckpt` in the
    daemon's checkpoint_dir) into `model`'s parameters and buffers; returns the
    checkpoint's model version.

    The payload is the central model's flat float32 vector, laid out as a Worker lays out
    the model: the parameters (model.parameters() order, each flattened), then, when the
    workers ran with sync_buffers (the default), the synced buffers (synced_buffers(),
    batch-norm running statistics). A checkpoint of the parameters alone (workers with
    sync_buffers=False, a model without floating-point buffers) leaves the buffers as
    they are (re-estimate them, e.g. recalibrate_batch_norm). Checked as the daemon checks
    it: magic, header checksum, format version, header size, dtype, lengths, payload
    checksum (CRC-32) and finite values; a damaged file raises ValueError saying which, a
    count matching neither layout raises ValueError naming the counts. The file holds no
    layout (names, shapes): a model of the same count but another layout is not
    detected. The outer optimizer's state of a format 2 file is not loaded. Values are
    copied in place (a wrapped model stays wrapped) and converted to each tensor's dtype
    and device."""
    path = os.fspath(path)
    params = list(model.parameters())
    buffers = [module._buffers[key] for _, module, key in synced_buffers(model)]
    n_params = sum(p.numel() for p in params)
    n_buffers = sum(b.numel() for b in buffers)
    with open(path, "rb") as f:
        data = f.read()

    def corrupt(why):
        return ValueError(f"{path}: corrupt groupsgd checkpoint: {why}")

    size = _CKPT_HEADER.size
    if len(data) < size:
        raise corrupt(f"truncated: {len(data)} bytes, the header alone is {size}")
    (magic, fmt, header_bytes, version, count, nbytes, dtype, payload_crc, _written_ns,
     _reserved, header_crc) = _CKPT_HEADER.unpack_from(data)
    if magic != _CKPT_MAGIC:
        raise corrupt("bad magic (not a groupsgd checkpoint)")
    if header_crc != zlib.crc32(data[:size - 4]):
        raise corrupt("header checksum mismatch")
    if fmt not in _CKPT_FORMATS:
        raise corrupt(f"unsupported format version {fmt} (this groupsgd reads 1 and 2)")
    if header_bytes != size or dtype != _CKPT_FLOAT32:
        raise corrupt(f"unsupported header size {header_bytes} or dtype {dtype}")
    if nbytes != count * 4:
        raise corrupt(f"byte length {nbytes} does not match {count} float32 values")
    if count == n_params + n_buffers:
        params = params + buffers
    elif count != n_params:
        with_buffers = f" ({n_params + n_buffers} with its buffers)" if n_buffers else ""
        raise ValueError(f"{path}: the checkpoint holds {count} parameters, the model has "
                         f"{n_params}{with_buffers}")
    if len(data) < size + nbytes:
        raise corrupt(f"truncated: {len(data)} bytes, expected {size + nbytes}")
    if fmt == 1 and len(data) > size + nbytes:
        raise corrupt(f"{len(data) - size - nbytes} bytes after the payload")
    if fmt == 2 and len(data) < size + nbytes + _CKPT_STATE_HEADER:
        raise corrupt("truncated: format 2 without its optimizer section")
    payload = memoryview(data)[size:size + nbytes]
    if payload_crc != zlib.crc32(payload):
        raise corrupt("payload checksum mismatch")
    flat = np.frombuffer(payload, dtype="<f4")
    if not np.isfinite(flat).all():
        raise corrupt(f"non-finite parameter at index {int(np.argmin(np.isfinite(flat)))}")
    flat = torch.from_numpy(flat.astype(np.float32))  # a writable copy, native order
    with torch.no_grad():
        for p, view in zip(params, _split_flat(flat, params)):
            p.copy_(view)
    return version


def _loaded_cudart():
    """The CUDA runtime library this process already loaded (torch's), for
    cudaGetLastError; None when there is none to be found."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libcudart.so" in path:
                    return ctypes.CDLL(path)  # the loaded copy: dlopen of its own path
    except OSError:
        pass
    return None


def _page_lock(array, device):
    """Page-locks a numpy array's memory in place on `device` for fast copies to and from
    the GPU (cudaHostRegister), and unlocks it just before the array goes away. Returns
    False, leaving the memory as it was, where that cannot be done safely: a refusal (the
    pages already locked by another buffer, say) leaves an error pending in the runtime
    that torch's next launch check would raise, so it is only tried where that error can
    be cleared, and with both halves of the binding there."""
    try:
        cudart = torch.cuda.cudart()
        if not hasattr(cudart, "cudaHostUnregister"):
            return False
        runtime = _loaded_cudart()
        if runtime is None:
            return False
        with torch.cuda.device(device):
            rc = cudart.cudaHostRegister(array.ctypes.data, array.nbytes, 0)
        if int(rc) != 0:
            runtime.cudaGetLastError()  # consume the refusal's error
            return False
    except Exception:  # no CUDA runtime, an older binding: the memory stays pageable
        return False
    weakref.finalize(array, cudart.cudaHostUnregister, array.ctypes.data)
    return True


class _FlatModel:
    """The model's parameters re-pointed at views of one flat float32 buffer.

    On the CPU the parameters and gradients are views of the host buffers the C++ session
    sends from and writes into: nothing model-sized is copied. On another device they are
    views of one flat device buffer each, and a step makes two copies in all: the gradient
    buffer device -> host and the new replica host -> device. On CUDA both go between the
    device and page-locked host memory (the parameter buffer is allocated pinned, the
    session's gradient buffer is page-locked in place where that is safe).

    With sync_buffers the flat buffers end with the model's synced buffers (synced_buffers):
    the parameter buffer's tail holds the group's values (the replica's), the gradient
    buffer's tail the module's current ones for the push (gather_grads). The module's
    buffers stay tensors of their own, which the forward pass updates, and are set from the
    parameter buffer's tail whenever it changes (load_device)."""

    def __init__(self, model, sync_buffers=True):
        self.module = model
        self.params = list(model.parameters())
        self.names = [n for n, _ in model.named_parameters()]  # same order, same dedup
        if not self.params:
            raise ValueError("the model has no parameters")
        for n, p in model.named_parameters():
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {n} is {p.dtype}; groupsgd trains float32 parameters")
        self.device = self.params[0].device
        if any(p.device != self.device for p in self.params):
            raise ValueError("every parameter must be on the same device")
        self.sizes = [p.numel() for p in self.params]
        self.param_count = sum(self.sizes)
        self.buffers = synced_buffers(model) if sync_buffers else []  # (name, module, key)
        self.buffer_shapes = [tuple(self._buffer(i).shape) for i in range(len(self.buffers))]
        self.buffer_count = sum(math.prod(shape) for shape in self.buffer_shapes)
        self.count = self.param_count + self.buffer_count
        self.on_host = self.device.type == "cpu"
        if self.device.type == "cuda":
            host = torch.empty(self.count, dtype=torch.float32, pin_memory=True)
            self.host = host.numpy()  # the same pinned memory, for the session
        else:
            self.host = np.empty(self.count, dtype=np.float32)
            host = torch.from_numpy(self.host)
        self.host_flat = host
        host_views = self._views(host)
        for p, view in zip(self.params, host_views):
            view.copy_(p.data)  # the initial parameters, for the registration
        with torch.no_grad():
            for i, view in enumerate(self._buffer_views(host)):
                view.copy_(self._buffer(i).reshape(view.shape))  # and buffers
        self.device_flat = None
        if self.on_host:
            self.param_views = host_views
        else:
            self.device_flat = torch.empty(self.count, dtype=torch.float32, device=self.device)
            self.param_views = self._views(self.device_flat)
            for p, view in zip(self.params, self.param_views):
                view.copy_(p.data)
            self.device_flat[self.param_count:].copy_(host[self.param_count:])  # buffers
        # The group's buffer values, where load_buffers reads them (views made once).
        self._param_tail = self._buffer_views(host if self.on_host else self.device_flat)
        self._grad_tail = []  # bind_grads
        for p, view in zip(self.params, self.param_views):
            p.data = view
        self.grad_views = []
        self.grad_pinned = False

    def _views(self, flat):
        return _split_flat(flat, self.params)

    def _buffer(self, i):
        _, module, key = self.buffers[i]
        return module._buffers[key]

    def _buffer_views(self, flat):
        """Views of the tail of a flat buffer (past the parameters), one per synced buffer."""
        views, offset = [], self.param_count
        for shape in self.buffer_shapes:
            n = math.prod(shape)
            views.append(flat[offset:offset + n].view(shape))
            offset += n
        return views

    def _check_buffers(self):
        for i, (name, module, key) in enumerate(self.buffers):
            b = module._buffers.get(key)
            if b is None or tuple(b.shape) != self.buffer_shapes[i]:
                now = "removed" if b is None else f"reshaped to {tuple(b.shape)}"
                raise RuntimeError(
                    f"buffer {name} (shape {self.buffer_shapes[i]}) was {now} after the model "
                    f"was wrapped: groupsgd's flat layout has a place for it of the old shape. "
                    f"Change the model first and wrap it afterwards (gt.Worker(model, ...))")

    def gather_buffers(self):
        """The module's current buffer values into the gradient buffer's tail (the push
        carries them; the group averages them)."""
        if self.buffers:
            with torch.no_grad():
                for (_, module, key), view in zip(self.buffers, self._grad_tail):
                    view.copy_(module._buffers[key])

    def load_buffers(self):
        """The parameter buffer's tail (the group's values) into the module's buffers."""
        if self.buffers:
            with torch.no_grad():
                for (_, module, key), view in zip(self.buffers, self._param_tail):
                    module._buffers[key].copy_(view)

    def take_mean_buffers(self):
        """Optimizer on the workers: the mean gradient's tail is the members' mean buffer
        values; it becomes the group's values in the parameter buffer."""
        if self.buffers:
            flat = self.host_flat if self.on_host else self.device_flat
            with torch.no_grad():
                flat[self.param_count:].copy_(self.grad_flat[self.param_count:])

    def check_attached(self):
        """Raises RuntimeError unless every parameter is still the view of the flat buffer
        made at wrapping: model.to(other device), .half(), .double() or `param.data = ...`
        after wrapping give a parameter storage of its own, which the replica would never
        reach nor its gradient leave (it would silently stop training)."""
        current = list(self.module.named_parameters())
        for i, (name, view) in enumerate(zip(self.names, self.param_views)):
            if i >= len(current) or current[i][1] is not self.params[i]:
                raise RuntimeError(
                    f"parameter {name} (shape {tuple(view.shape)}) is no longer the model's "
                    f"parameter it wrapped (a module or parameter was replaced, or "
                    f"torch.__future__.set_overwrite_module_params_on_conversion(True) made "
                    f"model.to()/.half()/.double() create new ones): the new one is not in "
                    f"groupsgd's flat buffer and would not be trained. Change the model "
                    f"first and wrap it afterwards (gt.Worker(model, ...))")
            data = self.params[i].data
            if (data.data_ptr() == view.data_ptr() and data.dtype == view.dtype
                    and data.device == view.device and data.shape == view.shape):
                continue
            if data.dtype != view.dtype:
                what = f"was cast to {data.dtype}"
            elif data.device != view.device:
                what = f"was moved to {data.device}"
            elif data.shape != view.shape:
                what = f"was reshaped to {tuple(data.shape)}"
            else:
                what = "has storage of its own (param.data was replaced)"
            raise RuntimeError(
                f"parameter {name} (shape {tuple(view.shape)}) {what} after the model was "
                f"wrapped: it is no longer the view of groupsgd's flat {view.dtype} buffer on "
                f"{view.device}, so it would neither send gradients nor receive the replica. "
                f"Move or cast the model first and wrap it afterwards "
                f"(gt.Worker(model.to(device), ...)); to set values, copy in place "
                f"(with torch.no_grad(): param.copy_(value))")
        self._check_buffers()
        if len(current) != len(self.params):
            name, p = current[len(self.params)]
            raise RuntimeError(
                f"parameter {name} (shape {tuple(p.shape)}) was added to the model after it "
                f"was wrapped: it is not in groupsgd's flat buffer and would not be trained. "
                f"Change the model first and wrap it afterwards (gt.Worker(model, ...))")

    def bind_grads(self, grad_np, spare_np=None):
        """Points every param.grad at its view of the flat gradient buffer (zeroed): the
        session's buffer itself on the CPU, a device buffer of the same layout on CUDA.
        `spare_np` (CPU only): a second session buffer; the two then alternate, the one
        just sent being zeroed on a C++ thread while the next gradient goes into the other
        (after_step), so the zeroing is off the step's critical path."""
        self.grad_host = torch.from_numpy(grad_np)  # keeps the session's buffer alive
        self.grad_host.zero_()
        self._grad_sets = None
        self.grad_buffer = 0  # the session buffer the next push sends
        if self.on_host:
            self.grad_flat = self.grad_host
            if spare_np is not None:
                spare = torch.from_numpy(spare_np)
                spare.zero_()
                self._grad_sets = [(flat, self._views(flat), self._buffer_views(flat))
                                   for flat in (self.grad_host, spare)]
        else:
            self.grad_pinned = self.device.type == "cuda" and _page_lock(grad_np, self.device)
            self.grad_flat = torch.zeros(self.count, dtype=torch.float32, device=self.device)
        self.grad_views = self._views(self.grad_flat)
        self._grad_tail = self._buffer_views(self.grad_flat)
        for p, view in zip(self.params, self.grad_views):
            p.grad = view

    def _use_grad_buffer(self, i):
        """Alternating buffers: the next gradient goes into session buffer i."""
        self.grad_buffer = i
        self.grad_flat, self.grad_views, self._grad_tail = self._grad_sets[i]
        self.grad_host = self.grad_flat

    def gather_grads(self):
        """Makes the session's flat gradient buffer hold every parameter's gradient;
        returns False, copying nothing to the host, when a value is not finite (inf/NaN:
        the step is skipped, Worker.step)."""
        for p, view in zip(self.params, self.grad_views):
            g = p.grad
            if g is None:
                view.zero_()  # no gradient (unused or frozen): contributes nothing
            elif g.data_ptr() != view.data_ptr():
                view.copy_(g)  # a script replaced the gradient (e.g. set_to_none): copy it
        self.gather_buffers()
        # One reduction over the flat buffer, on its device (one sync on CUDA, which the
        # host copy below makes anyway): the sum is inf or NaN whenever an element is, and
        # finite elements cannot overflow it short of norms the group PS refuses anyway.
        # (isfinite(x).all() costs 68 ms for 10M floats on one core; the sum 1.7 ms.)
        if not bool(torch.isfinite(self.grad_flat.sum())):
            return False
        if not self.on_host:
            self.grad_host.copy_(self.grad_flat)  # one copy; waits for the backward pass
        return True

    def after_step(self, load=True, zero_later=None):
        """The replica is in the flat parameter buffer (load: copy it to the device): reset
        the gradients for the next. With two gradient buffers, `zero_later(i)` (the
        session's) waits for the zeroing it started last, of the other buffer, and starts
        zeroing buffer i, just sent; the next gradient goes into the other one."""
        if load:
            self.load_device()
        if self._grad_sets is not None and zero_later is not None:
            sent = self.grad_buffer
            zero_later(sent)
            self._use_grad_buffer(1 - sent)
        else:
            self.grad_flat.zero_()
        for p, view in zip(self.params, self.grad_views):
            if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                p.grad = view

    def store_host(self):
        """Copies the parameters from the device to the host buffer the session sends
        (CUDA only: on the CPU they are that buffer)."""
        if not self.on_host:
            with torch.no_grad():
                self.host_flat.copy_(self.device_flat)

    def load_mean_gradient(self):
        """The session wrote the group's mean gradient into the host gradient buffer: make
        every trainable param.grad its view (on the device: a copy there)."""
        if not self.on_host:
            self.grad_flat.copy_(self.grad_host)
        for p, view in zip(self.params, self.grad_views):
            p.grad = view if p.requires_grad else None

    def load_device(self):
        """Copies the replica from the host buffer to the device (CUDA only). Asynchronous
        from pinned memory: the host buffer is next written by the reply to the next push,
        which is sent after gather_grads' device -> host copy on the same stream, so this
        copy has finished by then."""
        if not self.on_host:
            with torch.no_grad():
                self.device_flat.copy_(self.host_flat, non_blocking=True)
        self.load_buffers()  # after the copy above, on the same stream


class _Role:
    """What a trainer and an evaluator share: their `_core.Session` (self._session), its
    should_stop, close() and the with-statement."""

    def __init__(self, model, role, args, optimizer=False, sync_buffers=True):
        """Registers `model` (flattened) as a `role` ("trainer" or "evaluator") with the
        worker flags `args`; `optimizer`: the trainer steps its own optimizer;
        `sync_buffers`: the synced buffers follow the parameters in the flat layout."""
        self.model = model
        self.sync_buffers = bool(sync_buffers)
        self._flat = _FlatModel(model, self.sync_buffers)
        self.fingerprint = fingerprint(model, self.sync_buffers)
        self._session = _core.Session(args, role, self._flat.count, self.fingerprint,
                                      self._flat.host, layout_text(model, self.sync_buffers),
                                      optimizer=bool(optimizer),
                                      buffer_count=self._flat.buffer_count)
        self._closed = False
        self._session.start(self._flat.host)

    @property
    def should_stop(self):
        """True once the worker was drained or told to stop: leave the training loop."""
        return self._closed or self._session.should_stop

    def close(self):
        """Leaves the run (the coordinator counts what this worker trained). Idempotent."""
        if not self._closed:
            self._closed = True
            self._session.close()
            self._session.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Worker(_Role):
    """One groupsgd trainer around `model` (an nn.Module whose parameters are float32).

    Registers with the daemon's coordinator on construction (retrying up to
    `connect_timeout_ms`), then loads the group's replica into the model. Heartbeats run
    on a C++ thread, so a long Python step never makes the worker look dead.

    `sync_buffers` (default True): the model's floating-point buffers (batch-norm running
    statistics, synced_buffers) are pushed with every step and set to the group's
    batch-weighted mean of them, sent to the central PS and checkpointed with the
    parameters; False keeps them local to this process. Every trainer and the evaluator
    of a run must agree (the layout, and so the fingerprint, differs)."""

    def __init__(self, model, coordinator=None, name=None, job_id=1,
                 compress=None, curve_secret_key_file=None, curve_server_key_file=None,
                 timeout_ms=None, connect_timeout_ms=None, give_up_s=None, log_level="warn",
                 extra_args=(), job="", shared_device=None, arbiter=None, device_sharing=None,
                 optimizer=None, sync_buffers=True):
        # Unset: the launcher's environment (python3 -m groupsgd.run), else the defaults.
        coordinator = coordinator or os.environ.get("GROUPSGD_COORDINATOR", "tcp://127.0.0.1:5555")
        name = os.environ.get("GROUPSGD_NAME", "") if name is None else name
        args = _options(coordinator, name, job_id, compress, curve_secret_key_file,
                        curve_server_key_file, timeout_ms, connect_timeout_ms, give_up_s,
                        log_level, extra_args, job)
        # A device shared with other jobs' workers (docs/arbiter.md): the worker's flags
        # of the same names; compute inside `with worker.device():`.
        if shared_device:
            args += ["--shared-device", str(shared_device)]
        if arbiter:
            args += ["--arbiter", str(arbiter)]
        if device_sharing:
            args += ["--device-sharing", str(device_sharing)]
        self.optimizer = optimizer
        if optimizer is not None:
            _check_optimizer(model, optimizer)
        super().__init__(model, "trainer", args, optimizer=optimizer is not None,
                         sync_buffers=sync_buffers)
        # On the CPU without an optimizer of its own, two gradient buffers alternate
        # (bind_grads): 4 more bytes per parameter for a step without the zeroing in it.
        spare = (self._session.spare_gradient_buffer()
                 if optimizer is None and self._flat.on_host else None)
        self._flat.bind_grads(self._session.gradient_buffer(), spare)
        self._correction = None
        if optimizer is not None:
            self._correction = torch.from_numpy(self._session.correction_buffer())
            _reset_optimizer_state(optimizer)  # starts from the group's parameters
        self._flat.load_device()
        self.last = None
        self.timing = None
        self.skipped_nonfinite = 0  # steps skipped for a non-finite gradient
        self._scaler_params = None  # GradScaler.unscale_'s stand-in optimizer (step())

    @property
    def param_count(self):
        return self._flat.count

    # What the daemon assigned and the session counted, read from the C++ session.
    batch_size = _session_property(
        "batch_size", "Samples per step the daemon assigns to this worker (it changes as it adapts).")
    compression = _session_property(
        "compression", "How this worker encodes its gradients now (dense, fp16, ...): compress=, "
        "else the daemon's choice for its group, which compress_gradients auto changes as it "
        "measures the group's link; the worker follows it between steps.")
    shard_index = _session_property("shard_index")
    shard_count = _session_property("shard_count")
    seed = _session_property("seed")
    data_ranges = _session_property(
        "data_ranges", "The daemon runs data_allocation ranges: batches come from sample ranges "
        "claimed from the coordinator (ShardBatchSampler does it), not from the shard.")
    worker_id = _session_property("worker_id")
    steps = _session_property("total_steps")
    group_step = _session_property(
        "group_step", "The group's step count (the step the next push is for): the same on every "
        "member of a group; schedules driven by it stay in step when a worker joins or moves.")
    heartbeats_sent = _session_property("heartbeats_sent")
    registrations = _session_property("registrations")
    quarantined = _session_property("quarantined")

    def step(self, loss=None, batch=None, scaler=None):
        """Ends a step after loss.backward(): pushes the gradients of `batch` samples
        (default: batch_size), waits for the group step and loads the new replica into the
        parameters. The gradients are zero afterwards. Returns a dict: pushed, accepted,
        skipped_nonfinite, step, model_version, wait_ms (and mean_gradient, correction,
        reset_optimizer, parameters_loaded: what the group asked of the worker's own
        optimizer, if any).

        A gradient holding inf or NaN is not sent: the step is skipped (the group counts
        this worker for it with no weight, so it neither waits for it nor averages it in;
        never a bad update at the group PS), `skipped_nonfinite` is True in the result and
        the property of the same name counts such steps.

        `scaler`: a torch.cuda.amp.GradScaler whose scale(loss).backward() made the
        gradients. They are unscaled before the push (scaler.unscale_), a non-finite one
        skips the step as above, and scaler.update() then backs the scale off (or grows
        it) as after an optimizer step; pass the unscaled `loss`. A disabled scaler (no
        CUDA) changes nothing.

        With an optimizer (optimizer.placement workers): the group's mean gradient is
        written into every param.grad, then optimizer.step() and optimizer.zero_grad() run;
        every member of the group does the same (a member that skipped too), so their
        parameters stay identical. Call your scheduler's step() after this one.

        Raises RuntimeError, pushing nothing, when a parameter was moved, cast or replaced
        after wrapping (_FlatModel.check_attached); KeyboardInterrupt on Ctrl-C while it
        waits."""
        if self._closed:
            raise RuntimeError("the worker is closed")
        t0 = time.perf_counter()
        self._flat.check_attached()
        scaling = scaler is not None and scaler.is_enabled()
        if scaling:
            if self._scaler_params is None:
                # GradScaler unscales the gradients of an optimizer's parameters; the
                # optimizer runs at the group PS, so a stand-in that is never stepped.
                self._scaler_params = torch.optim.SGD(self._flat.params, lr=0.0)
            scaler.unscale_(self._scaler_params)  # in place, on each param.grad
        finite = self._flat.gather_grads()
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss or 0.0)
        if not finite:
            self.skipped_nonfinite += 1
            value = 0.0
        if self.optimizer is not None and self._session.wants_parameters:
            self._flat.store_host()  # the group PS asked for them with this push
        t1 = time.perf_counter()
        try:
            self.last = self._session.step(int(batch or self.batch_size), value, self._flat.host,
                                           skipped=not finite, buffer=self._flat.grad_buffer)
        finally:
            if scaling:
                scaler.update()  # found inf recorded by unscale_: the scale backs off
        t2 = time.perf_counter()
        # Skipped: nothing was sent, whether the skip reached the group (pushed) or was
        # lost to a failure like any push.
        self.last.pop("skipped")
        self.last["skipped_nonfinite"] = not finite
        if self.optimizer is not None:
            self._step_optimizer(self.last)
        self._flat.after_step(load=self.optimizer is None, zero_later=self._session.zero_later)
        # Python-side work of this call vs the exchange in C++ (push, barrier, replica).
        self.timing = {"binding_s": (t1 - t0) + (time.perf_counter() - t2), "exchange_s": t2 - t1}
        return self.last

    def _step_optimizer(self, result):
        """Optimizer on the workers: what the group's answer asks (docs/pytorch.md)."""
        flat, opt = self._flat, self.optimizer
        if result["parameters_loaded"]:
            # The group's parameters replaced ours (joined, moved, late, recovered): our
            # optimizer state belonged to others; the gradient pushed is not applied.
            flat.load_device()
            _reset_optimizer_state(opt)
            return
        if not result["mean_gradient"]:
            return  # nothing pushed (stopping)
        flat.load_mean_gradient()
        flat.take_mean_buffers()  # the members' mean buffer values, then corrected as all
        with torch.no_grad():
            if result["correction"]:
                target = flat.host_flat if flat.on_host else flat.device_flat
                target.add_(self._correction.to(target.device, non_blocking=False))
        flat.load_buffers()
        if result["reset_optimizer"]:
            _reset_optimizer_state(opt)
        opt.step()
        opt.zero_grad()

    @property
    def shares_device(self):
        return self._session.shares_device

    @property
    def holds_device(self):
        return self._session.holds_device

    @contextlib.contextmanager
    def device(self):
        """Holds the shared device (`shared_device=`) for the compute of one step:

            with w.device():
                loss = loss_fn(model(x), y)
                loss.backward()
            w.step(loss)

        Waits (the GIL released) for the arbiter's lease, if `arbiter=` is given, and the
        device's lock; gives both back on leaving the block (step() and close() also do).
        Without a shared device it does nothing. Yields the milliseconds it waited."""
        waited = self._session.acquire_device()
        try:
            yield waited
        finally:
            self._session.release_device()

def _check_optimizer(model, optimizer):
    """An optimizer for the worker must step the model's own parameters (identity)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
    ours = {id(p) for p in model.parameters()}
    for i, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            if id(p) not in ours:
                raise ValueError(f"optimizer parameter group {i} holds a tensor of shape "
                                 f"{tuple(p.shape)} that is not a parameter of the model")


def _reset_optimizer_state(optimizer):
    """Forgets the optimizer's per-parameter state (moments, step counts); the parameter
    groups (learning rates set by a scheduler) stay."""
    optimizer.state.clear()


class ShardBatchSampler(torch.utils.data.Sampler):
    """Batches of indices from this worker's shard (every shard_count-th sample from
    shard_index), each as large as the daemon assigns at the time it is drawn. Use as a
    DataLoader's batch_sampler, with torch's DistributedSampler semantics: iterating is one
    epoch (one pass over the shard, shuffled by seed and epoch; set_epoch(e) before each),
    len() is its number of batches, drop_last drops a short last batch. An epoch also ends
    when the worker should stop. next_batch() draws from an endless stream of passes
    instead (tensor_batches uses it).

    With the daemon's data_allocation ranges (worker.data_ranges) the batches come from
    sample ranges the worker claims from the coordinator as it goes (docs/protocol.md,
    "Sample ranges"): every epoch of the run visits every sample once, whatever the
    workers' speeds, and the worker's share follows its speed. Each batch drawn must be
    stepped (worker.step): the next claim acknowledges it as trained. An iteration then
    draws len() batches (an equal share's worth); set_epoch and shuffle do not apply (the
    run's seed and epoch fix the order)."""

    def __init__(self, worker, dataset_size, drop_last=False, shuffle=True):
        self.worker = worker
        self.size = int(dataset_size)
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.epoch = 0
        self._shard = None
        self._order = []
        self._pos = 0
        self._rng = None

    def set_epoch(self, epoch):
        """The epoch the next iteration covers (its shuffle depends on it)."""
        self.epoch = int(epoch)

    def _shard_indices(self):
        index, count = int(self.worker.shard_index), int(self.worker.shard_count)
        order = np.arange(index, self.size, max(1, count))
        if len(order) == 0:
            raise ValueError(f"shard {index} of {count} of a data set of {self.size} samples is "
                             "empty: the data set needs at least as many samples as trainers")
        return order

    def _reshard(self):
        shard = (self.worker.shard_index, self.worker.shard_count)
        if shard != self._shard:
            self._order = self._shard_indices()
            self._shard = shard
            self._rng = np.random.default_rng(self.worker.seed * 1000003 + shard[0])
            self._pos = len(self._order)  # shuffle on the first draw

    def _ranges(self):
        # Any object with the Worker's shard attributes may drive the sampler.
        return bool(getattr(self.worker, "data_ranges", False))

    def _range_batch(self):
        n = max(1, int(self.worker.batch_size))
        return self.worker._session.next_range_batch(self.size, n).tolist()

    def next_batch(self):
        if self._ranges():
            return self._range_batch()  # empty once the worker should stop
        self._reshard()
        n = max(1, int(self.worker.batch_size))
        out = []
        while len(out) < n:
            if self._pos >= len(self._order):
                self._rng.shuffle(self._order)
                self._pos = 0
            take = min(n - len(out), len(self._order) - self._pos)
            out.extend(self._order[self._pos:self._pos + take].tolist())
            self._pos += take
        return out

    def _epoch_order(self):
        order = self._shard_indices()
        if self.shuffle:
            rng = np.random.default_rng((self.worker.seed * 1000003 + order[0]) * 7919 + self.epoch)
            rng.shuffle(order)
        return order

    def __iter__(self):
        if self._ranges():
            for _ in range(len(self)):
                batch = self._range_batch()
                if not batch or self.worker.should_stop:
                    return
                yield batch
            return
        order = self._epoch_order()
        pos = 0
        while pos < len(order) and not self.worker.should_stop:
            n = max(1, int(self.worker.batch_size))  # the daemon may change it mid-epoch
            batch = order[pos:pos + n].tolist()
            pos += n
            if len(batch) < n and self.drop_last:
                return
            yield batch

    def __len__(self):
        if self._ranges():  # an equal share's worth: the ranges follow speed
            return max(1, -(-self.size // max(1, int(self.worker.shard_count))
                            // max(1, int(self.worker.batch_size))))
        shard = len(self._shard_indices())
        n = max(1, int(self.worker.batch_size))
        return shard // n if self.drop_last else -(-shard // n)


def tensor_batches(worker, x, y, device=None):
    """(inputs, labels) batches of in-memory tensors, following ShardBatchSampler."""
    sampler = ShardBatchSampler(worker, len(x))
    while not worker.should_stop:
        batch = sampler.next_batch()
        if not batch:  # ranges: the worker stopped while claiming
            return
        idx = torch.as_tensor(batch)
        xb, yb = x[idx], y[idx]
        if device is not None:
            xb, yb = xb.to(device), yb.to(device)
        yield xb, yb


def _has_running_stats(model):
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats
               for m in model.modules())


@torch.no_grad()
def recalibrate_batch_norm(model, batches):
    """Re-estimates batch-norm running statistics for the current parameters from an
    iterable of input batches (a cumulative average, as torch.optim.swa_utils.update_bn)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    saved = {m: m.momentum for m in norms}
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    was_training = model.training
    model.train()
    for xb in batches:
        model(xb)
    for m in norms:
        m.momentum = saved[m]
    model.train(was_training)


@torch.no_grad()
def accuracy(model, batches, device=None):
    """Fraction of correct top-1 predictions over an iterable of (inputs, labels)."""
    was_training = model.training
    model.eval()
    correct = total = 0
    for xb, yb in batches:
        if device is not None:
            xb, yb = xb.to(device), yb.to(device)
        correct += (model(xb).argmax(dim=1) == yb).sum().item()
        total += len(yb)
    model.train(was_training)
    return correct / max(1, total)


# Evaluator.run(interval_s=None): the wait after a round is this many times the round's
# own time (fetch and measurement), so evaluating takes at most 1/(1+3) of a core; never
# under the minimum (an idle loop of fetches would only cost the central PS).
AUTO_EVAL_WAIT_PER_WORK = 3.0
AUTO_EVAL_MIN_WAIT_S = 0.05


class Evaluator(_Role):
    """Measures the central model's test accuracy (and, given `metrics=`, its validation
    loss) and reports it to the coordinator (the evaluator role: the daemon's target
    accuracy or loss, its best kept model and the run summary come from it).

    `test_batches`: a callable returning an iterable of (inputs, labels). `sync_buffers`
    must be the trainers' choice: with it (the default) each fetched model comes with the
    group-averaged batch-norm statistics; `calibration_batches` (a callable returning an
    iterable of training inputs) re-estimates them for each model measured instead (with
    sync_buffers=False the only way to measure a model with batch norm fairly)."""

    def __init__(self, model, coordinator=None, name=None, job_id=1,
                 curve_secret_key_file=None, curve_server_key_file=None, timeout_ms=None,
                 connect_timeout_ms=None, give_up_s=None, log_level="warn", extra_args=(),
                 job="", sync_buffers=True):
        coordinator = coordinator or os.environ.get("GROUPSGD_COORDINATOR", "tcp://127.0.0.1:5555")
        name = os.environ.get("GROUPSGD_NAME", "evaluator") if name is None else name
        args = _options(coordinator, name, job_id, None, curve_secret_key_file,
                        curve_server_key_file, timeout_ms, connect_timeout_ms, give_up_s,
                        log_level, extra_args, job)
        super().__init__(model, "evaluator", args, sync_buffers=sync_buffers)
        self.version = None
        self.accuracy = None
        self.loss = None
        self._hurried = False  # the coordinator's measure_now was obeyed

    def fetch(self):
        """Loads the newest central model into the model; returns its version."""
        self._flat.check_attached()
        version = self._session.fetch_central(self._flat.host)
        self._flat.load_device()
        return version

    def report(self, accuracy, version, loss=None):
        """Reports the accuracy (None: not measured) and validation loss (None: not
        measured) of central version `version`; sent with a heartbeat at once. Raises
        ValueError for a value that is not a finite number in range (accuracy in [0, 1],
        loss >= 0)."""
        if accuracy is None and loss is None:
            raise ValueError("report() needs an accuracy or a loss")
        acc = -1.0 if accuracy is None else float(accuracy)
        lss = -1.0 if loss is None else float(loss)
        if accuracy is not None and not (0.0 <= acc <= 1.0):
            raise ValueError(f"accuracy must be in [0, 1], got {accuracy}")
        if loss is not None and not (math.isfinite(lss) and lss >= 0.0):
            raise ValueError(f"loss must be a finite number >= 0, got {loss}")
        self.accuracy, self.version, self.loss = accuracy, version, loss
        self._session.report(acc, int(version), lss)

    def run(self, test_batches=None, calibration_batches=None, interval_s=None, device=None,
            on_result=None, metrics=None):
        """Until the coordinator says stop: fetch the central model, measure each new
        version, report it. `metrics`: a callable metrics(model) returning (accuracy,
        loss) (either may be None) instead of the top-1 accuracy over test_batches, e.g. a
        language model's next-token accuracy and validation loss. on_result(version,
        accuracy) after each report (self.loss holds the loss). interval_s: seconds from
        one fetch to the next; None (the default) paces itself by what a round costs: it
        waits three times the last fetch and measurement (at least 50 ms), so the
        evaluator takes at most about a quarter of a core and sees the target soon after
        the model reaches it."""
        if test_batches is None and metrics is None:
            raise ValueError("give Evaluator.run test_batches or metrics")
        if interval_s is not None and not interval_s >= 0:
            raise ValueError(f"interval_s must be a number >= 0 or None, got {interval_s}")
        failures = 0
        wait_s = interval_s if interval_s is not None else AUTO_EVAL_MIN_WAIT_S
        while not self.should_stop:
            started = time.monotonic()
            try:
                version = self.fetch()
                failures = 0
            except RuntimeError:
                failures += 1  # the central PS may be restarting; give up after 20 in a row
                if failures > 20:
                    raise
                time.sleep(max(wait_s, AUTO_EVAL_MIN_WAIT_S))
                continue
            if version != self.version:
                if calibration_batches is not None and _has_running_stats(self.model):
                    recalibrate_batch_norm(self.model, calibration_batches())
                if metrics is not None:
                    acc, loss = metrics(self.model)
                else:
                    acc, loss = accuracy(self.model, test_batches(), device), None
                self.report(acc, version, loss)
                if on_result is not None:
                    on_result(version, acc)
            if interval_s is None:  # a quarter of a core at most
                wait_s = max(AUTO_EVAL_MIN_WAIT_S, AUTO_EVAL_WAIT_PER_WORK * (time.monotonic() - started))
                self._wait_interval(time.monotonic() + wait_s)
            else:
                self._wait_interval(started + interval_s)
        self.close()

    def _wait_interval(self, until):
        """Sleeps until `until` (time.monotonic()), or less once the run is over and its
        final model waits for a reading (the coordinator's measure_now) or stops."""
        while time.monotonic() < until and not self.should_stop:
            if self._session.measure_now and not self._hurried:
                self._hurried = True  # once: the next fetch is the final model
                return
            time.sleep(min(0.02, max(0.0, until - time.monotonic())))
