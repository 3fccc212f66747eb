#!/usr/bin/env python3
"""The output of scripts/bench/seeds.sh from the JSON lines its benchmarks left in DIR
(basu.jsonl, ashl.jsonl, ashl-netns.jsonl, chao.jsonl, crossover.jsonl): every run line
tagged "paper": NAME, one summary line per paper ("summary": true), then the
{"bench": "seeds", ...} line with each paper's figures against issue 32's targets:

  basu   adaptive within 1.20x of its no-delay time to 0.85 at 2x, 4x and 8x; accuracy at
         the sample budget (the late mean) within 0.5 point of sync's
  ashl   the default configuration (adaptive) the fastest of the ablation within noise
         (its median within 10% of the fastest median, or the fastest median inside the
         default's min-max)
  chao   self-adaptive at least a third less time than equal allocation (4x and 2x trainers)
  crossover  the gains as crossover.py reports them (no target in issue 32)

  seeds_summary.py --dir DIR --papers "basu ashl chao crossover" [--quick] [--command C]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from straggler_summary import gnuplot, has_cairo  # noqa: E402  (one way to draw)


def read(path):
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    rows.append({"error": "not JSON: %.80s" % line})
    return rows


def emit(obj):
    print(json.dumps(obj), flush=True)


def split_runs(paper, rows, is_summary):
    """Re-emits a benchmark's run lines tagged with the paper; returns its last line when
    is_summary(last line), else None (every line was a run)."""
    summary = rows[-1] if rows and is_summary(rows[-1]) else None
    for r in rows[:-1] if summary else rows:
        emit(dict(r, paper=paper))
    return summary


def tagged(summary, paper, source):
    """A benchmark's summary as this paper's ("bench" becomes "source")."""
    out = dict(summary, paper=paper, summary=True, source=source)
    out.pop("bench", None)
    return out


def top_target(s):
    """The target the runs went to, spelled as in the summary's keys (0.85, not 0.850)."""
    return next((t for t in s.get("targets") or [] if float(t) == s.get("target_acc")),
                str(s.get("target_acc")))


def picked(s, keys):
    return {k: s.get(k) for k in keys}


def basu_figures(s):
    out, ok = {}, True
    results, ratios = s.get("results") or {}, s.get("ratios") or {}
    top = top_target(s)
    for case in s.get("cases") or []:
        if case.startswith("none"):
            continue
        f = case.split("-")[1]
        row = {}
        for mode, r in (ratios.get(case) or {}).items():
            row["time_vs_no_delay_" + mode] = r.get("time_%s_vs_none" % top)
        # Accuracy at the budget read as straggler.sh's late mean (the mean of the
        # evaluations over the last 10% of the samples; one final evaluation moves by a point).
        def budget_acc(c, key="budget_late_test_acc"):
            return {m: (((results.get(c) or {}).get(m) or {}).get(key) or {}).get("median")
                    for m in s.get("modes") or []}
        acc, none_acc = budget_acc(case), budget_acc("none-1x-0of8")
        row["budget_acc"] = acc
        row["budget_final_acc"] = budget_acc(case, "budget_final_test_acc")
        if acc.get("adaptive") is not None and acc.get("sync") is not None:
            row["adaptive_minus_sync_acc"] = round(acc["adaptive"] - acc["sync"], 4)
        if acc.get("adaptive") is not None and none_acc.get("adaptive") is not None:
            row["adaptive_acc_loss_vs_no_delay"] = round(none_acc["adaptive"] - acc["adaptive"], 4)
        t = row.get("time_vs_no_delay_adaptive")
        row["time_target_met"] = None if t is None else t <= 1.20
        d = row.get("adaptive_minus_sync_acc")
        row["acc_target_met"] = None if d is None else d >= -0.005
        ok = ok and row["time_target_met"] is not False and row["acc_target_met"] is not False
        out[f] = row
    return {"by_delay": out, "targets_met": ok if out else None}


def ashl_figures(s, default="adaptive"):
    out = {}
    results = s.get("results") or {}
    top = top_target(s)
    for case, modes in results.items():
        times = {m: (e.get("time_to_%s_s" % top) or {}) for m, e in modes.items()}
        meds = {m: t.get("median") for m, t in times.items() if t.get("median") is not None}
        row = {"time_to_target_s": meds,
               "budget_acc": {m: (e.get("budget_late_test_acc") or {}).get("median")
                              for m, e in modes.items()}}
        if meds:
            fastest = min(meds, key=meds.get)
            row["fastest"] = fastest
            d = meds.get(default)
            if d is not None:
                row["vs_default"] = {m: round(v / d, 3) for m, v in meds.items()}
                lo = times[default].get("min")
                row["default_fastest_within_noise"] = (
                    d <= 1.10 * meds[fastest] or (lo is not None and lo <= meds[fastest]))
                # The default trains without a coarse stage of its own (the nearest thing to
                # ASHL's ADSP baseline); +stages is the coarse stage it had before.
                for variant in ("+nostages", "+stages"):
                    base = meds.get(default + variant)
                    if base:
                        row["default_saving_vs_" + variant[1:]] = round(1 - d / base, 3)
        out[case] = row
    met = [r.get("default_fastest_within_noise") for r in out.values()]
    return {"by_case": out,
            "targets_met": None if not met or None in met else all(met)}


def plot_medians(rows, png, title, data_dir):
    """Bars: median seconds to the target per (group, case), min-max error bars; the data
    file goes to data_dir (the results directory)."""
    rows = [r for r in rows if r[2] and r[2].get("median") is not None]
    if not rows or not png:
        return None
    dat = os.path.join(data_dir, os.path.basename(png)[:-4] + ".dat")
    with open(dat, "w") as f:
        for i, (group, case, st) in enumerate(rows):
            f.write("%d %s:%s %.3f %.3f %.3f\n" % (i, group, case, st["median"],
                                                  st.get("min") or st["median"],
                                                  st.get("max") or st["median"]))
    script = "\n".join([
        "set terminal pngcairo size 900,500" if has_cairo() else "set terminal png size 900,500",
        "set output '%s'" % png, "set title '%s'" % title, "set ylabel 'seconds'",
        "set style fill solid 0.5", "set boxwidth 0.6", "set xtics rotate by 20 right",
        "set bmargin 6", "set grid ytics", "set yrange [0:*]", "set key off",
        "plot '%s' using 1:3:xtic(2) with boxes, '' using 1:3:4:5 with yerrorbars lc black pt 0"
        % dat, ""])
    return png if gnuplot(script, png) else None


def chao_plot(s, img_dir, data_dir):
    results = s.get("results") or {}
    rows = [(exp, case, e.get("time_to_target_s"))
            for exp in ("allocation", "elastic") for case, e in (results.get(exp) or {}).items()]
    return plot_medians(rows, img_dir and os.path.join(img_dir, "seeds-chao.png"),
                        "Chao: time to %s test accuracy (median, min-max)" % s.get("target_acc"),
                        data_dir)


def netns_plot(key, s, img_dir, data_dir):
    rows = [(s.get("rate", ""), m, e.get("time_to_target_s"))
            for m, e in (s.get("results") or {}).items()]
    name = "seeds-ashl-%s.png" % key.replace("_", "-")
    return plot_medians(rows, img_dir and os.path.join(img_dir, name),
                        "ASHL over shaped links (%s each way, %s of 4 trainers): time to target"
                        % (s.get("rate"), s.get("shaped_trainers")), data_dir)


def paper_summary(p, rows, a, plots):
    """One paper's summary line (None when its benchmark printed none), runs re-emitted."""
    if p in ("basu", "ashl"):
        s = split_runs(p, rows, lambda r: r.get("bench") == "straggler")
        if s is None:
            return None
        s = tagged(s, p, "straggler")
        s["figures"] = basu_figures(s) if p == "basu" else ashl_figures(s)
        if p == "ashl":
            # ashl_netns.sh: one trainer of four on a slow link, then all four.
            for key, name in (("netns", "ashl-netns.jsonl"), ("netns_all_slow", "ashl-netns-all.jsonl")):
                netns = split_runs(p, read(os.path.join(a.dir, name)),
                                   lambda r: r.get("bench") == "ashl_netns")
                s[key] = netns or {"skipped": "not run (needs root, and not with --quick)"}
                if netns:
                    plots.append(netns_plot(key, netns, a.img_dir, a.dir))
        return s
    if p == "chao":
        s = split_runs(p, rows, lambda r: r.get("summary"))
        if s is None:
            return None
        s["figures"] = picked(s, ("self_vs_equal", "static_vs_equal", "self_vs_static",
                                  "add_vs_fixed", "replace_vs_fixed", "self_saving_vs_equal",
                                  "target_met", "coverage_min"))
        s["figures"]["targets_met"] = s.get("target_met")
        plots.append(chao_plot(s, a.img_dir, a.dir))
        return s
    s = split_runs(p, rows, lambda r: r.get("bench") == "crossover")
    if s is None:
        return None
    s = tagged(s, p, "crossover")
    s["figures"] = picked(s, ("makespan_s", "gain_vs_sequential", "gain_vs_none",
                              "accuracy_ok", "cases"))
    s["figures"]["targets_met"] = None
    return s


SOURCES = {"basu": "straggler.sh", "ashl": "straggler.sh", "chao": "chao.py",
           "crossover": "crossover.py"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--papers", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--command", default="")
    ap.add_argument("--img-dir", default="",
                    help="draw Chao's and the namespace runs' plots here (gnuplot); '' = none")
    a = ap.parse_args()
    papers = a.papers.split()
    figures, oks, errors, plots = {}, {}, [], []
    for p in papers:
        rows = read(os.path.join(a.dir, p + ".jsonl"))
        s = paper_summary(p, rows, a, plots) if rows else None
        if s is None:
            errors.append("%s: %s" % (p, "%s printed no summary" % SOURCES.get(p, p)
                                      if rows else "no output"))
            oks[p] = False
            continue
        emit(s)
        oks[p] = s.get("ok") is True
        figures[p] = s["figures"]
    final = {"bench": "seeds", "quick": a.quick, "command": a.command, "papers": papers,
             "figures": figures, "papers_ok": oks, "errors": errors,
             "plots": [p for p in plots if p],
             "ok": not errors and all(oks.get(p) for p in papers)}
    emit(final)
    return 0 if final["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
