#!/usr/bin/env python3
"""Checks the JSON lines a benchmark printed (standard library only): every line parses,
the summary is the last line and says ok, and the keys the docs promise are there.
Checks the shape of the output, never the speed.

  check_json.py NAME FILE     NAME: dataplane, dataplane-netns, straggler, memory, scale,
                              pytorch, lm, crossover, model-timing, startup or seeds
Exit 0 when the output is well formed, 1 with the reasons on stderr otherwise.
"""
import json
import sys


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_sizes(summary, errors, numbers, positive):
    """Every row of summary["sizes"] has `numbers` as numbers, `positive` ones > 0."""
    sizes = summary.get("sizes")
    if not isinstance(sizes, list) or not sizes:
        errors.append("summary has no 'sizes' list")
        return
    for s in sizes:
        for key in numbers:
            if not number(s.get(key)):
                errors.append("size %s: '%s' missing or not a number" % (s.get("size_mib"), key))
        for key in positive:
            if number(s.get(key)) and s[key] <= 0:
                errors.append("size %s: '%s' is %s, not > 0" % (s.get("size_mib"), key, s[key]))


def check_dataplane(rows, summary, errors):
    check_sizes(summary, errors,
                ("size_mib", "groupsgd_gbps", "tcp_gbps", "ratio", "exchange_ratio"),
                ("groupsgd_gbps", "tcp_gbps"))
    lat = summary.get("step_latency_1mib_8w")
    if not isinstance(lat, dict) or not all(number(lat.get(k)) for k in ("p50_ms", "p99_ms")):
        errors.append("summary has no step latency (p50_ms, p99_ms)")


def check_dataplane_netns(rows, summary, errors):
    # The client's own summary (a dataplane one) comes before the iperf3 lines.
    client = [r for r in rows if r.get("bench") == "dataplane" and "sizes" in r]
    if not client:
        errors.append("no dataplane summary from the --connect side")
    else:
        check_dataplane(rows, client[-1], errors)
    iperf = [r for r in rows if r.get("what") == "iperf3"]
    if sorted(r.get("when") for r in iperf) != ["after", "before"]:
        errors.append("want an iperf3 line before and one after, got %d" % len(iperf))
    if not number(summary.get("iperf3_gbps")) or summary["iperf3_gbps"] <= 0:
        errors.append("'iperf3_gbps' missing or not > 0")
    link = summary.get("link")
    if not isinstance(link, dict) or not number(link.get("mtu")):
        errors.append("summary has no 'link' with the veth's 'mtu'")
    # The netns summary adds the iperf3 comparisons to each size.
    check_sizes(summary, errors,
                ("size_mib", "groupsgd_gbps", "tcp_gbps", "exchange_gbps", "iperf3_gbps",
                 "ratio", "exchange_ratio", "groupsgd_vs_iperf3", "tcp_vs_iperf3",
                 "exchange_vs_iperf3"),
                ("groupsgd_gbps", "tcp_gbps", "exchange_gbps"))


RUN_KEYS = ("time_to_target_s", "reached", "final_test_acc", "mean_staleness",
            "max_staleness", "regroups", "samples_dropped", "elapsed_s")


def check_straggler(rows, summary, errors):
    runs = [r for r in rows if "mode" in r and "case" in r]
    if not runs:
        errors.append("no per-run lines")
    for r in runs:
        tag = "%s-%s" % (r.get("case"), r.get("mode"))
        if "error" in r:
            errors.append("%s: %s" % (tag, r["error"]))
            continue
        for key in RUN_KEYS + ("time_to_s", "throughput_sps", "breakdown", "detections"):
            if key not in r:
                errors.append("%s: no '%s'" % (tag, key))
        for key in ("final_test_acc", "late_test_acc", "regroups", "samples_dropped",
                    "elapsed_s", "throughput_sps"):
            if not number(r.get(key)):
                errors.append("%s: '%s' is not a number" % (tag, key))
        if r.get("reached") and not number(r.get("time_to_target_s")):
            errors.append("%s: reached but no time_to_target_s" % tag)
        bd = r.get("breakdown")
        if not isinstance(bd, dict) or not all(
                number(bd.get(k)) for k in ("compute", "push_pull", "barrier_wait", "idle")):
            errors.append("%s: breakdown lacks compute/push_pull/barrier_wait/idle" % tag)
    if summary.get("runs") != len(runs):
        errors.append("summary counts %s runs, %d lines" % (summary.get("runs"), len(runs)))
    for key in ("results", "ratios", "time_to_target_s", "time_ratio_vs_no_straggler",
                "adaptive_vs_sync"):
        if not isinstance(summary.get(key), dict):
            errors.append("summary has no '%s' object" % key)
    for case, modes in (summary.get("results") or {}).items():
        for mode, e in modes.items():
            for key in ["time_to_%s_s" % t for t in summary.get("targets") or []] + [
                    "throughput_sps"]:
                st = e.get(key)
                if not isinstance(st, dict) or not all(k in st for k in ("median", "min", "max", "n")):
                    errors.append("%s-%s: '%s' is not {median, min, max, n}" % (case, mode, key))


def check_named_lines(rows, summary, errors, field, names, noun, keys, summary_key):
    """A line whose `field` is each of `names` (a `noun`), with numbers > 0 under `keys`,
    and the summary's number NAME_`summary_key` for each."""
    lines = {r.get(field): r for r in rows if field in r}
    for name in names:
        r = lines.get(name)
        if r is None:
            errors.append("no line for the %s %s" % (name, noun))
            continue
        for key in keys:
            if not number(r.get(key)) or r[key] <= 0:
                errors.append("%s: '%s' missing or not > 0" % (name, key))
        if not number(summary.get(name + "_" + summary_key)):
            errors.append("summary has no %s_%s" % (name, summary_key))


def check_memory(rows, summary, errors):
    check_named_lines(rows, summary, errors, "server", ("central", "group"), "PS",
                      ("peak_bytes", "model_bytes", "peak_model_multiple", "target_bytes"),
                      "peak_model_multiple")


def check_scale(rows, summary, errors):
    for n in (100, 1000, 10000):
        for key in ("decision_ms_%d" % n, "plan_vs_ideal_%d" % n):
            if not number(summary.get(key)):
                errors.append("summary has no '%s'" % key)


def system_runs(rows, bench, errors):
    """The run lines of a groupsgd-against-DDP bench: one per system with and without the
    straggler, none with an error."""
    runs = [r for r in rows if r.get("bench") == bench]
    for system in ("groupsgd", "ddp"):
        for straggler in (True, False):
            if not any(r.get("system") == system and r.get("straggler") == straggler for r in runs):
                errors.append("no %s run %s straggler" % (system, "with" if straggler else "without"))
    for r in runs:
        if "error" in r:
            errors.append("%s run: %s" % (r.get("system"), r["error"]))
    return runs


def check_pytorch(rows, summary, errors):
    runs = system_runs(rows, "pytorch_run", errors)
    for r in runs:
        if "error" not in r and r.get("reached") and not number(r.get("time_to_target_s")):
            errors.append("%s run reached but no time_to_target_s" % r.get("system"))
    for key in ("ddp_s", "groupsgd_s", "speedup_vs_ddp", "ddp_no_straggler_s",
                "groupsgd_no_straggler_s", "binding_overhead"):
        if not number(summary.get(key)):
            errors.append("summary has no '%s' number" % key)
    if number(summary.get("binding_overhead")) and not 0 < summary["binding_overhead"] < 1:
        errors.append("binding_overhead %s is not a fraction" % summary["binding_overhead"])


def check_lm(rows, summary, errors):
    system_runs(rows, "lm_run", errors)
    for key in ("ddp_s", "groupsgd_s", "speedup_vs_ddp", "ddp_no_straggler_s",
                "groupsgd_no_straggler_s"):
        if not number(summary.get(key)) or summary[key] <= 0:
            errors.append("summary has no '%s' number > 0" % key)
    losses = summary.get("val_loss_at_budget")
    if not isinstance(losses, dict) or not all(number(losses.get(k)) for k in ("groupsgd", "ddp")):
        errors.append("summary has no 'val_loss_at_budget' with groupsgd and ddp numbers")


def check_crossover(rows, summary, errors):
    ms = summary.get("makespan_s")
    if not isinstance(ms, dict):
        errors.append("summary has no 'makespan_s' object")
    else:
        for mode in ("sequential", "none", "crossover"):
            if not number(ms.get(mode)) or ms[mode] <= 0:
                errors.append("makespan_s.%s missing or not > 0" % mode)
    for key in ("gain_vs_sequential", "gain_vs_none"):
        if not number(summary.get(key)):
            errors.append("'%s' missing or not a number" % key)
    if not isinstance(summary.get("accuracy_ok"), bool):
        errors.append("'accuracy_ok' missing or not a bool")
    if not isinstance(summary.get("time_to_target_s"), dict):
        errors.append("summary has no 'time_to_target_s' object")
    runs = [r for r in rows if "job" in r and "mode" in r]
    for mode in ("solo", "none", "crossover"):
        if not any(r.get("mode") == mode for r in runs):
            errors.append("no %s run" % mode)
    for r in runs:
        if not r.get("accounting_ok"):
            errors.append("run %s/%s of job %s: accounting not ok" % (r.get("case"), r.get("mode"), r.get("job")))


def check_seeds(rows, summary, errors):
    """scripts/bench/seeds.sh: run lines and one summary line per paper, each tagged with
    its paper; the basu and ashl ones in straggler.sh's shape, crossover's in its own."""
    papers = summary.get("papers")
    if not isinstance(papers, list) or not papers:
        errors.append("summary has no 'papers' list")
        return
    figures = summary.get("figures")
    if not isinstance(figures, dict):
        errors.append("summary has no 'figures' object")
        figures = {}
    for p in papers:
        mine = [r for r in rows if r.get("paper") == p]
        sums = [r for r in mine if r.get("summary") is True]
        runs = [r for r in mine if r.get("summary") is not True]
        if len(sums) != 1:
            errors.append("%s: %d summary lines, want 1" % (p, len(sums)))
            continue
        if not runs:
            errors.append("%s: no run lines" % p)
        if sums[0].get("ok") is not True:
            errors.append("%s: its summary says ok=%s" % (p, sums[0].get("ok")))
        if not isinstance(figures.get(p), dict) or "targets_met" not in figures[p]:
            errors.append("%s: no figures with 'targets_met'" % p)
        if p in ("basu", "ashl"):
            # straggler.sh's run lines (ashl also has ashl_netns.sh's, without a case).
            cased = [r for r in runs if "case" in r]
            check_straggler(cased, dict(sums[0], runs=len(cased)), errors)
        elif p == "crossover":
            check_crossover(runs, sums[0], errors)
        elif p == "chao":
            for r in runs:
                if "error" in r:
                    errors.append("chao %s/%s: %s" % (r.get("experiment"), r.get("case"), r["error"]))
                elif r.get("reached") and not number(r.get("time_to_target_s")):
                    errors.append("chao %s: reached but no time_to_target_s" % r.get("case"))
            if not isinstance(sums[0].get("results"), dict):
                errors.append("chao: summary has no 'results' object")
    for r in rows:
        if "paper" not in r:
            errors.append("a line without 'paper': %.80s" % json.dumps(r))
            break


def check_model_timing(rows, summary, errors):
    check_named_lines(rows, summary, errors, "model", ("mlp", "cnn"), "model",
                      ("median_ms", "min_ms", "max_ms"), "median_ms")


def check_startup(rows, summary, errors):
    """A run line per repeat and cache setting; the summary's medians per setting."""
    keys = ("daemon_ready_s", "first_step_after_last_start_s", "trainer_dataset_ms",
            "trainer_registration_ms", "trainer_first_step_ms", "target_to_all_exit_s")
    for setting in ("on", "off"):
        runs = [r for r in rows if r.get("bench") == "startup" and r.get("cache") == setting]
        if not runs:
            errors.append("no run line with the dataset cache %s" % setting)
        case = (summary.get("cases") or {}).get(setting)
        if not isinstance(case, dict):
            errors.append("summary has no case for the cache %s" % setting)
            continue
        for key in keys:
            if not number(case.get(key)) or case[key] < 0:
                errors.append("cache %s: '%s' missing or not a number >= 0" % (setting, key))


CHECKS = {"dataplane": check_dataplane, "dataplane-netns": check_dataplane_netns,
          "straggler": check_straggler,
          "memory": check_memory, "scale": check_scale, "pytorch": check_pytorch, "lm": check_lm,
          "crossover": check_crossover, "model-timing": check_model_timing,
          "startup": check_startup, "seeds": check_seeds}


def check_machine(summary, errors):
    """scripts/bench.sh adds what the run ran on to the summary (machine_info.py)."""
    m = summary.get("machine")
    if not isinstance(m, dict):
        errors.append("summary has no 'machine' (run it through scripts/bench.sh)")
        return
    for key in ("cores", "load_before", "load_after", "tcp_echo_gbps"):
        if not number(m.get(key)):
            errors.append("machine: '%s' missing or not a number" % key)
    for key in ("cpu_model", "commit", "date"):
        if not isinstance(m.get(key), str) or not m[key]:
            errors.append("machine: '%s' missing" % key)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in CHECKS:
        sys.stderr.write("usage: check_json.py {%s} FILE\n" % ",".join(sorted(CHECKS)))
        return 2
    name, path = sys.argv[1], sys.argv[2]
    errors = []
    rows = []
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    for i, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except ValueError as e:
            errors.append("line %d is not JSON (%s): %.80s" % (i, e, line))
            continue
        if not isinstance(obj, dict):
            errors.append("line %d is not a JSON object" % i)
            continue
        rows.append(obj)
    if not lines:
        errors.append("no output")
    summary = rows[-1] if rows and not errors else {}
    if rows and not errors:
        if summary.get("bench") != name:
            errors.append("last line is not the %s summary: %.120s" % (name, lines[-1]))
        elif name != "scale" and summary.get("ok") is not True:
            errors.append("summary says ok=%s" % summary.get("ok"))
        else:
            CHECKS[name](rows[:-1], summary, errors)
            check_machine(summary, errors)
    for e in errors:
        sys.stderr.write("check_json %s: %s\n" % (name, e))
    if not errors:
        print("check_json %s: %d lines, summary well formed" % (name, len(rows)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
