#!/usr/bin/env python3
"""groupsgd (adaptive) against PyTorch DistributedDataParallel (gloo) on the same script,
examples/pytorch/train_fashion_mnist.py: N workers, one of them a straggler (slowdown F on
emulated device time), time to the target test accuracy, medians of R runs; then the
per-step overhead of the Python binding for a 10M-parameter model.

  scripts/bench.sh pytorch [--quick] [--repeats R] [--workers N] ...
One JSON line per run, then a summary line {"bench": "pytorch", ...} (docs/benchmarks.md).
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
EXAMPLE = os.path.join(ROOT, "examples", "pytorch", "train_fashion_mnist.py")
GROUPSGDD = os.path.join(BUILD, "daemon", "groupsgdd")
ENV = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), OMP_NUM_THREADS="1",
           OPENBLAS_NUM_THREADS="1")


def emit(obj):
    print(json.dumps(obj), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_file(path, proc, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        if proc.poll() is not None:
            raise RuntimeError("groupsgdd exited early")
        time.sleep(0.05)
    raise RuntimeError("no endpoint file")


def reap(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def worker_args(a, i, straggler):
    slow = a.slowdown if straggler and i == 0 else 1.0
    return ["--model", a.model, "--device-ms", str(a.device_ms), "--slowdown", str(slow),
            "--seed", "1"]


def run_groupsgd(a, straggler, tmp):
    d = tempfile.mkdtemp(dir=tmp)
    ep_file, summary_file = os.path.join(d, "endpoint"), os.path.join(d, "summary.json")
    log = open(os.path.join(d, "daemon.log"), "w")
    daemon = subprocess.Popen(
        [GROUPSGDD, "--model", "external", "--mode", "adaptive", "--workers", str(a.workers),
         "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--momentum", str(a.momentum),
         "--target-acc", str(a.target), "--max-seconds", str(a.max_seconds), "--listen",
         "tcp://127.0.0.1:0", "--endpoint-file", ep_file, "--summary-file", summary_file,
         "--progress-ms", "0", "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    procs = []
    try:
        ep = wait_file(ep_file, daemon)
        barrier = os.path.join(d, "barrier")
        os.mkdir(barrier)
        for i in range(a.workers):
            procs.append(subprocess.Popen(
                [sys.executable, EXAMPLE, "--coordinator", ep, "--name", f"w{i}", "--start-barrier", barrier,
                 *worker_args(a, i, straggler)],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, f"w{i}.log"), "w"), env=ENV))
        interval = [] if a.eval_interval_s is None else ["--eval-interval-s", str(a.eval_interval_s)]
        procs.append(subprocess.Popen(
            [sys.executable, EXAMPLE, "--coordinator", ep, "--evaluate", "--model", a.model,
             *interval], stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(d, "evaluator.log"), "w"), env=ENV))
        # Every worker has loaded its data: let them register together (DDP's clock, too,
        # starts once every rank has joined).
        deadline = time.monotonic() + 300
        while len([f for f in os.listdir(barrier) if f.startswith("ready.")]) < a.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("workers did not get ready")
            time.sleep(0.05)
        open(os.path.join(barrier, "go"), "w").close()
        daemon.wait(timeout=a.max_seconds + 120)
        s = json.load(open(summary_file))
        return {"time_to_target_s": s.get("time_to_target_s"), "reached": s.get("time_to_target_s") is not None,
                "final_test_acc": s.get("final_test_acc"), "elapsed_s": s.get("elapsed_s"),
                "regroups": s.get("regroups"), "accounting_ok": s.get("accounting_ok")}
    finally:
        reap(procs + [daemon])


def run_ddp(a, straggler, tmp):
    env = dict(ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = []
    out = None
    try:
        for i in range(a.workers):
            procs.append(subprocess.Popen(
                [sys.executable, EXAMPLE, "--ddp", "--rank", str(i), "--world-size", str(a.workers),
                 "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--momentum", str(a.momentum),
                 "--target-acc", str(a.target), "--max-seconds", str(a.max_seconds), "--json",
                 *worker_args(a, i, straggler)],
                stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env, text=True))
        stdout, _ = procs[0].communicate(timeout=a.max_seconds * 3 + 120)
        last_acc = None
        for line in stdout.splitlines():
            row = json.loads(line)
            if row.get("role") == "ddp":
                last_acc = row["acc"]
            if row.get("bench") == "ddp_run":
                out = row
        if out is None:
            raise RuntimeError("DDP rank 0 printed no result")
        return {"time_to_target_s": out["time_to_target_s"], "reached": out["reached"],
                "final_test_acc": last_acc, "elapsed_s": out["training_s"]}
    finally:
        reap(procs)


def binding_overhead(a, tmp):
    """One worker, the 10M-parameter model: the time per step the binding adds on the
    Python side (gathering and zeroing the gradient buffer, the call into C++) as a
    fraction of the whole step (forward, backward, binding, exchange)."""
    sys.path.insert(0, os.path.join(BUILD, "python"))
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    import torch
    import torch.nn.functional as F
    import groupsgd.torch as gt
    import train_fashion_mnist as ex

    torch.set_num_threads(1)
    d = tempfile.mkdtemp(dir=tmp)
    ep_file = os.path.join(d, "endpoint")
    daemon = subprocess.Popen(
        [GROUPSGDD, "--model", "external", "--mode", "sync", "--workers", "1", "--batch-size",
         str(a.batch_size), "--max-seconds", "600", "--listen", "tcp://127.0.0.1:0",
         "--endpoint-file", ep_file, "--progress-ms", "0", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ep = wait_file(ep_file, daemon)
        model = ex.make_model(a.overhead_model, 1)
        w = gt.Worker(model, coordinator=ep, name="overhead", log_level="error")
        x, y = torch.randn(w.batch_size, 1, 28, 28), torch.randint(0, 10, (w.batch_size,))
        steps, binding, exchange = [], [], []
        for i in range(a.overhead_steps + 2):
            t0 = time.perf_counter()
            F.cross_entropy(model(x), y).backward()
            w.step()
            if i >= 2:  # warm-up
                steps.append(time.perf_counter() - t0)
                binding.append(w.timing["binding_s"])
                exchange.append(w.timing["exchange_s"])
        w.close()
        med = statistics.median
        return {"param_count": w.param_count, "step_ms": 1000 * med(steps),
                "binding_ms": 1000 * med(binding), "exchange_ms": 1000 * med(exchange),
                "binding_overhead": med(binding) / med(steps)}
    finally:
        reap([daemon])


def run_cases(a, tmp, systems, row_fields, failed_fields):
    """Runs every (system, straggler or not) case a.repeats times, one JSON line a run
    (row_fields, the case, and what the system's function returns); a run that raises is
    reported with its error and failed_fields. --only NAME:straggler|none keeps one case.
    Returns {(system, straggler): [rows]}."""
    results = {}
    for straggler in (True, False):
        for system, fn in systems:
            if a.only and a.only != f"{system}:{'straggler' if straggler else 'none'}":
                continue
            runs = []
            for r in range(a.repeats):
                row = dict(row_fields, system=system, straggler=straggler, repeat=r,
                           workers=a.workers, slowdown=a.slowdown if straggler else 1.0,
                           device_ms=a.device_ms)
                try:
                    row.update(fn(a, straggler, tmp))
                except Exception as e:  # a failed run is reported, and the summary says not ok
                    row.update(dict(failed_fields, error=str(e)))
                emit(row)
                runs.append(row)
            results[(system, straggler)] = runs
    return results


def median_time(runs, cap):
    """Median time to target; a run that missed it counts as the time limit (censored)."""
    return statistics.median(r["time_to_target_s"] if r["reached"] else cap for r in runs)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="smoke run: 2 workers, target 0.75, 1 repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--slowdown", type=float, default=4.0)
    p.add_argument("--device-ms", type=float, default=30.0)
    p.add_argument("--model", default="mlp")
    p.add_argument("--target", type=float, default=0.85)
    p.add_argument("--max-seconds", type=float, default=240)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--eval-interval-s", type=float, default=None,
                   help="the groupsgd evaluator's interval (how late it may see the target); "
                        "default: the example's own pacing")
    p.add_argument("--overhead-model", default="wide10")
    p.add_argument("--overhead-steps", type=int, default=20)
    p.add_argument("--only", default="", help="one case, e.g. ddp:straggler, or overhead: the binding overhead alone (no summary line)")
    a = p.parse_args()
    if a.quick:
        # Shape only: 2 workers, a 2M-parameter model for the overhead.
        a.repeats, a.workers, a.target, a.max_seconds = 1, 2, 0.75, 60
        a.overhead_model, a.overhead_steps = "wide2", 5
    tmp = tempfile.mkdtemp(prefix="groupsgd-bench-pytorch-")
    results = run_cases(a, tmp, (("groupsgd", run_groupsgd), ("ddp", run_ddp)),
                        {"bench": "pytorch_run", "model": a.model, "target": a.target},
                        {"reached": False, "time_to_target_s": None})
    if a.only and a.only != "overhead":
        return 0
    ov = binding_overhead(a, tmp)
    emit(dict(bench="pytorch_overhead", model=a.overhead_model, **ov))
    if a.only:
        return 0
    t = {k: median_time(v, a.max_seconds) for k, v in results.items()}
    ok = all("error" not in r for runs in results.values() for r in runs)
    summary = {
        "bench": "pytorch", "ok": ok, "workers": a.workers, "slowdown": a.slowdown,
        "device_ms": a.device_ms, "model": a.model, "target": a.target, "repeats": a.repeats,
        "ddp_s": t[("ddp", True)], "groupsgd_s": t[("groupsgd", True)],
        "speedup_vs_ddp": t[("ddp", True)] / t[("groupsgd", True)],
        "ddp_no_straggler_s": t[("ddp", False)], "groupsgd_no_straggler_s": t[("groupsgd", False)],
        "no_straggler_ratio": t[("groupsgd", False)] / t[("ddp", False)],
        "binding_overhead": ov["binding_overhead"], "overhead_param_count": ov["param_count"],
        "reached": {f"{s}{'' if g else '_no_straggler'}": sum(r["reached"] for r in v)
                    for (s, g), v in results.items()},
    }
    summary["targets_met"] = {"speedup_vs_ddp_ge_2": summary["speedup_vs_ddp"] >= 2,
                              "no_straggler_within_1_1": summary["no_straggler_ratio"] <= 1.1,
                              "binding_overhead_le_0_05": summary["binding_overhead"] <= 0.05}
    emit(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
