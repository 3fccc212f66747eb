"""Batch-norm buffers with groupsgd.torch (docs/pytorch.md, "Buffers"): with sync_buffers
(the default) every step sets the members' running statistics to the batch-weighted mean
of what each computed on its own data, in both optimizer placements, and the daemon's
checkpoints hold them; with sync_buffers=False they stay each worker's own. Two workers
run as threads of this process against a real groupsgdd so their buffers can be compared."""

import json

import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402

from conftest import checkpoint_of_evaluators_version, in_threads  # noqa: E402

FAST = ["--heartbeat-ms", "300", "--model", "external", "--log-level", "warn"]
STEPS = 12
BATCH = 16


def bn_model():
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 3))


def buffers(model):
    bn = model[1]
    return torch.cat([bn.running_mean, bn.running_var]).detach().clone()


class Member:
    """One worker on its own data: shifted and scaled differently from the other's, so
    their batch statistics (and local running statistics) differ."""

    def __init__(self, endpoint, name, seed, sync_buffers=True, optimizer=False):
        self.model = bn_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05) if optimizer else None
        self.w = gt.Worker(self.model, coordinator=endpoint, name=name, optimizer=self.opt,
                           sync_buffers=sync_buffers, connect_timeout_ms=20000, timeout_ms=20000)
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(4 * BATCH, 1, 8, 8, generator=g) * (1 + 2 * seed) + 3 * seed
        self.y = torch.randint(0, 3, (4 * BATCH,), generator=g)
        self.local = {}  # group step -> buffers after this member's forward pass (pushed)
        self.after = {}  # group step -> buffers after the step (the group's)

    def train(self, steps):
        for i in range(steps):
            j = i % 4
            xb, yb = self.x[j * BATCH:(j + 1) * BATCH], self.y[j * BATCH:(j + 1) * BATCH]
            loss = torch.nn.functional.cross_entropy(self.model(xb), yb)
            loss.backward()
            pushed_for = self.w.group_step
            local = buffers(self.model)
            r = self.w.step(loss, batch=BATCH)
            assert r["pushed"], r
            if r["accepted"] and r["step"] == pushed_for + 1:
                self.local[pushed_for] = local
                self.after[pushed_for] = buffers(self.model)


def two_members(endpoint, **kwargs):
    members = []
    in_threads([lambda i=i: members.append(Member(endpoint, f"w{i}", i, **kwargs))
                for i in range(2)])
    in_threads([lambda m=m: m.train(STEPS) for m in members])
    return members


def assert_group_mean_every_step(a, b):
    steps = sorted(set(a.after) & set(b.after))
    assert len(steps) >= STEPS - 2, (sorted(a.after), sorted(b.after))
    for s in steps:
        # The members' own statistics differ (their data do), and the group's are their
        # mean (equal batches): identical on both members after every step.
        assert not torch.allclose(a.local[s], b.local[s], atol=1e-3), s
        mean = (a.local[s] + b.local[s]) / 2
        assert torch.allclose(a.after[s], mean, rtol=1e-5, atol=1e-5), (s, a.after[s], mean)
        assert torch.equal(a.after[s], b.after[s]), s


def config(tmp_path, placement):
    path = tmp_path / f"{placement}.json"
    path.write_text(json.dumps({"optimizer": {"placement": placement}}))
    return path


@pytest.mark.parametrize("placement", ["server", "workers"])
def test_buffers_are_the_group_mean_after_every_step_and_in_checkpoints(daemon, tmp_path,
                                                                        placement):
    ckpt = tmp_path / "ckpt"
    d = daemon(*FAST, "--config", config(tmp_path, placement), "--mode", "grouped", "--groups",
               "1", "--workers", "2", "--exchange-period", "4", "--batch-size", str(BATCH),
               "--max-seconds", "120", "--checkpoint-dir", ckpt, "--checkpoint-interval-s", "0")
    a, b = members = two_members(d.endpoint, optimizer=placement == "workers")
    try:
        params = sum(p.numel() for p in a.model.parameters())
        assert a.w.param_count == params + 8  # running_mean and running_var of 4 channels
        assert_group_mean_every_step(a, b)
        # A checkpoint of the central model the evaluator also holds: its buffers are the
        # group's, not a fresh model's defaults, and load into a fresh model with them.
        ev = gt.Evaluator(bn_model(), coordinator=d.endpoint, connect_timeout_ms=20000)
        try:
            done = checkpoint_of_evaluators_version(d, ev)
            assert done["version"] >= 2, done
            fresh = bn_model()
            defaults = buffers(fresh)
            assert gt.load_checkpoint(fresh, done["path"]) == done["version"]
            assert torch.equal(buffers(fresh), buffers(ev.model))  # bit for bit
            assert not torch.allclose(buffers(fresh), defaults, atol=1e-2)
            for p, central in zip(fresh.parameters(), ev.model.parameters()):
                assert torch.equal(p.detach(), central.detach())
            # The central buffers are the group's as of an exchange: near the last ones.
            last = a.after[max(a.after)]
            assert torch.allclose(buffers(fresh), last, rtol=0.5, atol=0.5), (buffers(fresh), last)
            # A checkpoint without buffers (parameters only) loads the parameters alone.
            # A model of another count is refused, naming both counts.
            part = torch.nn.Sequential(*list(bn_model())[:2])
            n = sum(p.numel() for p in part.parameters())
            with pytest.raises(ValueError, match=rf"holds {params + 8} parameters, the model "
                                                 rf"has {n} \({n + 8} with its buffers\)"):
                gt.load_checkpoint(part, done["path"])
        finally:
            ev.close()
    finally:
        for m in members:
            m.w.close()


def test_without_sync_the_buffers_stay_each_workers_own(daemon, tmp_path):
    d = daemon(*FAST, "--mode", "grouped", "--groups", "1", "--workers", "2",
               "--exchange-period", "4", "--batch-size", str(BATCH), "--max-seconds", "120")
    a, b = members = two_members(d.endpoint, sync_buffers=False)
    try:
        assert a.w.param_count == sum(p.numel() for p in a.model.parameters())
        steps = sorted(set(a.after) & set(b.after))
        assert len(steps) >= STEPS - 2
        for s in steps:
            for m in members:
                assert torch.equal(m.after[s], m.local[s])  # the step left them alone
            assert not torch.allclose(a.after[s], b.after[s], atol=1e-3)
        # The layouts differ, so a worker with the other choice is refused, by name.
        with pytest.raises(RuntimeError, match="model mismatch.*running_mean"):
            gt.Worker(bn_model(), coordinator=d.endpoint, name="synced", connect_timeout_ms=5000)
    finally:
        for m in members:
            m.w.close()


def test_buffers_refuse_a_compression_that_cannot_carry_them(daemon, tmp_path):
    d = daemon(*FAST, "--mode", "grouped", "--groups", "1", "--workers", "1",
               "--batch-size", str(BATCH), "--max-seconds", "60")
    with pytest.raises(RuntimeError, match="'sign' cannot carry the model's buffers"):
        gt.Worker(bn_model(), coordinator=d.endpoint, name="signs", compress="sign",
                  connect_timeout_ms=20000)
    w = gt.Worker(bn_model(), coordinator=d.endpoint, name="fp16", compress="fp16",
                  connect_timeout_ms=20000)
    w.close()


def test_the_layout_and_checkpoints_name_the_synced_buffers(tmp_path):
    model = bn_model()
    names = [n for n, _, _ in gt.synced_buffers(model)]
    assert names == ["1.running_mean", "1.running_var"]  # not num_batches_tracked
    assert gt.layout(model)[-1] == ("1.running_var", (4,), "float32 buffer")
    assert gt.fingerprint(model) != gt.fingerprint(model, buffers=False)
    plain = torch.nn.Linear(3, 2)
    assert gt.fingerprint(plain) == gt.fingerprint(plain, buffers=False)
    # A buffer registered as not persistent (a constant) is not synced.
    plain.register_buffer("mask", torch.ones(2), persistent=False)
    assert gt.synced_buffers(plain) == []


def test_load_checkpoint_takes_buffers_when_the_file_has_them(tmp_path):
    import numpy as np
    from test_binding import write_checkpoint

    model = bn_model()
    params = sum(p.numel() for p in model.parameters())
    values = np.arange(params + 8, dtype=np.float32) / 1000
    gt.load_checkpoint(model, write_checkpoint(tmp_path / "with.gsgd", values))
    assert torch.equal(buffers(model), torch.from_numpy(values[params:]))
    assert torch.equal(model[4].bias.detach(), torch.from_numpy(values[params - 3:params]))
    # Parameters alone (workers with sync_buffers=False): the buffers stay as they are.
    fresh = bn_model()
    gt.load_checkpoint(fresh, write_checkpoint(tmp_path / "without.gsgd", values[:params]))
    assert torch.equal(buffers(fresh), buffers(bn_model()))
    assert torch.equal(fresh[4].bias.detach(), torch.from_numpy(values[params - 3:params]))


def test_load_checkpoint_reads_a_format_2_file_with_the_outer_optimizer_state(tmp_path):
    # An outer optimizer with state (momentum, nesterov, adam, adamw) makes the daemon write
    # format 2: the model, then the state (docs/operations.md), which is not loaded.
    import struct
    import zlib

    import numpy as np

    model = bn_model()
    count = sum(p.numel() for p in model.parameters()) + 8
    values = np.arange(count, dtype="<f4") / 1000
    payload = values.tobytes()

    def write(fmt, tail):
        head = struct.pack("<8sIIQQQIIQI", b"GSGDCKPT", fmt, 64, 9, count, len(payload), 1,
                           zlib.crc32(payload), 0, 0)
        path = tmp_path / f"f{fmt}-{len(tail)}.gsgd"
        path.write_bytes(head + struct.pack("<I", zlib.crc32(head)) + payload + tail)
        return path

    state = struct.pack("<IIQII", 1, 1, 5, 0, 0) + np.zeros(count, "<f4").tobytes()
    assert gt.load_checkpoint(model, write(2, state)) == 9
    assert torch.equal(buffers(model), torch.from_numpy(values[-8:]))
    with pytest.raises(ValueError, match="format 2 without its optimizer section"):
        gt.load_checkpoint(model, write(2, b""))
    with pytest.raises(ValueError, match="bytes after the payload"):
        gt.load_checkpoint(model, write(1, state))
    with pytest.raises(ValueError, match="unsupported format version 3"):
        gt.load_checkpoint(model, write(3, state))


def test_a_checkpoint_with_outer_momentum_state_loads_with_its_buffers(daemon, tmp_path):
    cfg = tmp_path / "outer.json"
    cfg.write_text(json.dumps({"outer_optimizer": {"kind": "nesterov", "lr": 0.7,
                                                   "momentum": 0.5}}))
    d = daemon(*FAST, "--config", cfg, "--mode", "sync", "--workers", "1", "--batch-size",
               str(BATCH), "--max-seconds", "60", "--checkpoint-dir", tmp_path / "ckpt",
               "--checkpoint-interval-s", "0")
    m = Member(d.endpoint, "w0", 1)
    try:
        m.train(6)
        ev = gt.Evaluator(bn_model(), coordinator=d.endpoint, connect_timeout_ms=20000)
        try:
            done = checkpoint_of_evaluators_version(d, ev)
            with open(done["path"], "rb") as f:
                assert f.read(12)[8:] == (2).to_bytes(4, "little")  # format 2: with state
            fresh = bn_model()
            assert gt.load_checkpoint(fresh, done["path"]) == done["version"]
            assert torch.equal(buffers(fresh), buffers(ev.model))
            assert not torch.allclose(buffers(fresh), buffers(bn_model()), atol=1e-2)
        finally:
            ev.close()
    finally:
        m.w.close()
