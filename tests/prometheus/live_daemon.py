"""A live groupsgdd for the Prometheus tests: a daemon with its metrics endpoint, trainers
(one of them slowed down, so the adaptive mode flags a straggler) and an evaluator, each
logging into the test's directory; the exposition scraped over HTTP.

The programs come from the environment CTest sets (tests/prometheus/CMakeLists.txt):
GROUPSGDD, GROUPSGD_WORKER, GROUPSGDCTL."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    raise SystemExit(SKIP)


def need_tool(name):
    """The path of a Prometheus tool, or a skip saying what to install."""
    path = shutil.which(name)
    if path:
        return path
    skip(f"{name} not found (Debian package prometheus; scripts/install-deps.sh installs it)")


def wait_for(what, pred, timeout_s, every_s=0.2):
    """pred()'s first truthy value within timeout_s; fails naming `what` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)


def http_get(url, timeout_s=5):
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


def sample_value(text, series):
    """The value of one exposition line `series VALUE` (the series written exactly as the
    daemon writes it, labels included), or None."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line[len(series) + 1:])
    return None


def families(text):
    """Family names of an exposition (its # TYPE lines) -> type."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


class LiveDaemon:
    """groupsgdd and its workers in directory `tmp`; stop() ends them all."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.daemon = None
        self.workers = {}  # name -> Popen
        self.metrics_url = None
        self.endpoint = None
        self.groupsgdd = os.environ["GROUPSGDD"]
        self.worker_bin = os.environ["GROUPSGD_WORKER"]
        self.ctl_bin = os.environ["GROUPSGDCTL"]

    def start(self, args, serve=False):
        """Starts the daemon (metrics on a kernel-chosen port, control socket, endpoint
        file in tmp) and waits for its metrics URL and endpoint."""
        cmd = [self.groupsgdd, "--listen", "tcp://127.0.0.1:0",
               "--endpoint-file", f"{self.tmp}/endpoint",
               "--control-socket", f"{self.tmp}/ctl.sock",
               "--metrics-listen", "127.0.0.1:0", "--log-level", "info"]
        if serve:
            cmd += ["--serve", "--state-dir", f"{self.tmp}/state"]
        else:
            cmd += ["--summary-file", f"{self.tmp}/summary.json"]
        self.log_path = f"{self.tmp}/daemon.log"
        with open(self.log_path, "w") as log:
            self.daemon = subprocess.Popen(cmd + args, stdout=log, stderr=subprocess.STDOUT)

        def url():
            self.check_daemon_alive()
            m = re.search(r"metrics on (http://\S+/metrics)", open(self.log_path).read())
            return m.group(1) if m else None

        self.metrics_url = wait_for("the daemon's metrics URL in its log", url, 15)
        path = f"{self.tmp}/endpoint"
        wait_for("the endpoint file", lambda: os.path.exists(path) and os.path.getsize(path), 15)
        self.endpoint = open(path).read().strip()

    def check_daemon_alive(self):
        if self.daemon.poll() is not None:
            raise AssertionError(f"groupsgdd exited ({self.daemon.returncode}):\n" +
                                 open(self.log_path).read()[-3000:])

    def worker(self, name, *extra):
        """A C++ trainer (or evaluator with --evaluate) named `name`."""
        cmd = [self.worker_bin, "--coordinator", self.endpoint, "--name", name,
               "--log-level", "warn", *extra]
        with open(f"{self.tmp}/{name}.log", "w") as log:
            self.workers[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, name):
        p = self.workers.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def ctl(self, *args):
        out = subprocess.run([self.ctl_bin, "--socket", f"{self.tmp}/ctl.sock", "--json", *args],
                             capture_output=True, text=True, timeout=20)
        if out.returncode != 0:
            raise AssertionError(f"groupsgdctl {' '.join(args)} failed: {out.stderr}")
        return json.loads(out.stdout)

    def scrape(self):
        self.check_daemon_alive()
        return http_get(self.metrics_url)

    def wait_scrape(self, what, pred, timeout_s=30):
        """The first exposition for which pred(text) holds."""
        return wait_for(what, lambda: (lambda t: t if pred(t) else None)(self.scrape()),
                        timeout_s, every_s=0.3)

    def stop(self):
        # Workers first: they leave while the daemon still answers (a worker whose daemon
        # is gone retries for its whole timeout).
        for group in (list(self.workers.values()), [self.daemon] if self.daemon else []):
            for p in group:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in group:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.workers = {}


# Quick settings for a run on a loaded 2-core machine: short heartbeats (a killed
# worker is declared dead in ~1 s), the adaptive controller's window every 0.5 s.
FAST = ["--heartbeat-ms", "250", "--control-ms", "500", "--target-acc", "0",
        "--step-deadline-ms", "1000"]


def start_straggler_run(live, job_name, workers=4, mode="adaptive", extra=()):
    """A single run with `workers` trainers (w1 4x slower) and an evaluator."""
    live.start(["--mode", mode, "--workers", str(workers), "--job-name", job_name,
                "--max-seconds", "120", *FAST, *extra])
    for i in range(1, workers + 1):
        live.worker(f"w{i}", "--device-ms", "10", "--slowdown", "4" if i == 1 else "1")
    live.worker("evaluator", "--evaluate")


def label_value(value):
    """A label value escaped as the text format writes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
