#!/usr/bin/env python3
"""groupsgd (adaptive) against PyTorch DistributedDataParallel (gloo) on the character-level
transformer, examples/pytorch/train_char_lm.py: N workers, with and without one straggler
(slowdown F on emulated device time), each system training the same sample budget; the
time it takes (medians of R runs) and the validation loss at the budget.

  scripts/bench.sh lm [--quick] [--repeats R] [--workers N] [--optimizer workers|server] ...
One JSON line per run, then a summary line {"bench": "lm", ...} (docs/benchmarks.md).

Optimizer: `workers` (each groupsgd worker runs AdamW on its group's mean gradient, a
daemon with optimizer.placement=workers; DDP runs the same AdamW and schedule) when this
groupsgd has it (gt.Worker(model, optimizer=...)), else `server` (the group PS steps
momentum SGD; DDP the same momentum SGD at the same constant learning rate). --optimizer
forces one; the summary says which ran.
"""

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_bench import (BUILD, ENV, GROUPSGDD, emit, free_port, reap,  # noqa: E402
                           run_cases, wait_file)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "pytorch", "train_char_lm.py")


def workers_optimizer_available():
    """Whether this build's groupsgd.torch.Worker takes optimizer=."""
    sys.path.insert(0, os.path.join(BUILD, "python"))
    try:
        import groupsgd.torch as gt
    except ImportError:
        return False
    return "optimizer" in inspect.signature(gt.Worker.__init__).parameters


def model_args(a):
    return ["--layers", str(a.layers), "--width", str(a.width), "--heads", str(a.heads),
            "--context", str(a.context), "--text-limit", str(a.text_limit), "--eval-windows",
            str(a.eval_windows), "--seed", "1", "--device-ms", str(a.device_ms)]


def optimizer_args(a):
    """The same optimizer on both sides: AdamW with the schedule, or momentum SGD."""
    if a.optimizer == "workers":
        return ["--optimizer", "adamw", "--lr", str(a.lr), "--warmup", str(a.warmup),
                "--steps", str(a.schedule_steps)]
    return ["--optimizer", "sgd", "--lr", str(a.lr), "--momentum", str(a.momentum),
            "--clip", str(a.clip)]


def slowdown(a, i, straggler):
    return a.slowdown if straggler and i == 0 else 1.0


def run_groupsgd(a, straggler, tmp):
    d = tempfile.mkdtemp(dir=tmp)
    ep_file, summary_file = os.path.join(d, "endpoint"), os.path.join(d, "summary.json")
    config = os.path.join(d, "config.json")
    with open(config, "w") as f:
        json.dump({"optimizer": {"placement": "workers"}} if a.optimizer == "workers" else {}, f)
    log = open(os.path.join(d, "daemon.log"), "w")
    daemon = subprocess.Popen(
        [GROUPSGDD, "--config", config, "--model", "external", "--mode", a.mode, "--workers",
         str(a.workers), "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--momentum",
         str(a.momentum), "--max-samples", str(a.budget), "--max-seconds", str(a.max_seconds),
         "--heartbeat-ms", "100", "--listen", "tcp://127.0.0.1:0", "--endpoint-file", ep_file,
         "--summary-file", summary_file, "--progress-ms", "0", "--log-level", "warn"],
        stdout=log, stderr=subprocess.STDOUT)
    procs = []
    try:
        ep = wait_file(ep_file, daemon)
        barrier = os.path.join(d, "barrier")
        os.mkdir(barrier)
        placement = [] if a.optimizer == "workers" else ["--server-optimizer"]
        for i in range(a.workers):
            procs.append(subprocess.Popen(
                [sys.executable, EXAMPLE, "--coordinator", ep, "--name", f"w{i}", "--start-barrier",
                 barrier, "--slowdown", str(slowdown(a, i, straggler)), *model_args(a),
                 *optimizer_args(a), *placement],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, f"w{i}.log"), "w"), env=ENV))
        evaluator = subprocess.Popen(
            [sys.executable, EXAMPLE, "--coordinator", ep, "--evaluate", "--json",
             "--eval-interval-s", "1.0", *model_args(a)],
            stdout=open(os.path.join(d, "evaluator.jsonl"), "w"),
            stderr=open(os.path.join(d, "evaluator.log"), "w"), env=ENV)
        procs.append(evaluator)
        # Every worker has loaded its data: they register together (DDP's clock, too,
        # starts once every rank has joined).
        deadline = time.monotonic() + 300
        while len([f for f in os.listdir(barrier) if f.startswith("ready.")]) < a.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("workers did not get ready")
            time.sleep(0.05)
        open(os.path.join(barrier, "go"), "w").close()
        daemon.wait(timeout=a.max_seconds + 120)
        s = json.load(open(summary_file))
        # The evaluator measures the final central model before the daemon stops it.
        return {"time_s": s.get("elapsed_s"), "stop_reason": s.get("stop_reason"),
                "samples": s.get("samples_trained"), "val_loss": s.get("final_test_loss"),
                "val_acc": s.get("final_test_acc"), "best_val_loss": s.get("best_test_loss"),
                "regroups": s.get("regroups"), "accounting_ok": s.get("accounting_ok")}
    finally:
        reap(procs + [daemon])


def run_ddp(a, straggler, tmp):
    env = dict(ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    steps = max(1, a.budget // (a.workers * a.batch_size))
    procs = []
    try:
        for i in range(a.workers):
            procs.append(subprocess.Popen(
                [sys.executable, EXAMPLE, "--ddp", "--rank", str(i), "--world-size", str(a.workers),
                 "--batch-size", str(a.batch_size), "--max-steps", str(steps), "--eval-every-steps",
                 str(10 ** 9), "--max-seconds", str(a.max_seconds), "--json",
                 "--slowdown", str(slowdown(a, i, straggler)), *model_args(a), *optimizer_args(a)],
                stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL,
                stderr=open(os.path.join(tmp, f"ddp{i}.log"), "w"), env=env, text=True))
        stdout, _ = procs[0].communicate(timeout=a.max_seconds * 3 + 120)
        out = next((json.loads(line) for line in stdout.splitlines()
                    if line.startswith("{") and json.loads(line).get("bench") == "ddp_run"), None)
        if out is None:
            raise RuntimeError("DDP rank 0 printed no result")
        return {"time_s": out["training_s"], "samples": out["samples"], "val_loss": out["val_loss"],
                "val_acc": out["val_acc"], "steps": out["steps"]}
    finally:
        reap(procs)


def med(runs, key):
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def ratio(x, y):
    return x / y if x is not None and y else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 4 workers, a 1-layer width-32 model, a small budget, 1 repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--slowdown", type=float, default=4.0)
    p.add_argument("--device-ms", type=float, default=40.0)
    p.add_argument("--mode", default="adaptive", help="the groupsgd daemon's mode")
    p.add_argument("--optimizer", choices=("auto", "workers", "server"), default="auto")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--text-limit", type=int, default=0)
    p.add_argument("--eval-windows", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--budget", type=int, default=8 * 16 * 400, help="samples each system trains")
    p.add_argument("--lr", type=float, default=None, help="default 3e-3 (AdamW) or 0.1 (SGD)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--max-seconds", type=float, default=900)
    p.add_argument("--only", default="", help="one case, e.g. ddp:straggler (no summary line)")
    a = p.parse_args()
    if not os.path.isdir("/usr/share/games/fortunes"):
        print("bench lm: Debian's fortunes is not installed (scripts/install-deps.sh); skipped",
              file=sys.stderr)
        return 77  # bench_smoke.sh: skipped
    if a.quick:
        a.repeats, a.workers = 1, 4
        a.layers, a.width, a.heads, a.context, a.batch_size = 1, 32, 2, 32, 8
        a.text_limit, a.eval_windows, a.budget, a.warmup, a.max_seconds = 300000, 32, 4 * 8 * 60, 5, 120
    if a.optimizer == "auto":
        a.optimizer = "workers" if workers_optimizer_available() else "server"
    if a.lr is None:
        a.lr = 3e-3 if a.optimizer == "workers" else 0.1
    # The schedule's length: the steps a worker of an even split would take.
    a.schedule_steps = max(1, a.budget // (a.workers * a.batch_size))
    tmp = tempfile.mkdtemp(prefix="groupsgd-bench-lm-")
    results = run_cases(a, tmp, (("groupsgd", run_groupsgd), ("ddp", run_ddp)),
                        {"bench": "lm_run", "budget": a.budget, "optimizer": a.optimizer},
                        {"time_s": None, "val_loss": None})
    if a.only:
        return 0
    t = {k: med(v, "time_s") for k, v in results.items()}
    loss = {k: med(v, "val_loss") for k, v in results.items()}
    ok = all("error" not in r and r.get("time_s") is not None and r.get("val_loss") is not None
             for runs in results.values() for r in runs)
    summary = {
        "bench": "lm", "ok": ok, "workers": a.workers, "slowdown": a.slowdown,
        "device_ms": a.device_ms, "optimizer": a.optimizer, "mode": a.mode, "budget": a.budget,
        "model": {"layers": a.layers, "width": a.width, "heads": a.heads, "context": a.context},
        "batch_size": a.batch_size, "lr": a.lr, "repeats": a.repeats,
        "ddp_s": t[("ddp", True)], "groupsgd_s": t[("groupsgd", True)],
        "speedup_vs_ddp": ratio(t[("ddp", True)], t[("groupsgd", True)]),
        "ddp_no_straggler_s": t[("ddp", False)],
        "groupsgd_no_straggler_s": t[("groupsgd", False)],
        "no_straggler_ratio": ratio(t[("groupsgd", False)], t[("ddp", False)]),
        "val_loss_at_budget": {
            "groupsgd": loss[("groupsgd", True)], "ddp": loss[("ddp", True)],
            "groupsgd_no_straggler": loss[("groupsgd", False)],
            "ddp_no_straggler": loss[("ddp", False)]},
    }
    vl = summary["val_loss_at_budget"]
    summary["val_loss_ratio"] = ratio(vl["groupsgd"], vl["ddp"])
    summary["targets_met"] = {
        "speedup_vs_ddp_ge_2": summary["speedup_vs_ddp"] is not None and summary["speedup_vs_ddp"] >= 2,
        "no_straggler_within_1_15": summary["no_straggler_ratio"] is not None
                                    and summary["no_straggler_ratio"] <= 1.15,
        "val_loss_within_2pct": summary["val_loss_ratio"] is not None
                                and summary["val_loss_ratio"] <= 1.02}
    emit(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
