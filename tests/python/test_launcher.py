"""The launcher (python3 -m groupsgd.run): a whole run of a tiny script with a daemon it
starts, a stop by SIGINT in the middle of one, and bad input refused before anything runs."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from conftest import GROUPSGDD, wait_for  # noqa: E402

# A 2-layer model on random data. Trainers train until the daemon says stop, the evaluator
# reports the accuracy of each central model; each writes its pid into PIDS/<name> and
# every trainer prints a line after its first step.
SCRIPT = r'''
import os
import sys

import torch
import torch.nn.functional as F

import groupsgd.torch as gt

name, role = os.environ["GROUPSGD_NAME"], os.environ["GROUPSGD_ROLE"]
with open(os.path.join(sys.argv[1], name), "w") as f:
    f.write(str(os.getpid()))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
g = torch.Generator().manual_seed(1)
x = torch.randn(512, 20, generator=g)
y = x[:, :4].argmax(dim=1)
if role == "evaluator":
    ev = gt.Evaluator(model, connect_timeout_ms=60000)
    ev.run(lambda: [(x, y)], interval_s=0.2,
           on_result=lambda v, a: print(f"evaluator: version {v} accuracy {a:.3f}", flush=True))
else:
    # Both trainers register together: under load one alone could train the whole
    # sample budget before the other's interpreter has started.
    import time
    deadline = time.monotonic() + 60
    trainers = int(os.environ.get("TEST_TRAINERS", "1"))
    while time.monotonic() < deadline and sum(
            n != "evaluator" for n in os.listdir(sys.argv[1])) < trainers:
        time.sleep(0.05)
    w = gt.Worker(model, connect_timeout_ms=60000)
    rank = os.environ["GROUPSGD_LOCAL_RANK"]
    while not w.should_stop:
        i = torch.randint(0, 512, (w.batch_size,))
        loss = F.cross_entropy(model(x[i]), y[i])
        loss.backward()
        w.step(loss)
        if w.steps == 1:
            print(f"trainer {name} rank {rank} stepped", flush=True)
    print(f"trainer {name} done after {w.steps} steps", flush=True)
    w.close()
'''

QUIET = "--heartbeat-ms 300 --log-level warn --progress-ms 0 --batch-size 16"


def launch(tmp_path, *args, trainers=1, **popen):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir(exist_ok=True)
    out = open(tmp_path / "launcher.out", "w")
    err = open(tmp_path / "launcher.err", "w")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               TEST_TRAINERS=str(trainers))
    cmd = [sys.executable, "-m", "groupsgd.run", *args, str(script), str(pids)]
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, **popen)
    proc.out, proc.err, proc.pids = tmp_path / "launcher.out", tmp_path / "launcher.err", pids
    return proc


def text(proc):
    return f"stdout:\n{proc.out.read_text()}\nstderr:\n{proc.err.read_text()}"


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has exited
    except (FileNotFoundError, IndexError):
        return False


def daemon_pid(proc):
    for line in proc.err.read_text().splitlines():
        if "groupsgdd (pid " in line:
            return int(line.split("groupsgdd (pid ")[1].split(")")[0])
    return None


def summary_of(proc):
    lines = proc.out.read_text().strip().splitlines()
    assert lines, text(proc)
    return json.loads(lines[-1])  # the last line: the daemon's summary, one JSON object


def test_a_run_with_two_workers_and_the_evaluator(tmp_path):
    proc = launch(tmp_path, "--workers", "2", "--evaluate", "--daemon", GROUPSGDD, "--daemon-args",
                  f"{QUIET} --mode sync --max-samples 3000 --max-seconds 120", trainers=2)
    try:
        rc = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, text(proc)
    summary = summary_of(proc)
    assert summary["config"]["model"] == "external"
    assert summary["config"]["max_samples"] == 3000
    names = {w["name"] for w in summary["worker_stats"]}
    assert {"w0", "w1"} <= names, summary["worker_stats"]
    assert summary["samples_trained"] >= 3000 and summary["accounting_ok"], summary
    out = proc.out.read_text()
    assert "trainer w0 rank 0 stepped" in out and "trainer w1 rank 1 stepped" in out, text(proc)
    assert "evaluator: version" in out, text(proc)
    assert sorted(p.name for p in proc.pids.iterdir()) == ["evaluator", "w0", "w1"]
    pid = daemon_pid(proc)
    assert pid and not alive(pid)


def test_log_dir_keeps_each_process_s_output_and_the_summary(tmp_path):
    logs = tmp_path / "logs"
    proc = launch(tmp_path, "--workers", "2", "--evaluate", "--log-dir", str(logs), "--no-summary",
                  "--daemon", GROUPSGDD, "--daemon-args",
                  f"{QUIET} --mode sync --max-samples 1000 --max-seconds 120")
    try:
        rc = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, text(proc)
    assert sorted(p.name for p in logs.iterdir()) == [
        "daemon.log", "evaluator.log", "summary.json", "w0.log", "w1.log"]
    # Each trainer's own lines in its own file. Which of them stepped is not asked: with a
    # 1000-sample budget a trainer whose torch start-up is slow (a loaded machine) comes
    # after the run and says "trainer w1 done after 0 steps".
    assert "trainer w0 " in (logs / "w0.log").read_text()
    assert "trainer w1 " in (logs / "w1.log").read_text()
    assert "trainer w1 " not in (logs / "w0.log").read_text()
    assert "evaluator: version" in (logs / "evaluator.log").read_text()
    out = proc.out.read_text()
    assert "stepped" not in out, text(proc)  # on the workers' logs, not the terminal
    summary = json.loads((logs / "summary.json").read_text())
    assert summary["samples_trained"] >= 1000 and summary["accounting_ok"], summary
    # --no-summary: the daemon's own closing line ends stdout, not the JSON line.
    assert not out.strip() or not out.strip().splitlines()[-1].startswith("{"), text(proc)


def test_sigint_stops_the_whole_run(tmp_path):
    proc = launch(tmp_path, "--workers", "2", "--evaluate", "--stop-timeout", "10",
                  "--daemon", GROUPSGDD, "--daemon-args", f"{QUIET} --mode async --max-seconds 200")
    try:
        out = lambda: proc.out.read_text()
        # Every child has written its pid (the evaluator may start after the trainers step).
        written = lambda: [p for p in proc.pids.iterdir() if p.read_text().strip()]
        wait_for(lambda: proc.poll() is not None or
                 ("w0 rank 0 stepped" in out() and "w1 rank 1 stepped" in out() and
                  len(written()) == 3), 180, "both trainers stepping and every pid written")
        assert proc.poll() is None, text(proc)
        pids = [int(p.read_text()) for p in written()] + [daemon_pid(proc)]
        assert len(pids) == 4 and all(pids), pids
        assert all(alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        rc = proc.wait(timeout=40)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + signal.SIGINT, text(proc)
    assert took < 20, f"{took:.1f} s to stop\n{text(proc)}"
    wait_for(lambda: not any(alive(p) for p in pids), 5, "no child process left")
    summary = summary_of(proc)  # the daemon stopped cleanly and summed up the run
    assert summary["accounting_ok"], summary
    assert {"w0", "w1"} <= {w["name"] for w in summary["worker_stats"]}
    assert "stopping the run" in proc.err.read_text()


def test_attached_to_a_running_daemon(daemon, tmp_path):
    d = daemon("--model", "external", "--workers", "2", "--max-seconds", "4", "--batch-size", "16",
               "--heartbeat-ms", "300", "--log-level", "warn")
    proc = launch(tmp_path, "--workers", "2", "--name-prefix", "host-a-", "--coordinator",
                  d.endpoint)
    try:
        rc = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, text(proc)
    assert "trainer host-a-1 rank 1 stepped" in proc.out.read_text(), text(proc)
    assert daemon_pid(proc) is None  # it started none
    summary = d.wait(60)
    assert {"host-a-0", "host-a-1"} <= {w["name"] for w in summary["worker_stats"]}, summary


def test_failing_trainers_stop_the_daemon(tmp_path):
    # A script that fails before it registers: the daemon (model external) would wait for
    # a model forever; the launcher stops it and fails.
    script = tmp_path / "fail.py"
    script.write_text("import sys\nsys.exit(5)\n")
    proc = subprocess.run([sys.executable, "-m", "groupsgd.run", "--workers", "2", "--daemon",
                           GROUPSGDD, "--daemon-args", QUIET, str(script)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc
    assert "worker w0 exited with 5" in proc.stderr and "stopping the daemon" in proc.stderr, proc
    pid = int(proc.stderr.split("groupsgdd (pid ")[1].split(")")[0])
    assert not alive(pid)


def test_bad_input_is_refused_without_a_daemon_left(tmp_path):
    env = dict(os.environ)
    missing = subprocess.run([sys.executable, "-m", "groupsgd.run", "--workers", "2", "--daemon",
                              GROUPSGDD, str(tmp_path / "nope.py")], capture_output=True,
                             text=True, timeout=60, env=env)
    assert missing.returncode == 2, missing
    assert "no such script" in missing.stderr and "nope.py" in missing.stderr
    # A flag the daemon refuses: its exit status (2), and it is gone.
    proc = launch(tmp_path, "--workers", "1", "--daemon", GROUPSGDD, "--daemon-args",
                  "--no-such-flag 1")
    assert proc.wait(timeout=60) == 2, text(proc)
    assert "unknown option" in proc.err.read_text(), text(proc)
    assert not list(proc.pids.iterdir())  # no worker started
    # No groupsgdd: a clear error.
    proc = subprocess.run([sys.executable, "-m", "groupsgd.run", "--workers", "1", "--daemon",
                           str(tmp_path / "no-daemon"), str(tmp_path / "train.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no groupsgdd" in proc.stderr, proc
    # Usage errors are argparse's (exit 2).
    proc = subprocess.run([sys.executable, "-m", "groupsgd.run", str(tmp_path / "train.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--workers" in proc.stderr, proc
