"""A worker's safety nets against a real groupsgdd: a non-finite gradient skips the step
(never a bad update), a GradScaler's gradients are unscaled before the push, and Ctrl-C
ends any wait of the binding at once."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402

from conftest import wait_for  # noqa: E402

LR = 0.1
# Plain SGD (no momentum), no exchange with the central PS in the test's few steps: a
# step's update is exactly -LR * the group's mean gradient.
FAST = ["--heartbeat-ms", "300", "--model", "external", "--log-level", "warn", "--mode", "grouped",
        "--groups", "1",
        "--lr", str(LR), "--momentum", "0", "--exchange-period", "1000"]


def tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 10))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def set_grads(model, value):
    for p in model.parameters():
        p.grad.fill_(value)


def start_workers(endpoint, count, **kw):
    """`count` workers registering at once (the daemon forms the group when all came)."""
    models = [tiny() for _ in range(count)]
    out = [None] * count

    def make(i):
        out[i] = gt.Worker(models[i], coordinator=endpoint, name=f"w{i}", connect_timeout_ms=30000,
                           **kw)

    threads = [threading.Thread(target=make, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out), "a worker did not start"
    return models, out


def step_together(workers, grads):
    """One group step: worker i pushes gradients all equal to grads[i] (inf skips)."""
    results = [None] * len(workers)

    def run(i):
        set_grads(workers[i].model, grads[i])
        results[i] = workers[i].step(loss=1.0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_a_non_finite_gradient_is_skipped_never_a_strike_and_the_group_goes_on(daemon):
    # Two strikes would quarantine; the deadline is long, so a step that waited for the
    # skipping worker would take 30 s instead of milliseconds.
    d = daemon(*FAST, "--workers", "2", "--max-seconds", "120", "--step-deadline-ms", "30000",
               "--quarantine-after", "2")
    models, (a, b) = start_workers(d.endpoint, 2)
    try:
        assert a.batch_size == b.batch_size
        inf, nan = float("inf"), float("nan")
        plan = [(0.01, 0.02), (inf, 0.02), (nan, 0.03), (0.01, 0.02), (inf, -inf)]
        for step, grads in enumerate(plan):
            before = flat(a.model)
            started = time.monotonic()
            ra, rb = step_together([a, b], grads)
            took = time.monotonic() - started
            assert took < 10, f"step {step} waited {took:.1f} s for a skipping worker"
            skips = [not (g == g and abs(g) != inf) for g in grads]
            assert [ra["skipped_nonfinite"], rb["skipped_nonfinite"]] == skips, (step, ra, rb)
            assert ra["pushed"] and rb["pushed"]
            after = flat(a.model)
            assert torch.equal(after, flat(b.model))  # one replica for the group
            assert torch.isfinite(after).all()
            kept = [g for g, s in zip(grads, skips) if not s]
            if not kept:
                assert torch.equal(after, before), "a step of skips only changed the model"
            else:
                # The batch-weighted mean over the members that pushed: skips weigh 0.
                mean = sum(kept) / len(kept)
                assert torch.allclose(after, before - LR * mean, atol=1e-6), (step, grads)
        assert a.skipped_nonfinite == 3 and b.skipped_nonfinite == 1
        assert not a.quarantined and not b.quarantined
        # The run goes on: both still step together with finite gradients.
        ra, rb = step_together([a, b], (0.01, 0.01))
        assert ra["accepted"] and rb["accepted"] and not ra["skipped_nonfinite"]
        workers = d.ctl("--json", "workers").stdout
        assert "quarantined" not in workers, workers
    finally:
        a.close()
        b.close()
    assert "quarantined" not in d.log_text()


def test_backward_after_a_step_starts_from_zero_in_alternating_gradient_buffers(daemon):
    # A CPU worker without an optimizer of its own computes into one of two gradient
    # buffers while the other, just sent, is zeroed on a C++ thread (the zeroing is off the
    # step's critical path). A buffer not zeroed in time would add an old gradient to the
    # next one: the push would differ from the reference gradient and the update show it.
    d = daemon(*FAST, "--workers", "1", "--max-seconds", "120")
    (model,), (w,) = start_workers(d.endpoint, 1)
    try:
        torch.manual_seed(1)
        x, y = torch.randn(w.batch_size, 784), torch.randint(0, 10, (w.batch_size,))
        buffers = set()
        for step in range(6):
            params = list(model.parameters())
            assert all(float(p.grad.abs().sum()) == 0 for p in params), step
            buffers.add(params[0].grad.data_ptr())
            reference = torch.autograd.grad(
                torch.nn.functional.cross_entropy(model(x), y), params)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            for p, r in zip(params, reference):
                assert torch.allclose(p.grad, r, atol=1e-7), step
            before = flat(model)
            assert w.step(loss)["accepted"]
            expected = before - LR * torch.cat([r.reshape(-1) for r in reference])
            assert torch.allclose(flat(model), expected, atol=1e-6), step
        assert len(buffers) == 2  # the two buffers took turns
    finally:
        w.close()


class StandInScaler:
    """torch.cuda.amp.GradScaler's interface as Worker.step uses it (is_enabled, unscale_,
    update), for the CPU: torch disables the real one without CUDA (the real one is
    tested in test_torch_cuda.py). Backs off by half after a step with inf/NaN."""

    def __init__(self, scale):
        self.scale = scale
        self.found_inf = None
        self.unscaled = self.updates = 0

    def is_enabled(self):
        return True

    def get_scale(self):
        return self.scale

    def unscale_(self, optimizer):
        found = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad.mul_(1.0 / self.scale)
                found = found or not bool(torch.isfinite(p.grad).all())
        self.found_inf = found
        self.unscaled += 1

    def update(self):
        assert self.found_inf is not None, "update() without unscale_()"
        if self.found_inf:
            self.scale *= 0.5
        self.found_inf = None
        self.updates += 1


def test_a_scaler_s_gradients_are_unscaled_before_the_push_and_an_overflow_backs_it_off(daemon):
    d = daemon(*FAST, "--workers", "1", "--max-seconds", "120")
    model = tiny()
    w = gt.Worker(model, coordinator=d.endpoint, name="scaled", connect_timeout_ms=20000)
    try:
        scaler = StandInScaler(1024.0)
        before = flat(model)
        set_grads(model, 0.01 * 1024.0)  # as scaler.scale(loss).backward() leaves them
        r = w.step(loss=1.0, scaler=scaler)
        assert r["accepted"] and not r["skipped_nonfinite"]
        assert torch.allclose(flat(model), before - LR * 0.01, atol=1e-6)
        assert scaler.scale == 1024.0 and scaler.updates == 1
        # An overflow: nothing pushed, the model unchanged, the scale backed off.
        before = flat(model)
        set_grads(model, 0.01 * 1024.0)
        next(model.parameters()).grad[0, 0] = float("inf")
        r = w.step(loss=1.0, scaler=scaler)
        assert r["skipped_nonfinite"] and w.skipped_nonfinite == 1
        assert torch.equal(flat(model), before)
        assert scaler.scale == 512.0 and scaler.updates == 2
        # A disabled scaler (torch's own without CUDA) changes nothing.
        real = torch.cuda.amp.GradScaler(enabled=False)
        set_grads(model, 0.01)
        before = flat(model)
        assert not w.step(loss=1.0, scaler=real)["skipped_nonfinite"]
        assert torch.allclose(flat(model), before - LR * 0.01, atol=1e-6)
    finally:
        w.close()


# A child process that prints "ready", then blocks in the binding; on KeyboardInterrupt
# it prints the (system-wide) monotonic time it caught it at.
CHILD = r"""
import sys, time, torch
import groupsgd.torch as gt
what, endpoint = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 8), torch.nn.ReLU(),
                            torch.nn.Linear(8, 10))
try:
    if what == "register":
        print("ready", flush=True)
        gt.Worker(model, coordinator=endpoint, name="stuck", connect_timeout_ms=600000,
                  timeout_ms=600000, give_up_s=600)
    elif what == "fetch":  # the evaluator's fetch from a central PS that stopped answering
        ev = gt.Evaluator(model, coordinator=endpoint, timeout_ms=600000, give_up_s=600)
        print("ready", flush=True)
        while True:
            ev.fetch()
    elif what == "device":  # waits for a device another worker holds (argv: arbiter, locks)
        w = gt.Worker(model, coordinator=endpoint, name="waits", connect_timeout_ms=30000,
                      shared_device="dev0", arbiter=sys.argv[3] or None,
                      extra_args=["--device-lock-dir", sys.argv[4]])
        print("ready", flush=True)
        with w.device():
            pass
    else:
        w = gt.Worker(model, coordinator=endpoint, name="blocked", connect_timeout_ms=30000,
                      timeout_ms=600000, give_up_s=600)
        for p in model.parameters():
            p.grad.fill_(0.01)
        print("ready", flush=True)
        w.step(loss=1.0)
    print("returned", flush=True)
except KeyboardInterrupt:
    print("CAUGHT", time.monotonic(), flush=True)
    sys.exit(42)
"""


def interrupt_child(what, endpoint, *more, after_ready=None):
    """Seconds from the SIGINT to the child's KeyboardInterrupt (its own clock reading)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    child = subprocess.Popen([sys.executable, "-c", CHILD, what, endpoint, *map(str, more)],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line.strip() == "ready", line + child.stdout.read()
        if after_ready is not None:
            after_ready()
        time.sleep(1.0)  # well inside the binding's wait by now
        assert child.poll() is None
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
        assert child.returncode == 42, out
        caught = float(out.split("CAUGHT", 1)[1].split()[0])
        return caught - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ctrl_c_ends_a_registration_that_would_retry_for_minutes():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    latency = interrupt_child("register", endpoint)
    print(f"registration interrupted after {latency * 1000:.1f} ms")
    assert 0 <= latency < 1.5, latency  # the connect timeout is 600 s


def test_ctrl_c_ends_a_step_waiting_for_a_partner_that_never_pushes(daemon):
    d = daemon(*FAST, "--workers", "2", "--max-seconds", "300", "--step-deadline-ms", "600000")
    partner = []
    t = threading.Thread(target=lambda: partner.append(
        gt.Worker(tiny(), coordinator=d.endpoint, name="partner", connect_timeout_ms=60000)))
    t.start()  # registers and pulls (so the group waits for it), then never pushes
    try:
        latency = interrupt_child("step", d.endpoint)
        print(f"step interrupted after {latency * 1000:.1f} ms")
        assert 0 <= latency < 1.5, latency  # the step deadline and timeouts are 600 s
    finally:
        t.join()
        for w in partner:
            w.close()


@pytest.mark.parametrize("through", ["arbiter", "lock"])
def test_ctrl_c_ends_a_wait_for_a_shared_device_another_worker_holds(daemon, tmp_path, through):
    import socket

    args = ["--workers", "2", "--max-seconds", "300"]
    arbiter = ""
    if through == "arbiter":  # the wait is for the arbiter's lease (fifo: the holder first)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            arbiter = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        args += ["--arbiter-listen", arbiter, "--arbiter-policy", "fifo"]
    d = daemon(*FAST, *args)
    locks = tmp_path / "locks"
    holder = []
    t = threading.Thread(target=lambda: holder.append(gt.Worker(
        tiny(), coordinator=d.endpoint, name="holds", connect_timeout_ms=60000,
        shared_device="dev0", arbiter=arbiter or None,
        extra_args=["--device-lock-dir", str(locks)])))
    t.start()
    try:
        wait_for(lambda: holder or not t.is_alive(), 60, "the holder registered")
        t.join()
        with holder[0].device():  # held for the whole of the child's wait
            latency = interrupt_child("device", d.endpoint, arbiter, locks)
        print(f"device wait ({through}) interrupted after {latency * 1000:.1f} ms")
        assert 0 <= latency < 1.5, latency
    finally:
        t.join()
        for w in holder:
            w.close()


def test_ctrl_c_ends_an_evaluator_fetch_the_central_ps_does_not_answer(daemon):
    d = daemon(*FAST, "--workers", "1", "--max-seconds", "300")
    try:
        # SIGSTOP: the daemon (its central PS) stays connected but answers nothing.
        latency = interrupt_child("fetch", d.endpoint,
                                  after_ready=lambda: d.proc.send_signal(signal.SIGSTOP))
    finally:
        d.proc.send_signal(signal.SIGCONT)
    print(f"evaluator fetch interrupted after {latency * 1000:.1f} ms")
    assert 0 <= latency < 1.5, latency  # the fetch timeout is 600 s
