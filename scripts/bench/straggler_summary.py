#!/usr/bin/env python3
"""Helper of scripts/bench/straggler.sh (standard library only).

  run      reads one demo run's stdout (progress lines, then the summary JSON as the last
           line) and prints the benchmark's JSON line for it
  summary  reads runs.jsonl, prints the summary JSON line (medians and min-max of every
           case and mode, ratios of medians, the time breakdown), a Markdown table on
           stderr (and table.md in the results directory) and draws the plots with gnuplot
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

PROGRESS = re.compile(r"^\[\s*([0-9.]+)s\] step .*test_acc\s+([0-9.]+)\s(?:.*\bsamples\s+([0-9]+))?")
CASE = re.compile(r"^(none|compute|link|erratic|midrun)-([0-9.]+)x-([0-9]+)of([0-9]+)$")


def parse_case(case):
    """KIND-Fx-NofW -> (kind, F, N, W)."""
    m = CASE.match(case)
    if not m:
        raise ValueError("bad case %r" % case)
    f = float(m.group(2))
    return m.group(1), int(f) if f == int(f) else f, int(m.group(3)), int(m.group(4))


def ideal_fraction(kind, f, n, w):
    """Throughput with the stragglers over throughput without, if every sample counted
    (sum of speeds / the no-straggler sum); None where the speed changes over the run."""
    if kind == "none" or n == 0:
        return 1.0
    if kind == "midrun":
        return None
    return (w - n + n / float(f)) / w


def last_json_in(text):
    """The last line of `text` that starts with "{", parsed; None if none or not JSON."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def last_json(path):
    try:
        with open(path) as f:
            return last_json_in(f.read())
    except OSError:
        return None


def progress_readings(path):
    """[(seconds, test accuracy, samples or None)] from the daemon's progress lines."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                m = PROGRESS.match(line)
                if m:
                    samples = int(m.group(3)) if m.group(3) is not None else None
                    out.append((float(m.group(1)), float(m.group(2)), samples))
    except OSError:
        pass
    return out


def accuracy_series(path):
    """[(seconds, test accuracy)] from the daemon's progress lines."""
    return [(sec, acc) for sec, acc, _ in progress_readings(path)]


# The late accuracy averages the evaluations of the last LATE_FRACTION of the samples: one
# final evaluation moves by about a point from run to run (the model at the stop is one
# draw of SGD's noise), a mean over the same stretch of samples in every mode far less.
# (A window of the last N evaluations would not be: a slower mode evaluates more often
# per sample, so its window would sit closer to the end of training.)
LATE_FRACTION = 0.1


def late_accuracy(readings):
    """Mean test accuracy of the evaluations (progress_readings) read at or after
    (1 - LATE_FRACTION) of the run's last sample count (progress lines repeat an
    evaluation until the next: consecutive equal readings count once; the evaluation in
    force when the stretch begins counts too, so a short run has at least its last one),
    or None."""
    readings = [(n, acc) for _, acc, n in readings if n is not None]
    if not readings:
        return None
    start = (1 - LATE_FRACTION) * readings[-1][0]
    evals = []
    for samples, acc in readings:
        if samples >= start and (not evals or acc != evals[-1]):
            evals.append(acc)
    return round(sum(evals) / len(evals), 4)


def breakdown(summary):
    """Where the trainers' time went, from their own step timers (worker_stats totals):
    fractions of trainers x elapsed seconds. idle = the rest (start-up, registration,
    heartbeats, pulls after a regroup, the tail after the last report)."""
    ws = [w for w in summary.get("worker_stats") or [] if "total_compute_s" in w]
    elapsed = summary.get("elapsed_s")
    if not ws or not elapsed:
        return None
    total = elapsed * len(ws)
    comp = sum(w["total_compute_s"] for w in ws)
    comm = sum(w["total_comm_s"] for w in ws)
    wait = sum(w["total_wait_s"] for w in ws)
    out = {"compute": comp / total, "push_pull": comm / total, "barrier_wait": wait / total,
           "idle": max(0.0, 1 - (comp + comm + wait) / total)}
    return {k: round(v, 4) for k, v in out.items()}


def cmd_run(a):
    s = last_json(a.out)
    kind, f, n, w = parse_case(a.case)
    rec = {"case": a.case, "kind": kind, "slowdown": f, "stragglers": n, "workers": w,
           "mode": a.mode, "run": a.run, "repeat": a.repeat, "exit": a.rc,
           "wall_s": round(a.wall, 2), "log": os.path.basename(a.out)}
    if s is None:
        rec["error"] = "no summary JSON from the demo (see %s)" % (
            os.path.basename(a.out)[:-4] + ".err")
    else:
        central = s.get("central") or {}
        elapsed = s.get("elapsed_s")
        applied = s.get("samples_applied")
        rec.update({
            "time_to_target_s": s.get("time_to_target_s"),
            "reached": s.get("reached"),
            "final_test_acc": s.get("final_test_acc"),
            "mean_staleness": central.get("mean_staleness"),
            "max_staleness": central.get("max_staleness"),
            "regroups": s.get("regroups"),
            "samples_dropped": s.get("samples_dropped"),
            "samples_trained": s.get("samples_trained"),
            "samples_applied": applied,
            "late_gradients": s.get("late_gradients"),
            "steps_cut": s.get("steps_cut"),
            "accounting_ok": s.get("accounting_ok"),
            "stop_reason": s.get("stop_reason"),
            "elapsed_s": elapsed,
            "throughput_sps": round(applied / elapsed, 1) if applied and elapsed else None,
            "breakdown": breakdown(s),
            "detections": [{k: e.get(k) for k in ("t_s", "worker", "onset", "step", "ratio",
                                                  "action")}
                           for e in s.get("events") or [] if e.get("kind") == "straggler"],
        })
        # Time to each target from the same run: the daemon's own figure for the target it
        # stopped at, the first progress line at or above it for the lower ones (250 ms).
        times = {}
        readings = progress_readings(a.out)
        series = [(sec, acc) for sec, acc, _ in readings]
        rec["late_test_acc"] = late_accuracy(readings)
        for t in a.targets.split():
            at = None
            if a.run == "target" and s.get("reached") and float(t) >= float(s.get("target_acc") or 0):
                at = s.get("time_to_target_s")
            else:
                at = next((sec for sec, acc in series if acc >= float(t)), None)
                if at is None and s.get("reached") and float(t) <= (s.get("acc_at_target") or 0):
                    at = s.get("time_to_target_s")
            times[t] = at
        rec["time_to_s"] = times
    print(json.dumps(rec), flush=True)
    return 0


def gnuplot(script, png):
    if shutil.which("gnuplot") is None:
        return False
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        sys.stderr.write("straggler: gnuplot failed for %s: %s\n" % (png, r.stderr.strip()))
        return False
    return True


def plot_accuracy(series, d, img_dir, name, title, prefix="straggler"):
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
    png = os.path.join(img_dir, "%s-accuracy-%s.png" % (prefix, name))
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


def stats(xs):
    """median, min, max and count of the values that exist."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    k = len(xs)
    med = xs[k // 2] if k % 2 else 0.5 * (xs[k // 2 - 1] + xs[k // 2])
    return {"median": round(med, 4), "min": round(xs[0], 4), "max": round(xs[-1], 4), "n": k}


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def fmt(st, digits=1):
    if not st or st.get("median") is None:
        return "–"
    if st["n"] == 1:
        return "%.*f" % (digits, st["median"])
    return "%.*f (%.*f–%.*f)" % (digits, st["median"], digits, st["min"], digits, st["max"])


def plot_cases(cases, modes, results, target, d, img_dir, name):
    """Time to one target per case: medians with min-max error bars, per mode."""
    dat = os.path.join(d, "cases-%s.dat" % target)
    with open(dat, "w") as f:
        f.write("# index case " + " ".join("%s_med %s_min %s_max" % (m, m, m) for m in modes) + "\n")
        for i, c in enumerate(cases):
            row = [str(i), c]
            for m in modes:
                st = results.get(c, {}).get(m, {}).get("time_to_%s_s" % target) or {}
                row += ["NaN" if st.get(k) is None else "%.3f" % st[k]
                        for k in ("median", "min", "max")]
            f.write(" ".join(row) + "\n")
    png = os.path.join(img_dir, name)
    n = len(modes)
    parts = []
    for j, m in enumerate(modes):
        off = (j - (n - 1) / 2.0) * 0.15
        tic = ":xtic(2)" if j == 0 else ""  # one label per case
        parts.append("'%s' using ($1+%.2f):%d:%d:%d%s with yerrorbars lw 2 title '%s'" % (
            dat, off, 3 + 3 * j, 4 + 3 * j, 5 + 3 * j, tic, m))
    script = "\n".join([
        "set terminal pngcairo size 1000,560" if has_cairo() else "set terminal png size 1000,560",
        "set output '%s'" % png,
        "set title 'Time to %s test accuracy: median and min-max of the repeats'" % target,
        "set ylabel 'seconds'", "set xtics rotate by 25 right", "set bmargin 7",
        "set key outside right top", "set grid",
        "set datafile missing 'NaN'", "set xrange [-0.5:%f]" % (len(cases) - 0.5),
        "set yrange [0:*]", "plot " + ", ".join(parts), ""])
    return png if gnuplot(script, png) else None


def cmd_summary(a):
    with open(a.runs) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    targets = a.targets.split()
    top = max(targets, key=float)
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    cases = list(dict.fromkeys(r["case"] for r in runs))
    target_runs = [r for r in runs if r["run"] == "target" and "error" not in r]
    budget_runs = [r for r in runs if r["run"] == "budget" and "error" not in r]

    def of(c, m, rs):
        return [r for r in rs if r["case"] == c and r["mode"] == m]

    results = {}
    for c in cases:
        for m in modes:
            rs = of(c, m, target_runs)
            if not rs and not of(c, m, budget_runs):
                continue
            e = {"runs": len(rs)}
            for t in targets:
                e["time_to_%s_s" % t] = stats([(r.get("time_to_s") or {}).get(t) for r in rs])
            e["throughput_sps"] = stats([r.get("throughput_sps") for r in rs + of(c, m, budget_runs)])
            e["budget_final_test_acc"] = stats([r.get("final_test_acc") for r in of(c, m, budget_runs)])
            e["budget_late_test_acc"] = stats([r.get("late_test_acc") for r in of(c, m, budget_runs)])
            e["regroups"] = stats([r.get("regroups") for r in rs])
            e["mean_staleness"] = stats([r.get("mean_staleness") for r in rs])
            e["samples_dropped"] = stats([r.get("samples_dropped") for r in rs])
            bds = [r.get("breakdown") for r in rs if r.get("breakdown")]
            if bds:
                e["breakdown"] = {k: stats([b[k] for b in bds])["median"] for k in bds[0]}
            dets = [len([d for d in r.get("detections") or [] if d.get("onset")]) for r in rs]
            e["onsets_detected"] = stats(dets)
            results.setdefault(c, {})[m] = e

    # Ratios of medians of the same session: each case against the no-straggler case with
    # the same number of workers and the same mode.
    ratios, vs_sync = {}, {}
    for c in cases:
        kind, f, n, w = parse_case(c)
        base = "none-1x-0of%d" % w
        ideal = ideal_fraction(kind, f, n, w)
        for m in modes:
            e = results.get(c, {}).get(m)
            b = results.get(base, {}).get(m)
            if not e:
                continue
            r = {"ideal_throughput_fraction": None if ideal is None else round(ideal, 4),
                 "ideal_time_ratio": None if ideal is None else round(1 / ideal, 3)}
            if b and c != base:
                for t in targets:
                    k = "time_to_%s_s" % t
                    r["time_%s_vs_none" % t] = ratio(e[k]["median"], b[k]["median"])
                r["throughput_vs_none"] = ratio(e["throughput_sps"]["median"],
                                                b["throughput_sps"]["median"])
                if ideal and r["throughput_vs_none"] is not None:
                    r["throughput_vs_ideal"] = round(r["throughput_vs_none"] / ideal, 3)
            ratios.setdefault(c, {})[m] = r
        ad, sy = results.get(c, {}).get("adaptive"), results.get(c, {}).get("sync")
        if ad and sy:
            v = {}
            for t in targets:
                k = "time_to_%s_s" % t
                v[t] = ratio(ad[k]["median"], sy[k]["median"])
                # The most any policy can gain on sync here: sync's slowdown over the ideal.
                rs, ra = ratios.get(c, {}).get("sync", {}), ratios.get(c, {}).get("adaptive", {})
                sync_slow = rs.get("time_%s_vs_none" % t)
                if sync_slow and ideal and v[t]:
                    limit = sync_slow * ideal
                    v["speedup_%s" % t] = round(1 / v[t], 3)
                    v["physical_limit_%s" % t] = round(limit, 3)
                    v["fraction_of_limit_%s" % t] = round((1 / v[t]) / limit, 3)
            # Accuracy at the budget, adaptive minus sync (points of a fraction: 0.005 =
            # half a point), of the medians: the late mean and the final evaluation.
            for k, name in (("budget_late_test_acc", "budget_late_acc_delta"),
                            ("budget_final_test_acc", "budget_final_acc_delta")):
                am, sm = ad[k]["median"], sy[k]["median"]
                if am is not None and sm is not None:
                    v[name] = round(am - sm, 4)
            vs_sync[c] = v

    # The table (stderr and table.md).
    lines = ["| case | mode | runs | " + " | ".join(
        "time to %s s (median, min–max) | vs none" % t for t in targets) +
        " | samples/s | vs ideal | budget acc (late mean) | budget acc (final) | regroups | onsets detected |",
        "| --- | --- | --- | " + " | ".join("--- | ---" for _ in targets) +
        " | --- | --- | --- | --- | --- | --- |"]
    for c in cases:
        for m in modes:
            e = results.get(c, {}).get(m)
            if not e:
                continue
            r = ratios.get(c, {}).get(m, {})
            cells = []
            for t in targets:
                cells.append(fmt(e["time_to_%s_s" % t]))
                v = r.get("time_%s_vs_none" % t)
                cells.append("–" if v is None else "%.2f×" % v)
            tv = r.get("throughput_vs_ideal")
            lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                c, m, e["runs"], " | ".join(cells), fmt(e["throughput_sps"], 0),
                "–" if tv is None else "%.2f" % tv, fmt(e["budget_late_test_acc"], 4),
                fmt(e["budget_final_test_acc"], 4),
                fmt(e["regroups"], 0), fmt(e["onsets_detected"], 0)))
    bd_lines = []
    for c in cases:
        if not c.startswith("compute-4x"):
            continue
        for m in modes:
            bd = results.get(c, {}).get(m, {}).get("breakdown")
            if bd:
                bd_lines.append("| %s | %s | %s |" % (c, m, " | ".join(
                    "%.1f%%" % (100 * bd[k]) for k in ("compute", "push_pull", "barrier_wait",
                                                       "idle"))))
    if bd_lines:
        lines += ["", "Where the trainers' time went (fractions of trainers × elapsed, medians):",
                  "", "| case | mode | compute | push/pull | barrier wait | idle |",
                  "| --- | --- | --- | --- | --- | --- |"] + bd_lines
    table = "\n".join(lines) + "\n"
    sys.stderr.write(table)
    with open(os.path.join(a.dir, "table.md"), "w") as f:
        f.write(table)

    plots = []
    if not a.no_plots:
        os.makedirs(a.img_dir, exist_ok=True)
        p = a.plot_prefix
        for t in targets:  # straggler-cases.png: the highest target
            name = "%s-cases.png" % p if t == top else "%s-cases-%s.png" % (p, t)
            png = plot_cases(cases, modes, results, t, a.dir, a.img_dir, name)
            if png:
                plots.append(png)
        acc_case = next((c for c in cases if c.startswith("compute-4x")),
                        next((c for c in cases if not c.startswith("none")), cases[0] if cases else None))
        series = {}
        for r in target_runs:
            if r["case"] == acc_case and r["repeat"] == 1:
                pts = accuracy_series(os.path.join(a.dir, r["log"]))
                end = r.get("time_to_target_s") or r.get("elapsed_s")
                if pts and end and r.get("final_test_acc") is not None and end > pts[-1][0]:
                    pts.append((end, r["final_test_acc"]))  # the report that ended the run
                if pts:
                    series[r["mode"]] = pts
        png = plot_accuracy(series, a.dir, a.img_dir, acc_case or "none",
                            "Test accuracy against time, %s" % acc_case, p)
        if png:
            plots.append(png)
        if shutil.which("gnuplot") is None:
            sys.stderr.write("straggler: gnuplot not found (scripts/install-deps.sh --extra); "
                             "no plots\n")

    failed = [r for r in runs if "error" in r]
    summary = {
        "bench": "straggler", "quick": a.quick, "targets": targets,
        "target_acc": float(top), "budget_samples": a.budget, "cases": cases, "modes": modes,
        "runs": len(runs), "reached": sum(1 for r in target_runs if r.get("reached")),
        "target_runs": len([r for r in runs if r["run"] == "target"]), "failed": len(failed),
        "results": results, "ratios": ratios,
        # Shorthands: medians to the highest target, their ratio to the no-straggler case,
        # and adaptive / sync per case (with the physical limit).
        "time_to_target_s": {"%s_%s" % (c, m): e["time_to_%s_s" % top]["median"]
                             for c, ms in results.items() for m, e in ms.items()},
        "time_ratio_vs_no_straggler": {"%s_%s" % (c, m): r.get("time_%s_vs_none" % top)
                                       for c, ms in ratios.items() for m, r in ms.items()
                                       if "time_%s_vs_none" % top in r},
        "adaptive_vs_sync": vs_sync,
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
    r.add_argument("--case", required=True)
    r.add_argument("--mode", required=True)
    r.add_argument("--targets", default="")
    r.add_argument("--run", required=True)
    r.add_argument("--repeat", type=int, default=1)
    r.add_argument("--wall", type=float, default=0.0)
    s = sub.add_parser("summary")
    s.add_argument("--runs", required=True)
    s.add_argument("--dir", required=True)
    s.add_argument("--targets", required=True)
    s.add_argument("--budget", type=int, default=0)
    s.add_argument("--img-dir", required=True)
    s.add_argument("--quick", action="store_true")
    s.add_argument("--no-plots", action="store_true")
    s.add_argument("--plot-prefix", default="straggler", help="the PNGs' names start with this")
    a = p.parse_args()
    if a.cmd == "run":
        return cmd_run(a)
    return cmd_summary(a)


if __name__ == "__main__":
    sys.exit(main())
