"""Process tests: a real groupsgdd (model external) with PyTorch workers and evaluator
running examples/pytorch/train_fashion_mnist.py (or groupsgd.torch in this process)."""

import signal
import subprocess
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402

from conftest import WORKER, checkpoint_of_evaluators_version, spawn_example, wait_for  # noqa: E402

# Small and quick on two loaded cores: the 100k-parameter MLP of the example.
SMALL = ["--model", "mlp", "--train-limit", "12000"]  # reading 60k images costs more than training
FAST = ["--heartbeat-ms", "300", "--model", "external", "--log-level", "warn"]


def test_four_pytorch_workers_and_the_evaluator_reach_080(daemon, processes, tmp_path):
    d = daemon(*FAST, "--mode", "adaptive", "--workers", "4", "--target-acc", "0.80",
               "--max-seconds", "50", "--batch-size", "32")
    # All four register together once each has imported torch and loaded its data: on a
    # loaded machine one worker's start-up once outlasted the others' run to 0.80 (CI:
    # worker_stats held 3), which is start-up time, not what this test is about.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    for i in range(4):
        processes.append(spawn_example(tmp_path, f"w{i}", *SMALL, "--coordinator", d.endpoint,
                                       "--start-barrier", barrier))
    wait_for(lambda: len(list(barrier.glob("ready.*"))) == 4, 180, "four workers ready")
    (barrier / "go").touch()
    processes.append(spawn_example(tmp_path, "evaluator", *SMALL, "--evaluate",
                                   "--coordinator", d.endpoint, "--eval-interval-s", "0.3"))
    summary = d.wait(240)  # process start-up (torch imports) is most of it on a loaded machine
    for p in processes:
        assert p.wait(timeout=30) == 0, p.log_path.read_text()
    assert summary["stop_reason"].startswith("target"), summary["stop_reason"]
    assert summary["reached"] and summary["acc_at_target"] >= 0.80, summary
    # The newest report may be of a newer model measured during the stop (SGD noise: one
    # clean-clone run measured 0.699 after reaching 0.828); the best one is the target's.
    assert summary["best_test_acc"] >= summary["acc_at_target"], summary
    assert summary["final_test_acc"] >= 0.60, summary
    assert summary["accounting_ok"]
    assert summary["config"]["model"] == "external"
    assert len(summary["worker_stats"]) == 4


def tiny(hidden=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def test_a_mismatched_model_is_refused_on_both_sides(daemon, tmp_path):
    d = daemon(*FAST, "--workers", "2", "--max-seconds", "60")
    first = gt.Worker(tiny(8), coordinator=d.endpoint, name="first", connect_timeout_ms=20000)
    try:
        assert first.param_count == 784 * 8 + 8 + 8 * 10 + 10
        # Other widths: another count. Same count, other names: another fingerprint.
        with pytest.raises(RuntimeError, match="model mismatch") as wider:
            gt.Worker(tiny(9), coordinator=d.endpoint, name="wider", connect_timeout_ms=5000)
        # The refusal names the first parameter that differs, with both shapes.
        assert "parameter '1.weight' is 9x784 in this worker, 8x784 in the daemon's model" \
            in str(wider.value), str(wider.value)
        renamed = tiny(8)
        renamed.add_module("extra", torch.nn.Identity())  # same parameters, same layout
        gt.Worker(renamed, coordinator=d.endpoint, name="same", connect_timeout_ms=5000).close()
        from collections import OrderedDict

        other = torch.nn.Sequential(OrderedDict(flat=torch.nn.Flatten(), a=torch.nn.Linear(784, 8),
                                                r=torch.nn.ReLU(), b=torch.nn.Linear(8, 10)))
        with pytest.raises(RuntimeError, match="fingerprint") as renamed_error:
            gt.Worker(other, coordinator=d.endpoint, name="renamed", connect_timeout_ms=5000)
        assert "parameter 0 is 'a.weight' (8x784) in this worker, '1.weight' (8x784) in the " \
            "daemon's model" in str(renamed_error.value), str(renamed_error.value)
        # The built-in trainer states no model at all.
        out = subprocess.run([WORKER, "--coordinator", d.endpoint, "--connect-timeout-ms", "5000"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and "external model" in out.stderr + out.stdout
        log = d.log_text()
        assert log.count("model mismatch") >= 2 and "states none" in log
        status = d.ctl("--json", "workers").stdout
        assert "wider" not in status and "renamed" not in status  # nothing registered
        # A parameter cast after wrapping: the next step() names it and pushes nothing.
        first.model[3].weight.data = first.model[3].weight.data.double()
        with pytest.raises(RuntimeError, match=r"parameter 3\.weight \(shape \(10, 8\)\) was cast "
                                               r"to torch\.float64 after the model was wrapped"):
            first.step(loss=1.0)
    finally:
        first.close()


def test_a_drained_and_a_killed_worker_keep_the_accounting(daemon, processes, tmp_path):
    d = daemon(*FAST, "--mode", "sync", "--workers", "4", "--max-seconds", "25",
               "--step-deadline-ms", "1000")
    for i in range(4):
        processes.append(spawn_example(tmp_path, f"w{i}", *SMALL, "--coordinator", d.endpoint))
    workers = lambda: d.ctl("--json", "workers").stdout
    wait_for(lambda: all(f'"w{i}"' in workers() for i in range(4)), 180, "four registered workers")
    wait_for(lambda: '"steps": 0' not in workers() and '"steps":0' not in workers(), 120, "steps")
    drained = d.ctl("--timeout-ms", "60000", "drain", "w1", "--wait")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert processes[1].wait(timeout=60) == 0  # a drained worker leaves cleanly
    processes[2].send_signal(signal.SIGKILL)
    processes[2].wait()
    assert d.ctl("shutdown").returncode == 0 or d.proc.poll() is not None
    summary = d.wait(90)
    assert summary["accounting_ok"], summary
    states = {w["name"]: w["state"] for w in summary["worker_stats"]}
    assert states["w1"] == "left" and states["w2"] == "dead", states
    assert summary["samples_trained"] == summary["samples_applied"] + summary["samples_dropped"]


def test_the_heartbeat_keeps_a_worker_alive_through_a_long_python_step(daemon, tmp_path):
    d = daemon(*FAST, "--heartbeat-ms", "200", "--heartbeat-misses", "3", "--mode", "sync", "--workers", "1",
               "--max-seconds", "60", "--step-deadline-ms", "500")
    model = tiny(8)
    w = gt.Worker(model, coordinator=d.endpoint, name="slow", connect_timeout_ms=20000)
    try:
        x, y = torch.randn(w.batch_size, 784), torch.randint(0, 10, (w.batch_size,))
        torch.nn.functional.cross_entropy(model(x), y).backward()
        assert w.step()["pushed"]
        sent = w.heartbeats_sent
        # 2 s of pure Python holding the GIL: > 3 heartbeat periods (and the death limit).
        deadline = time.monotonic() + 2.0
        n = 0
        while time.monotonic() < deadline:
            n += 1
        assert w.heartbeats_sent >= sent + 5  # sent by the C++ thread meanwhile
        torch.nn.functional.cross_entropy(model(x), y).backward()
        r = w.step()
        assert r["pushed"] and r["accepted"]
        assert w.registrations == 1  # never declared dead, never re-registered
        assert "declared dead" not in d.log_text()
    finally:
        w.close()


def test_the_initial_model_can_come_from_a_file(daemon, tmp_path):
    model = tiny(8)
    saved = [p.detach().clone() for p in model.parameters()]
    path = tmp_path / "model.bin"
    gt.save_model_file(model, path)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # this worker's own values differ from the file's
    d = daemon(*FAST, "--mode", "sync", "--workers", "1", "--external-model-file", path,
               "--max-seconds", "60")
    w = gt.Worker(model, coordinator=d.endpoint, name="from-file", connect_timeout_ms=20000)
    try:
        for p, s in zip(model.parameters(), saved):
            assert torch.equal(p.detach(), s)  # the replica is the file's model
        with pytest.raises(RuntimeError, match="model mismatch"):
            gt.Worker(tiny(9), coordinator=d.endpoint, name="other", connect_timeout_ms=5000)
    finally:
        w.close()


def test_a_worker_refused_because_the_run_is_over_stops_cleanly(daemon, tmp_path):
    # A worker that (re-)registers while the daemon drains at the end (as after a regroup
    # or a lost group PS) is told "finished": should_stop, not an exception in its loop.
    d = daemon(*FAST, "--mode", "sync", "--workers", "1", "--max-seconds", "1",
               "--step-deadline-ms", "5000")
    first = gt.Worker(tiny(8), coordinator=d.endpoint, name="stays", connect_timeout_ms=20000)
    try:
        # It never leaves, so the daemon stays in its drain until the drain deadline.
        wait_for(lambda: first.should_stop, 30, "the stop directive after --max-seconds")
        late = gt.Worker(tiny(8), coordinator=d.endpoint, name="late", connect_timeout_ms=5000)
        assert late.should_stop
        assert late.registrations == 0
        late.close()
    finally:
        first.close()
    summary = d.wait(60)
    assert summary["stop_reason"] == "time budget spent", summary["stop_reason"]


def test_a_daemon_checkpoint_loads_into_a_fresh_model(daemon, tmp_path):
    ckpt = tmp_path / "ckpt"
    d = daemon(*FAST, "--mode", "sync", "--workers", "1", "--max-seconds", "120",
               "--checkpoint-dir", ckpt, "--checkpoint-interval-s", "0")
    model = tiny(8)
    initial = [p.detach().clone() for p in model.parameters()]
    w = gt.Worker(model, coordinator=d.endpoint, name="trains", connect_timeout_ms=20000)
    ev = gt.Evaluator(tiny(8), coordinator=d.endpoint, connect_timeout_ms=20000)
    try:
        steps = 0
        while ev.fetch() < 3 and steps < 2000:  # until the central model has moved
            x, y = torch.randn(w.batch_size, 784), torch.randint(0, 10, (w.batch_size,))
            torch.nn.functional.cross_entropy(model(x), y).backward()
            w.step()
            steps += 1
        # The training has stopped: a checkpoint of the version the evaluator also holds.
        done = checkpoint_of_evaluators_version(d, ev)
        assert done["version"] >= 3, done
        fresh = tiny(8)
        assert gt.load_checkpoint(fresh, done["path"]) == done["version"]
        loaded = list(fresh.parameters())
        assert sum(p.numel() for p in loaded) == w.param_count
        for p, central, start in zip(loaded, ev.model.parameters(), initial):
            assert torch.isfinite(p).all()
            assert torch.equal(p.detach(), central.detach())  # the central model, bit for bit
        assert any(not torch.equal(p.detach(), s) for p, s in zip(loaded, initial))
        with pytest.raises(ValueError, match=f"holds {w.param_count} parameters, the model has"):
            gt.load_checkpoint(tiny(9), done["path"])
    finally:
        ev.close()
        w.close()


def test_the_final_model_is_measured_at_once_by_a_slow_python_evaluator(daemon, tmp_path):
    # The evaluator measures every 20 s; the coordinator's "measure now" at the end of the
    # run cuts its wait, so the final reading is of the final model and comes at once.
    d = daemon(*FAST, "--mode", "sync", "--workers", "1", "--max-samples", "3000",
               "--max-seconds", "60")
    model = tiny(8)
    w = gt.Worker(model, coordinator=d.endpoint, name="trains", connect_timeout_ms=20000)
    ev = gt.Evaluator(tiny(8), coordinator=d.endpoint, connect_timeout_ms=20000)
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    reader = threading.Thread(target=ev.run, kwargs=dict(test_batches=lambda: [(x, y)],
                                                          interval_s=20))
    reader.start()
    try:
        while not w.should_stop:
            xb, yb = torch.randn(w.batch_size, 784), torch.randint(0, 10, (w.batch_size,))
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            w.step()
        stopped = time.monotonic()
    finally:
        w.close()
    summary = d.wait(30)
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert time.monotonic() - stopped < 4.0, "the final reading waited out the interval"
    assert summary["final_acc_version"] == summary["central_version"], summary
    assert summary["accounting_ok"]
