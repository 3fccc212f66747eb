"""Prometheus's own tools on what groupsgd ships (ctest -L prometheus):

  check_metrics  promtool check metrics on a registry's exposition with a histogram and
                 escapes (groupsgd-metrics-sample), then on the /metrics of live daemons:
                 a single run with a straggler flagged, a trainer and the evaluator
                 SIGKILLed (dead, lost) and a job name that needs escaping; then a --serve
                 daemon running a job, and after that job ended.
  rules          promtool check rules, promtool test rules and promtool check config on
                 ops/prometheus.
  grafana        every metric name in ops/grafana/groupsgd.json and in the rules is in the
                 exposition of a live --serve daemon (or recorded by the rules).
  scrape         Debian's prometheus, configured by ops/prometheus/prometheus.example.yml,
                 scrapes a live run with the rules loaded; a worker series, a recorded
                 series and every board expression through its HTTP API.

usage: prometheus_test.py CASE SOURCE_DIR   (exit 77 = skipped: a tool is missing)"""

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
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_daemon import (LiveDaemon, families, http_get, label_value,  # noqa: E402
                         need_tool, sample_value, start_straggler_run, wait_for)

ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "../..")
RULES = os.path.join(ROOT, "ops/prometheus/groupsgd.rules.yml")
RULES_TEST = os.path.join(ROOT, "ops/prometheus/groupsgd.rules.test.yml")
BOARD = os.path.join(ROOT, "ops/grafana/groupsgd.json")
EXAMPLE_CONFIG = os.path.join(ROOT, "ops/prometheus/prometheus.example.yml")
# A --serve daemon's settings, the defaults of its jobs (FAST without the stop condition).
SERVE_FAST = ["--heartbeat-ms", "250", "--control-ms", "500", "--step-deadline-ms", "1000"]


def check(what, ok, detail=""):
    print(f"{'ok' if ok else 'FAIL'}: {what}" + (f" ({detail})" if detail and not ok else ""),
          flush=True)
    if not ok:
        raise AssertionError(what + (f": {detail}" if detail else ""))


def promtool_check_metrics(promtool, text, where):
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=30)
    problems = (out.stdout + out.stderr).strip()
    check(f"promtool check metrics finds nothing in the {where} exposition "
          f"({len(families(text))} families)", out.returncode == 0 and not problems,
          f"exit {out.returncode}: {problems}")


def case_check_metrics(tmp):
    promtool = need_tool("promtool")
    # 0. What no live daemon shows yet: a histogram, escapes, NaN and infinities.
    sample = subprocess.run([os.environ["GROUPSGD_METRICS_SAMPLE"]], capture_output=True,
                            text=True, check=True).stdout
    check("the sample has a histogram and escapes",
          "# TYPE groupsgd_group_step_seconds histogram" in sample and '\\"g\\"' in sample)
    promtool_check_metrics(promtool, sample, "sample registry's")
    # 1. A single run: a straggler, then a dead trainer and a lost evaluator.
    job = 'lab "q" \\ b'  # a quote, a backslash and a space: escaped in every label
    live = LiveDaemon(f"{tmp}/single")
    os.makedirs(live.tmp)
    try:
        start_straggler_run(live, job, extra=["--checkpoint-dir", f"{live.tmp}/ckpt",
                                              "--checkpoint-interval-s", "1"])
        j = f'job="{label_value(job)}"'
        live.wait_scrape("worker 1 (w1, 4x slower) flagged a straggler",
                         lambda t: re.search(r'groupsgd_worker_straggler\{' + re.escape(j) +
                                             r',worker="\d+"\} 1\n', t))
        live.kill("w4")
        live.kill("evaluator")
        text = live.wait_scrape(
            "a dead trainer and a lost evaluator",
            lambda t: sample_value(t, f'groupsgd_workers{{{j},state="dead"}}') == 1 and
            sample_value(t, f"groupsgd_evaluator_losses_total{{{j}}}") == 1 and
            sample_value(t, f"groupsgd_accuracy_measured{{{j}}}") == 0)
        with open(f"{tmp}/single.prom", "w") as f:
            f.write(text)
        promtool_check_metrics(promtool, text, "single-run")
        check("the job label is escaped", f"groupsgd_central_version{{{j}}} " in text)
        check("counters are there from 0 (checkpoint failures, refusals)",
              sample_value(text, f"groupsgd_checkpoint_failures_total{{{j}}}") == 0 and
              sample_value(text, f"groupsgd_updates_refused_total{{{j}}}") == 0)
        active = sample_value(text, f'groupsgd_workers{{{j},state="active"}}')
        check("3 trainers active", active == 3, str(active))
        check("3 workers have step-time series (the dead one none)",
              len(re.findall(r"^groupsgd_worker_compute_seconds\{", text, re.M)) == 3)
    finally:
        live.stop()
    # 2. A --serve daemon running a job (the daemon's job and slot series).
    live = LiveDaemon(f"{tmp}/serve")
    os.makedirs(live.tmp)
    try:
        live.start(SERVE_FAST, serve=True)
        submit_job(live, "mnist-a", workers=2)
        for i in (1, 2):
            live.worker(f"w{i}", "--job", "mnist-a", "--device-ms", "5")
        text = live.wait_scrape(
            "job mnist-a training",
            lambda t: (sample_value(t, 'groupsgd_samples_trained_total{job="mnist-a"}') or 0) > 0
            and sample_value(t, "groupsgd_jobs_running") == 1)
        with open(f"{tmp}/serve.prom", "w") as f:
            f.write(text)
        promtool_check_metrics(promtool, text, "--serve")
        for name in ("groupsgd_group_slots_in_use", "groupsgd_node_group_slots",
                     "groupsgd_control_requests_total"):
            check(f"{name} is exported", name in families(text))
        # The job's end: its series stay, updated once more (no trainer active).
        live.ctl("job", "stop", "mnist-a", "--drain")
        text = live.wait_scrape("job mnist-a ended",
                                lambda t: sample_value(t, "groupsgd_jobs_running") == 0)
        active = sample_value(text, 'groupsgd_workers{job="mnist-a",state="active"}')
        check("the ended job's series show no trainer active", active == 0, str(active))
        check("the ended job's trainers lost their series",
              'groupsgd_worker_batch{job="mnist-a"' not in text)
        promtool_check_metrics(promtool, text, "ended --serve job's")
    finally:
        live.stop()


def submit_job(live, name, workers, mode="adaptive"):
    path = f"{live.tmp}/{name}.json"
    with open(path, "w") as f:
        json.dump({"name": name, "mode": mode, "workers": workers, "target_acc": 0,
                   "max_seconds": 120}, f)
    row = live.ctl("job", "submit", path)
    check(f"job {name} submitted", row.get("state") == "running", json.dumps(row))


def case_rules(tmp):
    promtool = need_tool("promtool")
    out = subprocess.run([promtool, "check", "rules", RULES], capture_output=True, text=True)
    check("promtool check rules", out.returncode == 0, out.stdout + out.stderr)
    out = subprocess.run([promtool, "test", "rules", os.path.basename(RULES_TEST)],
                         cwd=os.path.dirname(RULES_TEST), capture_output=True, text=True)
    check("promtool test rules", out.returncode == 0, out.stdout + out.stderr)
    out = subprocess.run([promtool, "check", "config", EXAMPLE_CONFIG], capture_output=True,
                         text=True)
    check("promtool check config on the example (the rules found from it)",
          out.returncode == 0 and "1 rule files found" in out.stdout, out.stdout + out.stderr)
    # The unit tests are strict enough to notice a weaker rule: the straggler alert
    # without its 5 minutes must fail them.
    weak = f"{tmp}/weak"
    os.makedirs(weak)
    with open(RULES) as f:
        rules = f.read()
    check("the straggler alert waits 5 min", "        for: 5m\n" in rules)
    with open(f"{weak}/groupsgd.rules.yml", "w") as f:
        f.write(rules.replace("        for: 5m\n", ""))
    shutil.copy(RULES_TEST, weak)
    out = subprocess.run([promtool, "test", "rules", os.path.basename(RULES_TEST)], cwd=weak,
                         capture_output=True, text=True)
    check("promtool test rules fails a straggler alert without its 5 min",
          out.returncode != 0 and "GroupsgdStragglerFlagged" in out.stdout + out.stderr)


# --- metric names in PromQL -------------------------------------------------------------

# PromQL words the board and the rules use that are not metric names.
PROMQL_WORDS = {"sum", "avg", "min", "max", "count", "rate", "increase", "delta", "changes",
                "label_values", "and", "or", "unless"}


def metric_names(expr):
    """The metric names an expression reads (groupsgd_* or recorded a:b:c names). Fails on
    any other bare name (a metric groupsgd does not export, e.g. node_exporter's)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges ([5m], [$__rate_interval])
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"(label_values\([^,()]*),\s*\w+\)", r"\1)", e)  # its label argument
    e = re.sub(r"\b\d+(\.\d+)?([eE][-+]?\d+)?\b", "", e)  # numbers
    names = set()
    for tok in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if tok.startswith("groupsgd_") or ":" in tok:
            names.add(tok)
        elif tok not in PROMQL_WORDS:
            raise AssertionError(f"'{tok}' in `{expr}` is neither a groupsgd metric nor a "
                                 f"PromQL word this test knows")
    return names


def board_exprs():
    """Every PromQL expression of the Grafana board: panel targets and variable queries."""
    with open(BOARD) as f:
        board = json.load(f)
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", []))
            walk(p.get("panels", []))

    walk(board["panels"])
    for v in board.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def indented_below(line, indent):
    """A blank line or one indented deeper than `indent`: part of a YAML block scalar."""
    return not line.strip() or len(line) - len(line.lstrip()) > indent


def rules_file():
    """(recorded names, every expr) of the rules file; folded (>-) exprs joined."""
    records, exprs = [], []
    lines = open(RULES).read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*- record: (\S+)$", lines[i])
        if m:
            records.append(m.group(1))
        m = re.match(r"(\s*)expr: (.*)$", lines[i])
        if m:
            indent, text = len(m.group(1)), m.group(2)
            if text in (">-", ">", "|", "|-"):
                body = []
                while i + 1 < len(lines) and indented_below(lines[i + 1], indent):
                    i += 1
                    body.append(lines[i].strip())
                text = " ".join(body)
            exprs.append(text)
        i += 1
    return records, exprs


def exported_names(text):
    names = set()
    for name, kind in families(text).items():
        names.add(name)
        if kind == "histogram":
            names.update({name + "_bucket", name + "_sum", name + "_count"})
    return names


# Exported by the daemon, but not by this test's live run: the reason.
CONDITIONAL = {
    "groupsgd_test_loss": "only evaluators that report a validation loss (the PyTorch LM "
                          "example); the C++ evaluator reports accuracy",
}


def case_grafana(tmp):
    records, rule_exprs = rules_file()
    check("the rules record 3 series", len(records) == 3, str(records))
    with open(BOARD) as f:
        board = json.load(f)
    ids = [p["id"] for p in board["panels"]]
    check("the board's panels have distinct ids and a place",
          len(ids) == len(set(ids)) and all("gridPos" in p for p in board["panels"]))
    check("every panel queries the board's Prometheus variable",
          all(p["datasource"]["uid"] == "${datasource}"
              for p in board["panels"] if p["type"] != "row")
          and any(v["name"] == "datasource" for v in board["templating"]["list"]))
    exprs = board_exprs()
    check("the board has expressions", len(exprs) >= 20, str(len(exprs)))
    used = {}
    for e in exprs + rule_exprs:
        names = metric_names(e)
        if not names:
            check(f"`{e}` reads a metric", False)
        for n in names:
            used.setdefault(n, e)
    check(f"{len(exprs)} board and {len(rule_exprs)} rule expressions read "
          f"{len(used)} metrics", len(used) > 20)
    # A live --serve daemon: the daemon's, the control socket's and a job's series, with
    # a straggler flagged and an evaluator measuring.
    live = LiveDaemon(tmp)
    try:
        live.start(SERVE_FAST, serve=True)
        submit_job(live, "board", workers=3)
        for i in (1, 2, 3):
            live.worker(f"w{i}", "--job", "board", "--device-ms", "10",
                        "--slowdown", "4" if i == 1 else "1")
        live.worker("evaluator", "--job", "board", "--evaluate")
        text = live.wait_scrape(
            "job board: a straggler flagged, accuracy measured, central stats in",
            lambda t: re.search(r'groupsgd_worker_straggler\{job="board",worker="\d+"\} 1\n', t)
            and "groupsgd_test_accuracy{" in t and "groupsgd_checkpoint_failures_total{" in t)
    finally:
        live.stop()
    exported = exported_names(text)
    for name, expr in sorted(used.items()):
        if ":" in name:
            check(f"{name} is recorded by the rules", name in records, expr)
        elif name in CONDITIONAL and name not in exported:
            # Not in this run: the name must at least be the one the code exports.
            source = open(os.path.join(ROOT, "coordinator/src/metrics_exporter.cc")).read()
            check(f"{name} is exported by MetricsExporter ({CONDITIONAL[name]})",
                  f'"{name[len("groupsgd_"):]}"' in source)
        else:
            check(f"{name} is in the live exposition", name in exported, expr)
    # docs/operations.md's table lists every family (a row may name two: `a`, `b`).
    ops_doc = open(os.path.join(ROOT, "docs/operations.md")).read()
    table = ops_doc[ops_doc.index("\n## Metrics\n"):ops_doc.index("\n## Prometheus and Grafana\n")]
    documented = set(re.findall(r"`(groupsgd_[a-z_]+)`", table))
    for name in sorted(families(text)):
        check(f"{name} is in docs/operations.md's metrics table", name in documented)
    unused = sorted(n for n in exported if n not in used and not n.endswith("_info"))
    print(f"exported, not on the board: {unused}")


# --- a real Prometheus ------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_scrape(tmp):
    prometheus = need_tool("prometheus")
    job = "scrape-test"
    live = LiveDaemon(f"{tmp}/run")
    os.makedirs(live.tmp)
    prom = None
    try:
        # Sync mode: every trainer keeps --batch-size, a value the query must return.
        start_straggler_run(live, job, workers=3, mode="sync", extra=["--batch-size", "24"])
        live.wait_scrape("trainers' step times", lambda t: "groupsgd_worker_batch{" in t)
        target = live.metrics_url.split("/")[2]
        # The shipped example: 1 s intervals, this daemon's port, the rules by their path,
        # and a second scrape of the same target without honor_labels.
        config = open(EXAMPLE_CONFIG).read()
        for old, new in (("5s", "1s"), ("127.0.0.1:9464", target),
                         ("- groupsgd.rules.yml", f"- {os.path.abspath(RULES)}")):
            check(f"the example config has {old}", old in config)
            config = config.replace(old, new)
        config += ("  - job_name: groupsgd-renamed\n"
                   f"    static_configs:\n      - targets: [\"{target}\"]\n")
        with open(f"{tmp}/prometheus.yml", "w") as f:
            f.write(config)
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        with open(f"{tmp}/prometheus.log", "w") as log:
            prom = subprocess.Popen(
                [prometheus, f"--config.file={tmp}/prometheus.yml",
                 f"--storage.tsdb.path={tmp}/data", f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=subprocess.STDOUT)

        def ready():
            if prom.poll() is not None:
                raise AssertionError("prometheus exited:\n" + open(f"{tmp}/prometheus.log").read())
            try:
                return http_get(f"{api}/-/ready", 1)
            except OSError:
                return None

        wait_for("prometheus ready", ready, 30)
        started = time.monotonic()

        def query(q):
            url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            body = json.loads(http_get(url))
            if body.get("status") != "success":
                raise AssertionError(f"query {q}: {body}")
            return body["data"]["result"]

        batch = wait_for("groupsgd_worker_batch in prometheus",
                         lambda: query(f'groupsgd_worker_batch{{job="{job}"}}'), 20)
        print(f"prometheus has the worker series {time.monotonic() - started:.1f} s after it "
              f"was ready")
        check("3 workers' batch series, with the groupsgd job's name as job",
              len(batch) == 3 and all(r["metric"]["job"] == job and "worker" in r["metric"]
                                      for r in batch), json.dumps(batch))
        check("each batch is 24", all(float(r["value"][1]) == 24 for r in batch), json.dumps(batch))
        compute = query(f'groupsgd_worker_compute_seconds{{job="{job}"}}')
        check("compute seconds per step in (5 ms, 10 s)",
              len(compute) == 3 and all(0.005 < float(r["value"][1]) < 10 for r in compute),
              json.dumps(compute))
        up = query('up{job="groupsgd"}')
        check("the target is up", len(up) == 1 and up[0]["value"][1] == "1", json.dumps(up))
        renamed = wait_for("the scrape without honor_labels", lambda: query(
            f'groupsgd_central_version{{job="groupsgd-renamed",exported_job="{job}"}}'), 20)
        check("without honor_labels the job label is exported_job", len(renamed) == 1,
              json.dumps(renamed))
        rate = wait_for("the recorded samples/s",
                        lambda: query(f'job:groupsgd_samples_trained:rate1m{{job="{job}"}}'), 20)
        check("the recorded samples/s is positive", float(rate[0]["value"][1]) > 0,
              json.dumps(rate))
        # Every board expression is valid PromQL to this prometheus ($variables filled in).
        for e in board_exprs():
            q = e.replace("$__rate_interval", "1m").replace("$job", ".+").replace("$instance", ".+")
            m = re.match(r"label_values\(([^,]+),\s*\w+\)$", q)
            query(m.group(1) if m else q)
        check("prometheus evaluates every board expression", True)
    finally:
        if prom is not None:
            prom.send_signal(signal.SIGTERM)
            try:
                prom.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        live.stop()


CASES = {"check_metrics": case_check_metrics, "rules": case_rules, "grafana": case_grafana,
         "scrape": case_scrape}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        print(__doc__)
        return 2
    tmp = tempfile.mkdtemp(prefix=f"groupsgd-prom-{sys.argv[1]}.")
    started = time.monotonic()
    try:
        CASES[sys.argv[1]](tmp)
    except AssertionError as e:
        print(f"FAILED: {e}\nlogs in {tmp}", flush=True)
        for name in sorted(os.listdir(tmp)):
            print(f"  {name}")
        return 1
    print(f"passed in {time.monotonic() - started:.1f} s")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
