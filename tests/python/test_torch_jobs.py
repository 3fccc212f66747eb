"""Process tests: model external beyond a single role-all run. A job submitted to a
--serve daemon trains a PyTorch model its first worker brought (and keeps it across a
daemon restart); a role coordinator head with a node daemon trains one too, and so does
a --serve job whose group PS a node daemon in the daemon's pool serves."""

import json
import socket
import subprocess
import threading

import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402

from conftest import GROUPSGDD, wait_for  # noqa: E402

FAST = ["--heartbeat-ms", "300", "--log-level", "warn"]


def tiny(hidden=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def train_until_stopped(w, model, limit_steps=2000):
    """Random data: these tests check the plumbing and the accounting, not accuracy."""
    steps = 0
    while not w.should_stop and steps < limit_steps:
        x, y = torch.randn(w.batch_size, 784), torch.randint(0, 10, (w.batch_size,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        w.step(loss)
        steps += 1
    return steps


def train_one_worker(model, **worker_args):
    """A worker trains `model` until it is told to stop; its parameter count and steps."""
    w = gt.Worker(model, **worker_args)
    try:
        return w.param_count, train_until_stopped(w, model)
    finally:
        w.close()


def finished_job_summary(d, name, min_samples):
    """Waits for job `name` to finish; its summary, with exact accounting and enough samples."""
    wait_for(lambda: job_row(d, name)["state"] == "finished", 60, f"job {name} to finish")
    summary = ctl_json(d, "job", "summary", name)
    assert summary["accounting_ok"], summary
    assert summary["samples_trained"] >= min_samples
    return summary


def ctl_json(d, *args):
    out = d.ctl("--json", *args)
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout)


def job_row(d, name):
    rows = ctl_json(d, "job", "list")["jobs"]
    return next(r for r in rows if r["name"] == name)


def submit(d, tmp_path, job):
    path = tmp_path / f"{job['name']}.json"
    path.write_text(json.dumps(job))
    return ctl_json(d, "job", "submit", str(path))


def test_a_submitted_job_trains_an_external_model_and_keeps_it_across_a_restart(daemon, tmp_path):
    state = tmp_path / "state"
    serve = ["--serve", "--state-dir", state, *FAST]
    d = daemon(*serve)
    row = submit(d, tmp_path, {"name": "ext", "model": "external", "mode": "sync", "workers": 1,
                               "batch_size": 16, "max_samples": 1600})
    assert row["state"] == "running"
    assert job_row(d, "ext").get("awaiting_model") is True
    refused = d.ctl("--job", "ext", "workers")
    assert refused.returncode != 0 and "first worker's model" in refused.stderr + refused.stdout

    model = tiny(8)
    w = gt.Worker(model, coordinator=d.endpoint, name="a", job="ext", connect_timeout_ms=30000)
    try:
        assert "awaiting_model" not in job_row(d, "ext")
        with pytest.raises(RuntimeError, match="model mismatch"):
            gt.Worker(tiny(9), coordinator=d.endpoint, name="wider", job="ext", connect_timeout_ms=5000)
        assert train_until_stopped(w, model) >= 100
    finally:
        w.close()
    summary = finished_job_summary(d, "ext", 1600)
    assert summary["config"]["model"] == "external"
    assert (state / "jobs" / "ext" / "external_model.bin").exists()

    # A job still running when the daemon stops resumes with the model it was brought:
    # it waits for no worker, and still refuses another model.
    submit(d, tmp_path, {"name": "kept", "model": "external", "mode": "sync", "workers": 1,
                         "max_seconds": 600, "checkpoint_every_versions": 5})
    first = gt.Worker(tiny(8), coordinator=d.endpoint, name="b", job="kept", connect_timeout_ms=30000)
    first.close()
    d.stop()
    d2 = daemon(*serve)
    row = job_row(d2, "kept")
    assert row["state"] == "running" and "awaiting_model" not in row, row
    with pytest.raises(RuntimeError, match="model mismatch"):
        gt.Worker(tiny(9), coordinator=d2.endpoint, name="wider", job="kept", connect_timeout_ms=20000)
    stopped = ctl_json(d2, "job", "stop", "kept")
    assert stopped["name"] == "kept"
    wait_for(lambda: job_row(d2, "kept")["state"] == "stopped", 60, "job kept to stop")


def test_a_job_stopped_while_it_waits_for_its_model_ends_cleanly(daemon, tmp_path):
    d = daemon("--serve", "--state-dir", tmp_path / "state", *FAST)
    submit(d, tmp_path, {"name": "never", "model": "external", "workers": 1, "mode": "sync"})
    ctl_json(d, "job", "stop", "never")
    wait_for(lambda: job_row(d, "never")["state"] == "stopped", 30, "job never to stop")
    summary = ctl_json(d, "job", "summary", "never")
    assert summary["samples_trained"] == 0 and summary["accounting_ok"]
    assert "before any worker" in summary["stop_reason"]


def test_a_node_daemon_serves_the_group_of_an_external_model(daemon, tmp_path):
    head = daemon("--role", "coordinator", "--model", "external", "--mode", "sync", "--workers", "1",
                  "--batch-size", "16", "--max-samples", "1600", *FAST)
    node_log = open(tmp_path / "node.log", "w")
    node = subprocess.Popen([GROUPSGDD, "--role", "node", "--coordinator", head.endpoint,
                             "--node-groups", "1", "--model", "external", "--mode", "sync",
                             "--workers", "1", "--listen", "tcp://127.0.0.1:0", *FAST],
                            stdout=node_log, stderr=subprocess.STDOUT)
    try:
        params, steps = train_one_worker(tiny(8), coordinator=head.endpoint, name="a",
                                         connect_timeout_ms=60000)
        assert params == 784 * 8 + 8 + 8 * 10 + 10 and steps >= 100
        summary = head.wait(120)
        assert summary["accounting_ok"], summary
        assert summary["samples_trained"] >= 1600
        assert node.wait(timeout=60) == 0, (tmp_path / "node.log").read_text()
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
        node_log.close()


def test_a_serve_job_of_an_external_model_trains_on_a_node_daemon(daemon, tmp_path):
    # No group PS in the daemon itself: the job's only group runs on the node.
    d = daemon("--serve", "--state-dir", tmp_path / "state", "--max-group-slots", "0", *FAST)
    node_log = open(tmp_path / "node.log", "w")
    node = subprocess.Popen([GROUPSGDD, "--role", "node", "--coordinator", d.endpoint,
                             "--node-groups", "1", "--give-up-s", "30", *FAST],
                            stdout=node_log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ctl_json(d, "job", "list")["group_slots"]["node_slots"] == 1, 30,
                 "the node daemon to join the pool")
        row = submit(d, tmp_path, {"name": "ext", "model": "external", "mode": "sync", "workers": 1,
                                   "batch_size": 16, "max_samples": 1600})
        assert row["node_slots"] == 1 and row.get("awaiting_model") is True, row
        params, steps = train_one_worker(tiny(8), coordinator=d.endpoint, name="a", job="ext",
                                         connect_timeout_ms=60000)
        assert params == 784 * 8 + 8 + 8 * 10 + 10 and steps >= 100
        summary = finished_job_summary(d, "ext", 1600)
        assert any(e["kind"] == "node" for e in summary["events"]), summary["events"]
        # The node stays in the pool for the next job, its slot free again.
        slots = ctl_json(d, "job", "list")["group_slots"]
        assert slots["node_slots"] == 1 and slots["free"] == 1, slots
    finally:
        node.terminate()
        assert node.wait(timeout=30) == 0, (tmp_path / "node.log").read_text()
        node_log.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_python_workers_take_turns_on_a_shared_device(daemon, tmp_path):
    arbiter = f"tcp://127.0.0.1:{free_port()}"
    d = daemon("--model", "external", "--mode", "async", "--workers", "2", "--max-seconds", "120",
               "--arbiter-listen", arbiter, "--arbiter-policy", "fifo", *FAST)
    shared = dict(coordinator=d.endpoint, connect_timeout_ms=30000, shared_device="dev0",
                  arbiter=arbiter, extra_args=["--device-lock-dir", str(tmp_path / "locks")])
    model_a, model_b = tiny(8), tiny(8)
    a = gt.Worker(model_a, name="a", **shared)
    b = gt.Worker(model_b, name="b", **shared)
    try:
        assert a.shares_device and not a.holds_device
        b_computes = threading.Event()

        def b_step():
            with b.device():
                b_computes.set()

        with a.device():
            assert a.holds_device
            t = threading.Thread(target=b_step)
            t.start()
            # b waits (GIL released) while a holds the device.
            assert not b_computes.wait(1.0)
        assert b_computes.wait(20), "b never got the device after a gave it back"
        t.join(timeout=20)
        # step() gives the device back after the compute, as the C++ worker does.
        with a.device():
            x, y = torch.randn(a.batch_size, 784), torch.randint(0, 10, (a.batch_size,))
            loss = torch.nn.functional.cross_entropy(model_a(x), y)
            loss.backward()
        a._session.acquire_device()
        assert a.holds_device
        assert a.step(loss)["pushed"]
        assert not a.holds_device
    finally:
        a.close()
        b.close()
