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


def straggler_paper(paper, rows):
    """Re-emits straggler.sh's lines; returns its summary (None when it has none)."""
    summary = rows[-1] if rows and rows[-1].get("bench") == "straggler" else None
    for r in rows[:-1] if summary else rows:
        emit(dict(r, paper=paper))
    if summary is None:
        return None
    summary = dict(summary, paper=paper, summary=True, source="straggler")
    summary.pop("bench")
    return summary


def basu_figures(s):
    out, ok = {}, True
    results, ratios = s.get("results") or {}, s.get("ratios") or {}
    top = str(s.get("target_acc"))
    top = next((t for t in s.get("targets") or [] if float(t) == s.get("target_acc")), top)
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
    top = next((t for t in s.get("targets") or [] if float(t) == s.get("target_acc")),
               str(s.get("target_acc")))
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
                # The nearest thing to ASHL's ADSP baseline: adaptive without stages.
                base = meds.get(default + "+nostages")
                if base:
                    row["default_saving_vs_nostages"] = round(1 - d / base, 3)
        out[case] = row
    met = [r.get("default_fastest_within_noise") for r in out.values()]
    return {"by_case": out,
            "targets_met": None if not met or None in met else all(met)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--papers", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--command", default="")
    a = ap.parse_args()
    papers = a.papers.split()
    figures, oks, errors = {}, {}, []
    for p in papers:
        rows = read(os.path.join(a.dir, p + ".jsonl"))
        if not rows:
            errors.append("%s: no output" % p)
            oks[p] = False
            continue
        if p in ("basu", "ashl"):
            s = straggler_paper(p, rows)
            if s is None:
                errors.append("%s: straggler.sh printed no summary" % p)
                oks[p] = False
                continue
            s["figures"] = basu_figures(s) if p == "basu" else ashl_figures(s)
            if p == "ashl":
                # ashl_netns.sh: one trainer of four on a slow link, then all four.
                for key, name in (("netns", "ashl-netns.jsonl"),
                                  ("netns_all_slow", "ashl-netns-all.jsonl")):
                    netns = read(os.path.join(a.dir, name))
                    for r in netns[:-1]:
                        emit(dict(r, paper=p))
                    s[key] = netns[-1] if netns else {
                        "skipped": "not run (needs root, and not with --quick)"}
        elif p == "chao":
            s = rows[-1] if rows[-1].get("summary") else None
            for r in rows[:-1] if s else rows:
                emit(dict(r, paper=p))
            if s is None:
                errors.append("chao: chao.py printed no summary")
                oks[p] = False
                continue
            s["figures"] = {k: s.get(k) for k in ("self_vs_equal", "static_vs_equal",
                                                   "self_vs_static", "add_vs_fixed",
                                                   "replace_vs_fixed", "self_saving_vs_equal",
                                                   "target_met", "coverage_min")}
            s["figures"]["targets_met"] = s.get("target_met")
        else:  # crossover
            s = rows[-1] if rows[-1].get("bench") == "crossover" else None
            for r in rows[:-1] if s else rows:
                emit(dict(r, paper=p))
            if s is None:
                errors.append("crossover: crossover.py printed no summary")
                oks[p] = False
                continue
            s = dict(s, paper=p, summary=True, source="crossover")
            s.pop("bench")
            s["figures"] = {k: s.get(k) for k in ("makespan_s", "gain_vs_sequential",
                                                   "gain_vs_none", "accuracy_ok")}
            s["figures"]["cases"] = s.get("cases")
            s["figures"]["targets_met"] = None
        emit(s)
        oks[p] = s.get("ok") is True
        figures[p] = s["figures"]
    final = {"bench": "seeds", "quick": a.quick, "command": a.command, "papers": papers,
             "figures": figures, "papers_ok": oks, "errors": errors,
             "ok": not errors and all(oks.get(p) for p in papers)}
    emit(final)
    return 0 if final["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
