#!/usr/bin/env python3
"""What the dashboard costs (docs/benchmarks.md "Dashboard"): a real daemon with N
trainers (default 64) whose emulated device time is long (--device-ms, default 500), so
the daemon handles every trainer's heartbeats while the machine stays mostly idle.

Once all trainers train it measures, over --seconds each:
  quiet: nobody polls /api/state (the coordinator still publishes its view twice a second);
  page:  a client polls /api/state as the page does (every 0.5 s; --poll-s to change).
For each phase the daemon's CPU (utime+stime of the process, in % of one core), the
coordinator's own CPU spent building the views (publish_cpu_s of the view) and the CPU of
the metrics endpoint's thread (named "metrics"; clock ticks, so 0.033% resolution over 30 s). Then the page
load: the HTTP time of /, its two files and one /api/state from a fresh connection each,
and headless Chromium's wall time to a DOM drawn with data less its time for about:blank. Prints one JSON object.

  scripts/bench/dashboard_cost.py --build-dir build [--workers 64] [--seconds 30]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid, name):
    # The metrics endpoint's thread (named "metrics"): serves the page and /api/state.
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if open(f"/proc/{pid}/task/{tid}/comm").read().strip() != name:
                continue
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def view(base):
    return json.loads(get(base + "/api/state"))["jobs"]["default"]


def phase(pid, base, seconds, poll_s):
    v0 = view(base)["publish_cpu_s"]
    c0, h0, t0 = cpu_s(pid), thread_cpu_s(pid, "metrics"), time.monotonic()
    polls, bytes_total = 0, 0
    while time.monotonic() - t0 < seconds:
        if poll_s:
            bytes_total += len(get(base + "/api/state"))
            polls += 1
            time.sleep(poll_s)
        else:
            time.sleep(0.2)
    c1, h1, t1 = cpu_s(pid), thread_cpu_s(pid, "metrics"), time.monotonic()
    v1 = view(base)["publish_cpu_s"]
    wall = t1 - t0
    return {"wall_s": round(wall, 1), "daemon_cpu_pct": round(100 * (c1 - c0) / wall, 2),
            "publish_cpu_pct": round(100 * (v1 - v0) / wall, 3),
            "http_thread_cpu_pct": round(100 * (h1 - h0) / wall, 3), "polls": polls,
            "state_bytes": bytes_total // polls if polls else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--device-ms", type=float, default=500)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--poll-s", type=float, default=0.5)
    args = ap.parse_args()
    daemon_bin = os.path.join(args.build_dir, "daemon", "groupsgdd")
    worker_bin = os.path.join(args.build_dir, "worker", "groupsgd-worker")
    work = tempfile.mkdtemp(prefix="gsgd-dashboard-cost-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    procs = []
    try:
        daemon = subprocess.Popen(
            [daemon_bin, "--mode", "adaptive", "--workers", str(args.workers), "--batch-size", "32",
             "--listen", "tcp://127.0.0.1:0", "--endpoint-file", work + "/endpoint",
             "--max-seconds", "3600", "--heartbeat-ms", "250", "--control-ms", "500",
             "--metrics-listen", f"127.0.0.1:{port}", "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=open(work + "/daemon.log", "w"), env=env)
        procs.append(daemon)
        while not os.path.exists(work + "/endpoint") or not open(work + "/endpoint").read():
            time.sleep(0.05)
        endpoint = open(work + "/endpoint").read().strip()
        for i in range(args.workers):
            procs.append(subprocess.Popen(
                [worker_bin, "--coordinator", endpoint, "--device-ms", str(args.device_ms),
                 "--name", f"w{i + 1}", "--log-level", "warn"],
                stderr=subprocess.DEVNULL, env=env))
        procs.append(subprocess.Popen([worker_bin, "--coordinator", endpoint, "--evaluate",
                                       "--name", "evaluator", "--log-level", "warn"],
                                      stderr=subprocess.DEVNULL, env=env))
        deadline = time.monotonic() + 300
        while True:
            try:
                v = view(base)
                active = v["status"]["workers"]["active"]
                if active == args.workers and v["status"]["samples_trained"] > 0:
                    break
            except (OSError, KeyError, ValueError):
                active = 0
            if time.monotonic() > deadline:
                sys.exit(f"only {active} of {args.workers} trainers after 300 s")
            time.sleep(1)
        time.sleep(5)  # past the registrations' burst
        out = {"bench": "dashboard", "workers": args.workers, "device_ms": args.device_ms,
               "quiet": phase(daemon.pid, base, args.seconds, 0),
               "page": phase(daemon.pid, base, args.seconds, args.poll_s)}
        # The page's load: each resource from a fresh connection, as a first visit.
        t = time.monotonic()
        for path in ("/", "/dashboard.js", "/dashboard.css", "/api/state"):
            get(base + path)
        out["http_load_ms"] = round(1000 * (time.monotonic() - t), 1)
        browser = shutil.which("chromium")
        if browser:
            # Headless Chromium's wall time to a DOM drawn with data (the page's first
            # answer rendered: virtual time runs its timers once the fetch is in), less its
            # wall time for about:blank with the same flags: what the page adds to a bare
            # browser start. 5 of each, medians.
            def wall(url):
                with tempfile.TemporaryDirectory() as profile:
                    t = time.monotonic()
                    r = subprocess.run(
                        [browser, "--headless=new", "--disable-gpu", "--no-sandbox",
                         f"--user-data-dir={profile}", "--virtual-time-budget=100",
                         "--dump-dom", url], capture_output=True, text=True, timeout=120)
                    return time.monotonic() - t, r.stdout
            blank, page, rows = [], [], 0
            for _ in range(5):
                blank.append(wall("about:blank")[0])
                took, dom = wall(base + "/")
                rows = len(re.findall(r"data-worker=", dom))
                if 'data-first-render-ms=' in dom:
                    page.append(took)
            median = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
            out["browser_blank_s"] = round(median(blank), 3)
            out["browser_page_s"] = round(median(page), 3) if page else None
            out["browser_page_extra_ms"] = (round(1000 * (median(page) - median(blank)), 0)
                                            if page else None)
            out["browser_worker_rows"] = rows
        print(json.dumps(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
