#!/usr/bin/env python3
"""Helper of scripts/bench/straggler.sh (standard library only).

  run      reads one demo run's stdout (progress lines, then the summary JSON as the last
           line) and prints the benchmark's JSON line for it
  summary  reads runs.jsonl, prints the summary JSON line and draws the plots with gnuplot
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

PROGRESS = re.compile(r"^\[\s*([0-9.]+)s\] step .*test_acc\s+([0-9.]+)\s")


def last_json(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def accuracy_series(path):
    """[(seconds, test accuracy)] from the daemon's progress lines."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                m = PROGRESS.match(line)
                if m:
                    out.append((float(m.group(1)), float(m.group(2))))
    except OSError:
        pass
    return out


def cmd_run(a):
    s = last_json(a.out)
    rec = {"kind": a.kind, "slowdown": a.slowdown, "mode": a.mode, "run": a.run,
           "repeat": a.repeat, "exit": a.rc, "wall_s": round(a.wall, 2),
           "log": os.path.basename(a.out)}
    if s is None:
        rec["error"] = "no summary JSON from the demo (see %s)" % (
            os.path.basename(a.out)[:-4] + ".err")
    else:
        central = s.get("central") or {}
        rec.update({
            "time_to_target_s": s.get("time_to_target_s"),
            "reached": s.get("reached"),
            "final_test_acc": s.get("final_test_acc"),
            "mean_staleness": central.get("mean_staleness"),
            "max_staleness": central.get("max_staleness"),
            "regroups": s.get("regroups"),
            "samples_dropped": s.get("samples_dropped"),
            "samples_trained": s.get("samples_trained"),
            "late_gradients": s.get("late_gradients"),
            "accounting_ok": s.get("accounting_ok"),
            "stop_reason": s.get("stop_reason"),
            "elapsed_s": s.get("elapsed_s"),
        })
    print(json.dumps(rec), flush=True)
    return 0


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def ideal_ratio(workers, f):
    """Time with one worker f times slower over time without, if every sample counted."""
    return workers / (workers - 1 + 1.0 / f)


def gnuplot(script, png):
    if shutil.which("gnuplot") is None:
        return False
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        sys.stderr.write("straggler: gnuplot failed for %s: %s\n" % (png, r.stderr.strip()))
        return False
    return True


def plot_times(kind, times, baseline, modes, slowdowns, workers, target, d, img_dir):
    """time to target vs slowdown, one line per mode, and the ideal from the best baseline."""
    dat = os.path.join(d, "time-%s.dat" % kind)
    with open(dat, "w") as f:
        f.write("# slowdown " + " ".join(modes) + " ideal\n")
        best = min([b for b in baseline.values() if b is not None], default=None)
        for sl in slowdowns:
            row = [str(sl)]
            for m in modes:
                t = baseline.get(m) if sl == 1 else times.get((kind, sl, m))
                row.append("NaN" if t is None else "%.3f" % t)
            row.append("NaN" if best is None else "%.3f" % (best * ideal_ratio(workers, sl)))
            f.write(" ".join(row) + "\n")
    png = os.path.join(img_dir, "straggler-time-%s.png" % kind)
    lines = ["'%s' using 1:%d with linespoints title '%s'" % (dat, i + 2, m)
             for i, m in enumerate(modes)]
    lines.append("'%s' using 1:%d with lines dashtype 2 lc rgb 'gray40' title "
                 "'ideal (best baseline x %d/(%d+1/F))'" % (dat, len(modes) + 2, workers,
                                                              workers - 1))
    script = "\n".join([
        "set terminal pngcairo size 800,500" if has_cairo() else "set terminal png size 800,500",
        "set output '%s'" % png,
        "set title 'Time to %.2f test accuracy, %d workers, one %s straggler'" % (
            target, workers, kind),
        "set xlabel 'straggler slowdown F'", "set ylabel 'seconds'",
        "set logscale x 2", "set xtics (%s)" % ", ".join(str(s) for s in slowdowns),
        "set key top left", "set grid", "set datafile missing 'NaN'",
        "plot " + ", ".join(lines), ""])
    return png if gnuplot(script, png) else None


def plot_accuracy(series, d, img_dir, name, title):
    """test accuracy vs seconds, one line per mode."""
    if not series:
        return None
    parts = []
    for m, pts in series.items():
        dat = os.path.join(d, "acc-%s-%s.dat" % (name, m))
        with open(dat, "w") as f:
            for t, acc in pts:
                f.write("%.1f %.4f\n" % (t, acc))
        parts.append("'%s' using 1:2 with lines title '%s'" % (dat, m))
    png = os.path.join(img_dir, "straggler-accuracy-%s.png" % name)
    script = "\n".join([
        "set terminal pngcairo size 800,500" if has_cairo() else "set terminal png size 800,500",
        "set output '%s'" % png, "set title '%s'" % title,
        "set xlabel 'seconds'", "set ylabel 'test accuracy'", "set key bottom right",
        "set grid", "plot " + ", ".join(parts), ""])
    return png if gnuplot(script, png) else None


_cairo = None


def has_cairo():
    global _cairo
    if _cairo is None:
        _cairo = False
        if shutil.which("gnuplot"):
            r = subprocess.run(["gnuplot", "-e", "set terminal"], text=True,
                               capture_output=True)
            _cairo = "pngcairo" in (r.stdout + r.stderr)
    return _cairo


def cmd_summary(a):
    with open(a.runs) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    kinds = [k for k in dict.fromkeys(r["kind"] for r in runs) if k != "none"]
    slowdowns = sorted({r["slowdown"] for r in runs})
    target_runs = [r for r in runs if r["run"] == "target"]
    budget_runs = [r for r in runs if r["run"] == "budget"]

    def tt(r):
        return r.get("time_to_target_s") if r.get("reached") else None

    # Mean over repeats; None when no repeat reached the target.
    times = {}
    for r in target_runs:
        times.setdefault((r["kind"], r["slowdown"], r["mode"]), []).append(tt(r))
    times = {k: mean(v) for k, v in times.items()}
    baseline = {m: times.get(("none", 1, m)) for m in modes}

    ratio = {}
    for k in kinds:
        for m in modes:
            for sl in slowdowns:
                t, b = times.get((k, sl, m)), baseline.get(m)
                if sl == 1 or t is None or not b:
                    continue
                ratio.setdefault(k, {}).setdefault(m, {})[str(sl)] = round(t / b, 3)
    adaptive_vs_sync = {}
    for k in kinds + ["none"]:
        sl = 1 if k == "none" else 4
        ad, sy = times.get((k, sl, "adaptive")), times.get((k, sl, "sync"))
        if ad is not None and sy:
            adaptive_vs_sync["%s_%dx" % (k, sl)] = round(ad / sy, 3)
    budget_acc = {}
    for r in budget_runs:
        budget_acc.setdefault(r["kind"], {}).setdefault(r["mode"], {})[str(r["slowdown"])] = \
            r.get("final_test_acc")

    plots = []
    if not a.no_plots:
        os.makedirs(a.img_dir, exist_ok=True)
        for k in kinds:
            png = plot_times(k, times, baseline, modes, slowdowns, a.workers, a.target, a.dir,
                             a.img_dir)
            if png:
                plots.append(png)
        # Accuracy against time: the 4x compute straggler (or the largest slowdown run).
        sl = 4 if 4 in slowdowns else max(slowdowns)
        kind = "compute" if "compute" in kinds else (kinds[0] if kinds else "none")
        series = {}
        for r in target_runs:
            if r["kind"] == kind and r["slowdown"] == sl and r["repeat"] == 1:
                pts = accuracy_series(os.path.join(a.dir, r["log"]))
                end = r.get("time_to_target_s") or r.get("elapsed_s")
                if pts and end and r.get("final_test_acc") is not None and end > pts[-1][0]:
                    pts.append((end, r["final_test_acc"]))  # the report that ended the run
                if pts:
                    series[r["mode"]] = pts
        png = plot_accuracy(series, a.dir, a.img_dir, "%s-%dx" % (kind, sl),
                            "Test accuracy, %d workers, one %dx %s straggler" % (
                                a.workers, sl, kind))
        if png:
            plots.append(png)
        if shutil.which("gnuplot") is None:
            sys.stderr.write("straggler: gnuplot not found (scripts/install-deps.sh --extra); "
                             "no plots\n")

    failed = [r for r in runs if "error" in r]
    summary = {
        "bench": "straggler", "quick": a.quick, "target_acc": a.target,
        "budget_samples": a.budget, "workers": a.workers, "runs": len(runs),
        "reached": sum(1 for r in target_runs if r.get("reached")),
        "target_runs": len(target_runs), "failed": len(failed),
        "time_to_target_s": {"%s_%sx_%s" % k: v for k, v in times.items()},
        "time_ratio_vs_no_straggler": ratio,
        "ideal_ratio": {str(sl): round(ideal_ratio(a.workers, sl), 3) for sl in slowdowns if sl > 1},
        "adaptive_vs_sync": adaptive_vs_sync,
        "budget_final_test_acc": budget_acc,
        "results_dir": a.dir, "plots": plots,
        "ok": not failed and len(runs) > 0,
    }
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--rc", type=int, default=0)
    r.add_argument("--kind", required=True)
    r.add_argument("--slowdown", type=float, required=True)
    r.add_argument("--mode", required=True)
    r.add_argument("--run", required=True)
    r.add_argument("--repeat", type=int, default=1)
    r.add_argument("--wall", type=float, default=0.0)
    s = sub.add_parser("summary")
    s.add_argument("--runs", required=True)
    s.add_argument("--dir", required=True)
    s.add_argument("--target", type=float, required=True)
    s.add_argument("--budget", type=int, default=0)
    s.add_argument("--workers", type=int, default=8)
    s.add_argument("--img-dir", required=True)
    s.add_argument("--quick", action="store_true")
    s.add_argument("--no-plots", action="store_true")
    a = p.parse_args()
    if a.cmd == "run":
        if a.slowdown == int(a.slowdown):
            a.slowdown = int(a.slowdown)
        return cmd_run(a)
    return cmd_summary(a)


if __name__ == "__main__":
    sys.exit(main())
