"""Unit tests of groupsgd._core and groupsgd.torch that need no daemon."""

import time

import numpy as np
import pytest

import groupsgd
from groupsgd import _core

try:
    import torch
except ImportError:  # only a missing torch skips the tests that need it
    torch = None
# With torch present, a package that does not import is a failure, not a skip.
gt = __import__("groupsgd.torch").torch if torch is not None else None
needs_torch = pytest.mark.skipif(torch is None, reason="python3-torch is not installed")


def session(param_count=4, args=("--coordinator", "tcp://127.0.0.1:9", "--connect-timeout-ms", "300",
                                  "--timeout-ms", "300")):
    return _core.Session(list(args), "trainer", param_count, "fp", np.zeros(param_count, np.float32))


def test_bad_options_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="--no-such-flag"):
        session(args=["--no-such-flag"])
    with pytest.raises(ValueError, match="role"):
        _core.Session([], "driver", 4, "fp", np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="no parameters"):
        _core.Session([], "trainer", 0, "fp", np.zeros(0, np.float32))


def test_buffers_must_be_float32_contiguous_and_the_model_size():
    with pytest.raises(TypeError, match="float32"):
        _core.Session([], "trainer", 4, "fp", np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="has 5 values, the model 4"):
        _core.Session([], "trainer", 4, "fp", np.zeros(5, np.float32))
    s = session()
    with pytest.raises(ValueError, match="contiguous"):
        s.start(np.zeros(8, np.float32)[::2])
    s.destroy()


def test_start_without_a_daemon_fails_after_the_connect_timeout_without_holding_the_gil():
    s = session()
    ticks = []
    import threading

    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    t = threading.Thread(target=tick)
    t.start()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="could not register"):
        s.start(np.zeros(4, np.float32))
    elapsed = time.monotonic() - started
    stop.set()
    t.join()
    s.destroy()
    assert 0.2 < elapsed < 10
    # The Python thread kept running while start() waited in C++.
    assert len([x for x in ticks if started < x < started + elapsed]) >= 10


def test_gradient_buffer_is_shared_not_copied():
    s = session()
    g = s.gradient_buffer()
    assert g.dtype == np.float32 and g.shape == (4,)
    g[:] = 3
    again = s.gradient_buffer()
    assert again.ctypes.data == g.ctypes.data and again[2] == 3
    s.destroy()
    assert g[1] == 3  # the array keeps the buffer alive


@needs_torch
def test_fingerprint_follows_the_layout():
    a = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    b = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    from collections import OrderedDict

    c = torch.nn.Sequential(OrderedDict(first=torch.nn.Linear(4, 3), second=torch.nn.Linear(3, 2)))
    d = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))  # 16 + 5 = 21 values
    assert gt.fingerprint(a) == gt.fingerprint(b)
    assert gt.fingerprint(a) != gt.fingerprint(c)  # same shapes, other names
    assert gt.fingerprint(a) != gt.fingerprint(d)
    assert gt.layout(a)[0] == ("0.weight", (3, 4), "float32")


@needs_torch
def test_flat_model_views_share_one_buffer():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    before = [p.detach().clone() for p in model.parameters()]
    flat = gt._FlatModel(model)
    assert flat.count == 4 * 3 + 3 + 3 * 2 + 2
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.data, b)  # values kept
    flat.host[:] = 7
    assert all(bool((p.data == 7).all()) for p in model.parameters())
    grad = np.zeros(flat.count, np.float32)
    flat.bind_grads(grad)
    model(torch.ones(5, 4)).sum().backward()
    assert np.abs(grad).sum() > 0  # backward wrote into the flat buffer
    # A script that sets gradients to None (torch 2 zero_grad default) still works.
    for p in model.parameters():
        p.grad = None
    model(torch.ones(5, 4)).sum().backward()
    grad[:] = 0
    flat.gather_grads()
    assert np.abs(grad).sum() > 0


@needs_torch
def test_non_float32_parameters_are_refused():
    with pytest.raises(TypeError, match="float32"):
        gt._FlatModel(torch.nn.Linear(2, 2).double())


@needs_torch
def test_shard_batch_sampler_follows_batch_size_and_shard():
    class FakeWorker:
        batch_size, shard_index, shard_count, seed, should_stop = 5, 1, 4, 3, False

    w = FakeWorker()
    s = gt.ShardBatchSampler(w, 100)
    seen = set()
    for _ in range(5):
        b = s.next_batch()
        assert len(b) == 5 and all(i % 4 == 1 for i in b)
        seen.update(b)
    assert len(seen) == 25  # one pass over the shard covers it exactly
    w.batch_size = 7
    assert len(s.next_batch()) == 7
    w.shard_index = 2
    assert all(i % 4 == 2 for i in s.next_batch())


class _EpochWorker:
    batch_size, shard_index, shard_count, seed, should_stop = 4, 1, 3, 5, False


@needs_torch
def test_shard_batch_sampler_has_distributed_sampler_semantics():
    w = _EpochWorker()
    s = gt.ShardBatchSampler(w, 20)  # shard 1 of 3: 1, 4, ..., 19 (7 samples)
    assert len(s) == 2  # batches of 4: 4 + 3
    epoch0 = list(s)
    assert [len(b) for b in epoch0] == [4, 3]
    assert sorted(i for b in epoch0 for i in b) == list(range(1, 20, 3))  # each sample once
    assert list(s) == epoch0  # the same epoch, the same order
    s.set_epoch(1)
    epoch1 = list(s)
    assert sorted(i for b in epoch1 for i in b) == list(range(1, 20, 3))
    assert epoch1 != epoch0  # another epoch, another shuffle
    dropping = gt.ShardBatchSampler(w, 20, drop_last=True)
    assert len(dropping) == 1 and [len(b) for b in dropping] == [4]
    w.should_stop = True
    assert list(s) == []  # a stopping worker's epoch ends at once


@needs_torch
def test_shard_batch_sampler_refuses_an_empty_shard():
    w = _EpochWorker()
    w.shard_index, w.shard_count = 5, 8
    s = gt.ShardBatchSampler(w, 4)  # shards 4..7 of a 4-sample data set are empty
    with pytest.raises(ValueError, match="shard 5 of 8 .* is empty"):
        len(s)
    with pytest.raises(ValueError, match="is empty"):
        s.next_batch()


@needs_torch
def test_shard_batch_sampler_drives_a_data_loader_with_worker_processes():
    w = _EpochWorker()
    data = torch.utils.data.TensorDataset(torch.arange(20).float(), torch.arange(20))
    s = gt.ShardBatchSampler(w, len(data))
    loader = torch.utils.data.DataLoader(data, batch_sampler=s, num_workers=2)
    for epoch in range(2):
        s.set_epoch(epoch)
        labels = [int(i) for _, y in loader for i in y]
        assert sorted(labels) == list(range(1, 20, 3))
        assert len(labels) == 7


def write_checkpoint(path, values, version=7):
    """A checkpoint file as centralps/src/checkpoint.cc writes it (docs/operations.md)."""
    import struct
    import zlib

    payload = np.asarray(values, dtype="<f4").tobytes()
    count = len(payload) // 4
    head = struct.pack("<8sIIQQQIIQI", b"GSGDCKPT", 1, 64, version, count, len(payload), 1,
                       zlib.crc32(payload), 123456789, 0)
    path.write_bytes(head + struct.pack("<I", zlib.crc32(head)) + payload)
    return path


def two_layers():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


@needs_torch
def test_load_checkpoint_fills_the_parameters_in_the_flat_layout(tmp_path):
    model = two_layers()
    count = sum(p.numel() for p in model.parameters())  # 12 + 3 + 6 + 2
    path = write_checkpoint(tmp_path / "ckpt-00000000000000000042.gsgd",
                            np.arange(count, dtype=np.float32), version=42)
    assert gt.load_checkpoint(model, path) == 42
    w0, b0, w1, b1 = model.parameters()
    assert torch.equal(w0, torch.arange(12.0).reshape(3, 4))  # row-major, parameters() order
    assert torch.equal(b0, torch.arange(12.0, 15.0))
    assert torch.equal(w1, torch.arange(15.0, 21.0).reshape(2, 3))
    assert torch.equal(b1, torch.arange(21.0, 23.0))
    # Into a wrapped model: in place, so the parameters stay views of the flat buffer.
    flat = gt._FlatModel(two_layers())
    assert gt.load_checkpoint(flat.module, str(path)) == 42
    flat.check_attached()
    assert np.array_equal(flat.host, np.arange(count, dtype=np.float32))


@needs_torch
def test_load_checkpoint_refuses_damaged_or_mismatched_files(tmp_path):
    model = two_layers()
    before = [p.detach().clone() for p in model.parameters()]
    good = write_checkpoint(tmp_path / "good.gsgd", np.ones(23, np.float32)).read_bytes()

    def load(data):
        path = tmp_path / "bad.gsgd"
        path.write_bytes(bytes(data))
        return gt.load_checkpoint(model, path)

    with pytest.raises(ValueError, match="corrupt.*bad magic"):
        load(b"NOTACKPT" + good[8:])
    flipped = bytearray(good)
    flipped[64 + 5] ^= 0x01  # one payload bit
    with pytest.raises(ValueError, match="corrupt.*payload checksum mismatch"):
        load(flipped)
    flipped = bytearray(good)
    flipped[16] ^= 0x01  # the version in the header
    with pytest.raises(ValueError, match="corrupt.*header checksum mismatch"):
        load(flipped)
    with pytest.raises(ValueError, match="corrupt.*truncated"):
        load(good[:-4])
    with pytest.raises(ValueError, match="corrupt.*truncated"):
        load(good[:40])
    with pytest.raises(ValueError, match="corrupt.*4 bytes after the payload"):
        load(good + b"\0\0\0\0")
    with pytest.raises(ValueError, match="holds 24 parameters, the model has 23"):
        gt.load_checkpoint(model, write_checkpoint(tmp_path / "long.gsgd", np.ones(24)))
    with pytest.raises(ValueError, match="non-finite parameter at index 3"):
        gt.load_checkpoint(model, write_checkpoint(tmp_path / "nan.gsgd",
                                                   [0, 0, 0, np.nan] + [0] * 19))
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach(), b)  # nothing was loaded from a refused file


def detached_by(change):
    """The RuntimeError check_attached raises after `change(model)` on a wrapped model."""
    model = two_layers()
    flat = gt._FlatModel(model)
    flat.check_attached()
    change(model)
    with pytest.raises(RuntimeError) as info:
        flat.check_attached()
    return str(info.value)


@needs_torch
def test_a_parameter_moved_cast_or_replaced_after_wrapping_is_detected():
    msg = detached_by(lambda m: m.double())
    assert "parameter 0.weight (shape (3, 4)) was cast to torch.float64" in msg
    assert "wrap it afterwards" in msg
    assert "was cast to torch.float16" in detached_by(lambda m: m.half())

    def replace(m):
        m[2].bias.data = torch.zeros(2)

    msg = detached_by(replace)
    assert "parameter 2.bias (shape (2,)) has storage of its own" in msg
    assert "wrap it afterwards" in msg

    def new_module(m):
        m[2] = torch.nn.Linear(3, 2)

    assert "parameter 2.weight (shape (2, 3)) is no longer" in detached_by(new_module)

    def added(m):
        m.add_module("extra", torch.nn.Linear(2, 1))

    assert "parameter extra.weight (shape (1, 2)) was added" in detached_by(added)


@needs_torch
def test_what_keeps_a_wrapped_model_attached_passes_the_check():
    model = two_layers()
    flat = gt._FlatModel(model)
    model.to("cpu")  # the device it is on already: nothing moves
    model.float()
    model.train(False)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2)  # in place
        model[0].weight.copy_(torch.ones(3, 4))
    model[0].weight.data.zero_()
    flat.check_attached()
    assert float(flat.host[:12].sum()) == 0


@needs_torch
def test_step_refuses_a_detached_parameter_before_pushing_anything():
    class NoSession:
        def step(self, *args):
            raise AssertionError("step() pushed a detached model")

    model = two_layers()
    w = gt.Worker.__new__(gt.Worker)  # no daemon: the parts step() uses before pushing
    w._closed, w._flat, w._session = False, gt._FlatModel(model), NoSession()
    model.double()
    with pytest.raises(RuntimeError, match="parameter 0.weight .* was cast to torch.float64"):
        w.step(batch=1)
