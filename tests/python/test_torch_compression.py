"""compress_gradients auto with PyTorch workers: the coordinator's choice for a group
reaches the trainers in heartbeat replies, and a Python worker switches its gradient
encoding between steps as groupsgd-worker does (docs/pytorch.md, "Compression")."""

import threading
import time

import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402

from conftest import in_threads  # noqa: E402

# A threshold far above any loopback link: the group's measured speed is below it, so the
# coordinator tries fp16 once a member's measuring windows are full (about 30 steps).
AUTO = ["--model", "external", "--log-level", "warn", "--mode", "adaptive", "--workers", "2",
        "--heartbeat-ms", "150", "--control-ms", "300", "--compress-gradients", "auto",
        "--compression-auto-mbit", "100000", "--max-seconds", "120"]


def small():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


class Trainer:
    def __init__(self, endpoint, name, compress=None):
        self.model = small()
        self.w = gt.Worker(self.model, coordinator=endpoint, name=name, compress=compress,
                           connect_timeout_ms=30000, timeout_ms=20000)
        self.seen = [self.w.compression]  # each encoding in the order it was used

    def train(self, until):
        g = torch.Generator().manual_seed(self.w.worker_id)
        while not until.is_set() and not self.w.should_stop:
            x = torch.randn(self.w.batch_size, 64, generator=g)
            y = torch.randint(0, 10, (self.w.batch_size,), generator=g)
            torch.nn.functional.cross_entropy(self.model(x), y).backward()
            self.w.step()
            if self.w.compression != self.seen[-1]:
                self.seen.append(self.w.compression)
            time.sleep(0.01)  # a few ms of "compute", so heartbeats see steps


def test_python_trainers_follow_the_coordinators_compression_choice(daemon):
    d = daemon(*AUTO)
    trainers = [None, None]

    def make(i):
        trainers[i] = Trainer(d.endpoint, f"py{i}", compress="dense" if i == 1 else None)

    in_threads([lambda: make(0), lambda: make(1)], timeout=60)
    a, b = trainers
    assert a.w.compression == "dense" and b.w.compression == "dense"
    done = threading.Event()

    def watch():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "fp16" not in a.seen:
            time.sleep(0.05)
        time.sleep(1.0)  # a few more steps after the switch
        done.set()

    try:
        in_threads([lambda: a.train(done), lambda: b.train(done), watch], timeout=90)
        # The daemon's choice reached the Python trainer, which encoded with it ...
        assert "fp16" in a.seen, (a.seen, d.log_text()[-3000:])
        # ... while compress= (the worker's --compress) overrides the daemon, as documented.
        assert b.seen == ["dense"], b.seen
    finally:
        a.w.close()
        b.w.close()
    assert d.ctl("shutdown").returncode == 0
    summary = d.wait(60)
    switches = [g["compression_switches"] for g in summary["gradient_compression"]["groups"]
                if g.get("link_mbit") is not None]
    assert switches and max(switches) >= 1, summary["gradient_compression"]
