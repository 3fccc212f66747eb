#!/usr/bin/env python3
"""The crossover benchmark (docs/arbiter.md, docs/benchmarks.md): training jobs of 4
workers each, worker i of every job computing on the shared emulated device "dev<i>"
(--shared-device, --device-ms), with communication of the same order (--link-ms):

  sequential  the jobs one after the other (each alone on the devices: its solo run)
  none        all at once, arbiter policy none: the jobs contend for each device
  crossover   all at once, arbiter policy crossover
  (fifo       all at once, arbiter policy fifo: with --fifo)

for two equal jobs (medians of --repeats runs), three equal jobs, and two jobs of which
one has --heavy times the device time. The jobs of a run are jobs of one groupsgdd
--serve daemon (submitted with groupsgdctl job submit), which hosts the device arbiter
(arbiter_listen) with the run's policy; a solo run is one job of a daemon without an
arbiter. Every job trains a fixed sample budget in sync mode; its clock starts at its
first trainer registration (the jobs of a case are submitted together). makespan = when the last job finished its budget (sequential: the
sum of the solo runs); time to target = the first progress line whose test accuracy is
at least --target (sequential: plus the runs before it); accuracy = the mean test
accuracy of the last 8 progress lines (2 s) at the budget, against the job's solo run
(accuracy_ok: no job more than 0.5 point below it). One JSON line per run, then the
summary object on the last line. Standard library only.

  crossover.py [--quick] [--repeats R] [--device-ms D] [--link-ms L] [--samples N] ...
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
GROUPSGDD = os.path.join(BUILD, "daemon", "groupsgdd")
WORKER = os.path.join(BUILD, "worker", "groupsgd-worker")
GROUPSGDCTL = os.path.join(BUILD, "daemon", "groupsgdctl")
DEVICES = 4
LATE_READINGS = 8  # progress lines (250 ms apart) averaged into late_mean_acc
PROGRESS = re.compile(r"^\[\s*([0-9.]+)s\].*test_acc (\d\.\d+)")


def wait_for_file(path, timeout_s, procs):
    end = time.time() + timeout_s
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return open(path).read().strip()
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.02)
    raise RuntimeError("no endpoint in %s (see the logs beside it)" % path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Host:
    """One groupsgdd --serve daemon hosting a case's jobs, with its device arbiter
    (arbiter_listen) under `policy` (None: no arbiter, as for the solo runs)."""

    def __init__(self, run_dir, policy):
        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self.state = os.path.join(run_dir, "state")
        self.ctl_socket = os.path.join(run_dir, "ctl.sock")
        self.progress = os.path.join(run_dir, "daemon.out")
        ep_file = os.path.join(run_dir, "endpoint")
        cmd = [GROUPSGDD, "--serve", "--state-dir", self.state, "--control-socket", self.ctl_socket,
               "--listen", "tcp://127.0.0.1:0", "--endpoint-file", ep_file, "--progress-ms", "250",
               "--heartbeat-ms", "200"]
        self.arbiter = None
        if policy:
            self.arbiter = "tcp://127.0.0.1:%d" % free_port()
            cmd += ["--arbiter-listen", self.arbiter, "--arbiter-policy", policy]
        self.proc = subprocess.Popen(cmd, stdout=open(self.progress, "w"),
                                     stderr=open(os.path.join(run_dir, "daemon.log"), "w"))
        self.front = wait_for_file(ep_file, 30, [self.proc])
        end = time.time() + 30
        while not os.path.exists(self.ctl_socket):  # the control socket comes after the front
            if time.time() > end or self.proc.poll() is not None:
                raise RuntimeError("no control socket in %s" % run_dir)
            time.sleep(0.02)

    def submit(self, job):
        path = os.path.join(self.run_dir, job["name"] + ".json")
        with open(path, "w") as f:
            json.dump(job, f)
        out = subprocess.run([GROUPSGDCTL, "--socket", self.ctl_socket, "job", "submit", path],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError("job %s refused: %s" % (job["name"], out.stderr + out.stdout))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Job:
    """One training job of a Host: its evaluator and its trainers (processes of their own)."""

    def __init__(self, name, host, procs):
        self.name, self.host, self.procs = name, host, procs
        self.summary_file = os.path.join(host.state, "jobs", name, "summary.json")

    def wait(self, timeout_s):
        end = time.time() + timeout_s
        while not os.path.exists(self.summary_file):
            if time.time() > end or self.host.proc.poll() is not None:
                self.kill()
                raise RuntimeError("job %s did not finish in %d s (logs in %s)"
                                   % (self.name, timeout_s, self.host.run_dir))
            time.sleep(0.05)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()

    def result(self, target):
        summary = json.load(open(self.summary_file))
        ttt = None
        accs = []
        suffix = " job %s" % self.name  # the jobs of a --serve daemon share its output
        for line in open(self.host.progress):
            m = PROGRESS.match(line)
            if not m or not line.rstrip().endswith(suffix):
                continue
            accs.append(float(m.group(2)))
            if ttt is None and accs[-1] >= target:
                ttt = float(m.group(1))
        # One evaluation of a still-moving model is noisy (identical solo runs differ by a
        # point): the accuracy compared is the mean of the last LATE_READINGS readings.
        late = accs[-LATE_READINGS:]
        return {"job": self.name, "elapsed_s": summary["elapsed_s"], "time_to_target_s": ttt,
                "final_test_acc": summary["final_test_acc"],
                "late_mean_acc": sum(late) / len(late) if late else None,
                "samples": summary["samples_trained"], "accounting_ok": summary["accounting_ok"]}


def launch_job(host, name, index, args, device_ms):
    """Submits one job to host and starts its evaluator and 4 trainers on dev0..dev3."""
    host.submit({"name": name, "mode": "sync", "workers": DEVICES, "model": args.model,
                 "max_samples": args.samples, "max_seconds": args.max_seconds, "seed": 7})
    logs = os.path.join(host.run_dir, name)
    os.makedirs(logs, exist_ok=True)
    common = [WORKER, "--coordinator", host.front, "--job", name, "--log-level", "warn"]
    procs = [subprocess.Popen(common + ["--evaluate", "--eval-interval-ms", "300"],
                              stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(logs, "evaluator.log"), "w"))]
    for i in range(DEVICES):
        cmd = common + ["--name", "%s-w%d" % (name, i), "--device-ms", str(device_ms), "--link-ms",
                        str(args.link_ms), "--shared-device", "dev%d" % i, "--device-lock-dir",
                        os.path.join(args.work, "devices"), "--device-sharing", args.sharing,
                        "--seed", str(100 * index + i)]
        if host.arbiter:
            cmd += ["--arbiter", host.arbiter, "--arbiter-timeout-ms", "1000",
                    "--arbiter-handoff", args.handoff]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(logs, "worker-%d.log" % i), "w")))
    return Job(name, host, procs)


def run_jobs(run_dir, policy, jobs, args):
    """jobs [(name, device_ms)] at once as jobs of one --serve daemon; {name: result}."""
    host = Host(run_dir, policy)
    started = []
    try:
        started = [launch_job(host, name, i + 1, args, dms) for i, (name, dms) in enumerate(jobs)]
        for j in started:
            j.wait(args.max_seconds + 120)
        return {j.name: j.result(args.target) for j in started}
    finally:
        for j in started:
            j.kill()
        host.stop()


def run_together(case, policy, jobs, args, rep):
    """All jobs at once under the daemon's arbiter; returns {job name: result}."""
    return run_jobs(os.path.join(args.work, "%s-%s-%d" % (case, policy, rep)), policy, jobs, args)


def run_solo(case, name, job_id, dms, args, rep):
    run_dir = os.path.join(args.work, "%s-solo-%s-%d" % (case, name, rep))
    return run_jobs(run_dir, None, [(name, dms)], args)[name]


def emit(row):
    print(json.dumps(row), flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def run_case(case, jobs, args, repeats, policies):
    """One case: solo runs of each job (sequential), then each policy with all at once.
    Returns the medians: makespan per mode, time to target per job and mode, accuracy."""
    makespan = {m: [] for m in ["sequential"] + policies}
    ttt = {m: {name: [] for name, _ in jobs} for m in makespan}
    acc = {m: {name: [] for name, _ in jobs} for m in makespan}
    for rep in range(repeats):
        offset = 0.0
        for i, (name, dms) in enumerate(jobs):
            r = run_solo(case, name, i + 1, dms, args, rep)
            emit(dict(r, case=case, mode="solo", repeat=rep))
            ttt["sequential"][name].append(None if r["time_to_target_s"] is None else offset + r["time_to_target_s"])
            acc["sequential"][name].append(r["late_mean_acc"])
            offset += r["elapsed_s"]
        makespan["sequential"].append(offset)
        for policy in policies:
            results = run_together(case, policy, jobs, args, rep)
            for name, r in results.items():
                emit(dict(r, case=case, mode=policy, repeat=rep))
                ttt[policy][name].append(r["time_to_target_s"])
                acc[policy][name].append(r["late_mean_acc"])
            makespan[policy].append(max(r["elapsed_s"] for r in results.values()))
    out = {"makespan_s": {m: median(v) for m, v in makespan.items()},
           "time_to_target_s": {m: {n: median(v) for n, v in per.items()} for m, per in ttt.items()},
           "late_mean_acc": {m: {n: median(v) for n, v in per.items()} for m, per in acc.items()}}
    ms = out["makespan_s"]
    out["gain_vs_sequential"] = 1 - ms["crossover"] / ms["sequential"]
    out["gain_vs_none"] = 1 - ms["crossover"] / ms["none"]
    # Every job, in every concurrent mode, at most 0.5 point below its solo (sequential)
    # run (medians of late_mean_acc); being higher is no failure. The signed differences:
    solo = out["late_mean_acc"]["sequential"]
    out["accuracy_delta"] = {
        m: {n: (None if a is None or solo[n] is None else a - solo[n])
            for n, a in out["late_mean_acc"][m].items()} for m in policies}
    out["accuracy_ok"] = all(d is not None and d >= -0.005
                             for per in out["accuracy_delta"].values() for d in per.values())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one run, small budget, two equal jobs only: checks the output, not the speed")
    ap.add_argument("--repeats", type=int, default=None, help="runs per case (default 3; quick 1)")
    ap.add_argument("--device-ms", type=float, default=20, help="emulated device time per step")
    ap.add_argument("--link-ms", type=float, default=15, help="emulated link delay per push")
    ap.add_argument("--samples", type=int, default=None, help="sample budget per job (default 40000; quick 8000)")
    ap.add_argument("--target", type=float, default=None, help="time-to-target accuracy (default 0.80; quick 0.70)")
    ap.add_argument("--model", default="softmax", help="groupsgdd --model (default softmax)")
    ap.add_argument("--heavy", type=float, default=3, help="device time factor of the heavy job")
    ap.add_argument("--sharing", default="timeslice", choices=["timeslice", "exclusive"],
                    help="how unarbitrated steps share an emulated device (worker --device-sharing; "
                         "default timeslice, as a GPU without MPS)")
    ap.add_argument("--fifo", action="store_true", help="also run policy fifo")
    ap.add_argument("--handoff", default="on", choices=["on", "off"],
                    help="worker --arbiter-handoff (default on: the next lease is granted ahead "
                         "and handed over by the device's lock file)")
    ap.add_argument("--cases", default="two,three,heavy",
                    help="comma list of cases to run (two, three, heavy; default all three; "
                         "--quick: two only); the summary's top-level figures are the two-job case's")
    ap.add_argument("--no-extra", action="store_true", help="the same as --cases two")
    ap.add_argument("--extra-repeats", type=int, default=None,
                    help="runs of the three-job and heavy cases (default repeats // 3, at least 1)")
    ap.add_argument("--max-seconds", type=int, default=300, help="per job")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    args.samples = args.samples or (8000 if args.quick else 40000)
    args.target = args.target or (0.70 if args.quick else 0.80)
    for binary in (GROUPSGDD, WORKER, GROUPSGDCTL):
        if not os.access(binary, os.X_OK):
            sys.exit("crossover: %s is missing (scripts/build.sh)" % binary)
    args.work = tempfile.mkdtemp(prefix="groupsgd-crossover-")
    print("crossover: runs under %s" % args.work, file=sys.stderr)
    policies = ["none", "crossover"] + (["fifo"] if args.fifo else [])
    summary = {"bench": "crossover", "quick": args.quick, "repeats": repeats,
               "device_sharing": args.sharing, "handoff": args.handoff, "device_ms": args.device_ms, "link_ms": args.link_ms, "samples_per_job": args.samples,
               "model": args.model, "target_acc": args.target, "workers_per_job": DEVICES,
               "devices": DEVICES}
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in ("two", "three", "heavy")]
    if unknown or not cases:
        sys.exit("crossover: --cases takes two, three and heavy (got %r)" % args.cases)
    if args.quick or args.no_extra:
        cases = ["two"]
    extra_repeats = args.extra_repeats or max(1, repeats // 3)
    try:
        if "two" in cases:
            two = run_case("two", [("a", args.device_ms), ("b", args.device_ms)], args, repeats,
                           policies)
            summary.update(two)
            summary["targets_met"] = (summary["gain_vs_sequential"] >= 0.15 and
                                      summary["gain_vs_none"] >= 0.10)
        if "three" in cases:
            summary["three_jobs"] = run_case(
                "three", [("a", args.device_ms), ("b", args.device_ms), ("c", args.device_ms)],
                args, extra_repeats, ["none", "crossover"])
        if "heavy" in cases:
            summary["heavy"] = run_case(
                "heavy", [("heavy", args.device_ms * args.heavy), ("light", args.device_ms)],
                args, extra_repeats, ["none", "crossover"])
        if "three" in cases or "heavy" in cases:
            summary["extra_repeats"] = extra_repeats
        summary["ok"] = True
    except Exception as e:  # report, with the logs kept
        summary["ok"] = False
        summary["error"] = str(e)
        args.keep = True
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)
    else:
        summary["run_dir"] = args.work
    emit(summary)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
