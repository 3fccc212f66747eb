"""Fixtures for the Python tests: a real groupsgdd on loopback, worker processes running
the example script, and the groupsgd package from the build tree (PYTHONPATH)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

GROUPSGDD = os.environ.get("GROUPSGDD", "")
GROUPSGDCTL = os.environ.get("GROUPSGDCTL", "")
WORKER = os.environ.get("GROUPSGD_WORKER", "")
SOURCE_DIR = os.environ.get("GROUPSGD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "pytorch", "train_fashion_mnist.py")


def wait_for(predicate, timeout, what):
    """Polls predicate until it is true (never a fixed sleep for ordering)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Daemon:
    def __init__(self, tmp_path, *args):
        self.dir = tmp_path
        self.endpoint_file = tmp_path / "endpoint"
        self.summary_file = tmp_path / "summary.json"
        self.control = tmp_path / "control.sock"
        self.log_path = tmp_path / "daemon.log"
        self.log = open(self.log_path, "w")
        cmd = [GROUPSGDD, "--listen", "tcp://127.0.0.1:0", "--endpoint-file", str(self.endpoint_file),
               "--summary-file", str(self.summary_file), "--progress-ms", "0",
               "--control-socket", str(self.control), *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.endpoint = wait_for(self._read_endpoint, 20, "the daemon's endpoint file")

    def _read_endpoint(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"groupsgdd exited with {self.proc.returncode}: {self.log_text()}")
        try:
            return self.endpoint_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def log_text(self):
        self.log.flush()
        return self.log_path.read_text()

    def ctl(self, *args):
        out = subprocess.run([GROUPSGDCTL, "--socket", str(self.control), *args], capture_output=True,
                             text=True, timeout=30)
        return out

    def wait(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=30)
            raise AssertionError(f"the daemon did not finish within {timeout} s: {self.log_text()[-3000:]}")
        return json.loads(self.summary_file.read_text())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def daemon(tmp_path):
    started = []

    def start(*args):
        sub = tmp_path / f"daemon{len(started)}"
        sub.mkdir()
        d = Daemon(sub, *args)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def spawn_example(tmp_path, name, *args):
    """The example script as a groupsgd process; its output goes to tmp_path/name.log."""
    log = open(tmp_path / f"{name}.log", "w")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, EXAMPLE, "--name", name, *map(str, args)], stdout=log,
                            stderr=subprocess.STDOUT, env=env)
    proc.log_path = tmp_path / f"{name}.log"  # for assertion messages
    return proc


@pytest.fixture
def processes():
    procs = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def in_threads(fns, timeout=240):
    """Runs each of fns on a thread of its own and joins them; the first exception any
    raised is raised here, and a thread still running after `timeout` s fails the test."""
    errors = []

    def guard(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]


def checkpoint_of_evaluators_version(d, ev, tries=20):
    """Asks daemon d for a checkpoint until it is of the central version evaluator ev also
    holds (training may still move the model between the two); the checkpoint's result."""
    for _ in range(tries):
        before = ev.fetch()
        out = d.ctl("--json", "--timeout-ms", "30000", "checkpoint")
        assert out.returncode == 0, out.stdout + out.stderr
        done = json.loads(out.stdout)
        done = done.get("result", done)
        if before == done["version"] == ev.fetch():
            break
    return done
