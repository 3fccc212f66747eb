#!/usr/bin/env python3
"""A small job's fixed costs: where a short run's time goes before its first step and after
its target (docs/benchmarks.md "startup"). Each run is the C++ demo's set-up (groupsgdd
adaptive, W trainers of which one is 4x slower, the evaluator) launched by this script,
which notes when it started each process; the daemon's and the trainers' INFO lines (ISO
timestamps) say when each trainer registered and how its start-up went (the trainer's
"start-up:" line: dataset, registration, first pull, first step), the evaluator's DEBUG
lines when it first measured a trained model. Runs alternate between the host's dataset
cache on (warmed first) and off (GROUPSGD_DATA_CACHE=off: every trainer inflates the
training set), so the two are measured one after the other on the same machine.

  startup.py [--quick] [--repeats N] [--workers W] [--target A]

One JSON line per run on stdout, then the summary (medians per cache setting).
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("BUILD_DIR") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build")
DAEMON = os.path.join(BUILD, "daemon", "groupsgdd")
WORKER = os.path.join(BUILD, "worker", "groupsgd-worker")
STARTUP = re.compile(r"start-up: dataset (\d+) ms, registration (\d+) ms, first pull (\d+) ms, "
                     r"first step (\d+) ms; (\d+) ms")
READING = re.compile(r"central version (\d+): test accuracy")


def stamp(line):
    """Unix seconds of a log line that starts with an ISO 8601 UTC timestamp, or None."""
    head = line.split(" ", 1)[0]
    try:
        return datetime.datetime.fromisoformat(head.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lines(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def first_stamp(path, needle):
    for line in lines(path):
        if needle in line:
            return stamp(line)
    return None


def warm_cache(cache):
    """Loads the training set once so the cache holds its copy before the timed run."""
    subprocess.run([WORKER, "--coordinator", "tcp://127.0.0.1:1", "--connect-timeout-ms", "1",
                    "--log-level", "error"], env=dict(os.environ, GROUPSGD_DATA_CACHE=cache),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def one_run(work, cache, workers, target):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", GROUPSGD_DATA_CACHE=cache)
    ep = os.path.join(work, "endpoint")
    summary = os.path.join(work, "summary.json")
    procs = []
    launched = time.time()
    daemon = subprocess.Popen(
        [DAEMON, "--mode", "adaptive", "--workers", str(workers), "--batch-size", "32",
         "--listen", "tcp://127.0.0.1:0", "--endpoint-file", ep, "--target-acc", str(target),
         "--max-seconds", "120", "--summary-file", summary, "--heartbeat-ms", "250",
         "--control-ms", "500", "--log-level", "info"], env=env, stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(work, "daemon.log"), "w"))
    while not (os.path.exists(ep) and os.path.getsize(ep) > 0):
        if daemon.poll() is not None or time.time() - launched > 30:
            raise RuntimeError("the daemon did not start: " + "\n".join(
                lines(os.path.join(work, "daemon.log"))[-5:]))
        time.sleep(0.002)
    ready = time.time()
    endpoint = open(ep).read().strip()
    starts = []
    for i in range(1, workers + 1):
        starts.append(time.time())
        procs.append(subprocess.Popen(
            [WORKER, "--coordinator", endpoint, "--device-ms", "10", "--slowdown",
             "4" if i == 1 else "1", "--name", f"w{i}", "--log-level", "info"], env=env,
            stderr=open(os.path.join(work, f"w{i}.log"), "w")))
    procs.append(subprocess.Popen(
        [WORKER, "--coordinator", endpoint, "--evaluate", "--name", "evaluator",
         "--log-level", "debug"], env=env, stderr=open(os.path.join(work, "evaluator.log"), "w")))
    daemon.wait(timeout=180)
    daemon_exit = time.time()
    for p in procs:
        p.wait(timeout=60)
    all_exit = time.time()

    phases, first_steps = [], []
    for i in range(1, workers + 1):
        for line in lines(os.path.join(work, f"w{i}.log")):
            m = STARTUP.search(line)
            if m:
                phases.append([int(x) for x in m.groups()])
                first_steps.append(stamp(line))
    if len(phases) != workers:
        raise RuntimeError(f"{len(phases)} of {workers} trainers logged their start-up")
    registered = [stamp(l) for l in lines(os.path.join(work, "daemon.log"))
                  if "registered trainer" in l]
    stopping = first_stamp(os.path.join(work, "daemon.log"), "stopping:")
    reading = None
    for line in lines(os.path.join(work, "evaluator.log")):
        m = READING.search(line)
        if m and int(m.group(1)) > 0:
            reading = stamp(line)
            break
    with open(summary) as f:
        s = json.load(f)
    first_step = min(first_steps)

    def median_ms(k):
        return statistics.median(p[k] for p in phases)

    return {
        "cache": "off" if cache == "off" else "on", "workers": workers,
        "reached": s.get("reached"), "time_to_target_s": s.get("time_to_target_s"),
        "daemon_ready_s": ready - launched,
        "last_registration_after_last_start_s": max(registered) - starts[-1],
        "first_step_after_last_start_s": first_step - starts[-1],
        "trainer_dataset_ms": median_ms(0), "trainer_registration_ms": median_ms(1),
        "trainer_first_pull_ms": median_ms(2), "trainer_first_step_ms": median_ms(3),
        "trainer_startup_ms": median_ms(4),
        "first_reading_after_first_step_s": None if reading is None else reading - first_step,
        "target_to_daemon_exit_s": None if stopping is None else daemon_exit - stopping,
        "target_to_all_exit_s": None if stopping is None else all_exit - stopping,
        "launch_to_all_exit_s": all_exit - launched,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 trainers, one run per setting")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--target", type=float, default=0.80)
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.workers, args.target = 1, 4, 0.75
    for binary in (DAEMON, WORKER):
        if not os.access(binary, os.X_OK):
            sys.stderr.write(f"startup: {binary} is not built\n")
            return 2
    root = tempfile.mkdtemp(prefix="gsgd-startup-")
    cache = os.path.join(root, "cache")
    warm_cache(cache)
    runs = {"on": [], "off": []}
    try:
        for r in range(args.repeats):
            for setting in ("on", "off"):
                work = os.path.join(root, f"{setting}-{r}")
                os.makedirs(work)
                row = one_run(work, cache if setting == "on" else "off", args.workers,
                              args.target)
                row.update(bench="startup", repeat=r)
                runs[setting].append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(setting, key):
        values = [r[key] for r in runs[setting] if r[key] is not None]
        return statistics.median(values) if values else None

    keys = [k for k in runs["on"][0] if k.endswith(("_s", "_ms")) and k != "time_to_target_s"]
    keys.append("time_to_target_s")
    cases = {s: {k: med(s, k) for k in keys} for s in runs}
    print(json.dumps({
        "bench": "startup", "ok": all(r["reached"] for s in runs for r in runs[s]),
        "workers": args.workers, "repeats": args.repeats, "target": args.target,
        "cases": cases,
        "first_step_after_last_start_target_s": 0.3,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
