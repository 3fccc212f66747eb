"""groupsgd.run: starts a groupsgd run of a training script, in torchrun's place (docs/pytorch.md).

    python3 -m groupsgd.run --workers 4 --evaluate train.py --epochs 3

Starts a groupsgdd (--model external) on a free loopback port, unless --coordinator names
a running one, then N copies of the script as trainers and, with --evaluate, one more as
the evaluator. Each finds its coordinator and name in the environment:

    GROUPSGD_COORDINATOR  the daemon's endpoint (tcp://127.0.0.1:PORT)
    GROUPSGD_NAME         w0 .. wN-1 (--name-prefix), or "evaluator"
    GROUPSGD_LOCAL_RANK   0 .. N-1 (trainers), N (the evaluator)
    GROUPSGD_ROLE         trainer | evaluator

which groupsgd.torch.Worker(model) and Evaluator(model) read when given no coordinator
or name. The first SIGINT or SIGTERM stops the run cleanly (SIGTERM to the daemon it
started; the workers' SIGINT when attached) and kills what is left after --stop-timeout
seconds; a second one kills at once. The last line on stdout is the daemon's closing
summary as one JSON object (a daemon it started; --no-summary: not printed). --log-dir DIR:
each worker's output in DIR/NAME.log, the daemon's log in DIR/daemon.log, the summary kept
as DIR/summary.json. Exit status: the daemon's (3 when it
had a target accuracy or loss it did not reach, 128+N after signal N, 1 when the trainers all
quit, some failing, before the daemon finished); attached, 1 when any worker failed;
2 for bad arguments.

Under Slurm (inside a job step: SLURM_JOB_ID, SLURM_STEP_ID and SLURM_PROCID set, as in
srun -n N python3 -m groupsgd.run --coordinator EP train.py) each task starts its own
share, attached to the head the job runs (scripts/slurm/groupsgd.sbatch; --coordinator or
$GROUPSGD_COORDINATOR, required): --workers trainers (default 1; 0 with --evaluate) named
PREFIX(SLURM_PROCID*workers+i), and, with --evaluate, the evaluator on the task of
SLURM_PROCID 0 only. Each also gets GROUPSGD_RANK (that global index), GROUPSGD_WORLD_SIZE
(SLURM_NTASKS*workers), GROUPSGD_LOCAL_RANK (SLURM_LOCALID*workers+i: the index on its node,
e.g. for cuda:N), GROUPSGD_NODE (SLURMD_NODENAME) and GROUPSGD_NODES (the job's nodes,
comma-separated, from `scontrol show hostnames SLURM_JOB_NODELIST`).
"""

import argparse
import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PROG = "groupsgd.run"
EXIT_USAGE = 2
EXIT_TARGET_NOT_REACHED = 3  # as scripts/demo.sh


def _log(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def _parser():
    p = argparse.ArgumentParser(
        prog=f"{os.path.basename(sys.executable)} -m {PROG}",
        description="Runs a training script as N groupsgd workers (and an evaluator) "
                    "against a groupsgdd it starts or one it attaches to.")
    p.add_argument("--workers", type=int,
                   help="trainer processes to start (required; under Slurm per task, default 1)")
    p.add_argument("--evaluate", action="store_true",
                   help="start one more copy as the evaluator (GROUPSGD_ROLE=evaluator)")
    p.add_argument("--coordinator", metavar="tcp://HOST:PORT",
                   help="attach to this running daemon instead of starting one")
    p.add_argument("--daemon", metavar="PATH",
                   help="the groupsgdd to start (default: $GROUPSGDD, groupsgdd on PATH, "
                        "or the build tree's)")
    p.add_argument("--daemon-args", default="", metavar="ARGS",
                   help="more groupsgdd flags, split like a shell does "
                        "(e.g. \"--max-seconds 60 --target-acc 0.85\")")
    p.add_argument("--name-prefix", default="w", help="trainer names: PREFIX0 .. (default w)")
    p.add_argument("--stop-timeout", type=float, default=15.0, metavar="S",
                   help="after a stop, seconds to wait before killing what is left (default 15)")
    p.add_argument("--start-timeout", type=float, default=30.0, metavar="S",
                   help="seconds to wait for the daemon to listen (default 30)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="write each worker's output to DIR/NAME.log and the daemon's log "
                        "(stderr) to DIR/daemon.log, and keep its summary in "
                        "DIR/summary.json (default: all on this terminal, the summary in a "
                        "temporary directory)")
    p.add_argument("--no-summary", action="store_true",
                   help="do not print the summary line at the end (the daemon prints its own)")
    p.add_argument("script", help="the training script (run with this Python)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _find_daemon(explicit):
    """--daemon, else $GROUPSGDD, else groupsgdd on PATH, else the build tree's
    (build/python/groupsgd/run.py -> build/daemon/groupsgdd). None when none is found."""
    candidates = [explicit] if explicit else []
    if not explicit:
        if os.environ.get("GROUPSGDD"):
            candidates.append(os.environ["GROUPSGDD"])
        else:
            on_path = shutil.which("groupsgdd")
            if on_path:
                candidates.append(on_path)
            here = os.path.dirname(os.path.abspath(__file__))
            candidates.append(os.path.join(here, "..", "..", "daemon", "groupsgdd"))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def _child_setup():
    """In each child before exec: a process group of its own (a terminal's Ctrl-C reaches
    the launcher only, which stops the run in order) and SIGTERM when the launcher dies
    (no orphan daemon or workers even after a SIGKILL of the launcher)."""
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Stop(Exception):
    pass


class SlurmTask:
    """This process as a task of a Slurm job step, read from the SLURM_* environment."""

    def __init__(self, job_id, step_id, rank, local_rank, world_size, node, nodes):
        self.job_id = job_id
        self.step_id = step_id
        self.rank = rank              # SLURM_PROCID: 0 .. world_size-1 over the step
        self.local_rank = local_rank  # SLURM_LOCALID: its index among the step's tasks on its node
        self.world_size = world_size  # SLURM_NTASKS (of the step)
        self.node = node              # SLURMD_NODENAME
        self.nodes = nodes            # the job's nodes, expanded


def _slurm_hostnames(nodelist):
    """A Slurm host list (n[1-3],gpu7) expanded by `scontrol show hostnames`, the one
    expansion every Slurm version agrees with."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], check=True,
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ValueError(f"scontrol show hostnames {nodelist!r} failed: {e}") from None
    return [h for h in out.split() if h]


def slurm_task(environ=None):
    """The SlurmTask this process is when it runs inside a Slurm job step, else None (also
    in a batch script, which is not a step: no SLURM_STEP_ID). A malformed value raises
    ValueError naming the variable."""
    env = os.environ if environ is None else environ
    if not all(env.get(k) for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID")):
        return None

    def number(key, default=None, minimum=0):
        raw = env.get(key)
        if raw is None or raw == "":
            if default is None:
                raise ValueError(f"{key} is not set")
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{key}={raw!r} is not a number") from None
        if value < minimum:
            raise ValueError(f"{key}={raw!r} is below {minimum}")
        return value

    rank = number("SLURM_PROCID")
    world = number("SLURM_NTASKS", default=1, minimum=1)
    if rank >= world:
        raise ValueError(f"SLURM_PROCID={rank} is not below SLURM_NTASKS={world}")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    return SlurmTask(job_id=env["SLURM_JOB_ID"], step_id=env["SLURM_STEP_ID"], rank=rank,
                     local_rank=number("SLURM_LOCALID", default=0), world_size=world,
                     node=env.get("SLURMD_NODENAME", ""),
                     nodes=_slurm_hostnames(nodelist) if nodelist else [])


class Launcher:
    def __init__(self, args):
        self.args = args
        self.daemon = None
        self.daemon_path = None
        self.workers = []  # (name, role, Popen)
        self.tmp = None
        self.signal = None  # the first stop signal received
        self.killed = False  # a second signal: kill at once
        self.logs = []  # --log-dir files, closed at the end
        self.slurm = None  # a SlurmTask when run inside a Slurm job step

    # -- signals ------------------------------------------------------------------------
    def _on_signal(self, signum, frame):
        if self.signal is None:
            self.signal = signum
            _log(f"{signal.Signals(signum).name}: stopping the run "
                 f"(again to kill at once)")
        else:
            self.killed = True
            _log(f"{signal.Signals(signum).name} again: killing the run")
            self._kill_all(signal.SIGKILL)

    def _children(self):
        procs = [p for _, _, p in self.workers]
        if self.daemon is not None:
            procs.append(self.daemon)
        return procs

    def _kill_all(self, sig, procs=None):
        for p in procs if procs is not None else self._children():
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass

    # -- the daemon ---------------------------------------------------------------------
    def _start_daemon(self):
        a = self.args
        self.tmp = tempfile.mkdtemp(prefix="groupsgd-run.")
        self.endpoint_file = os.path.join(self.tmp, "endpoint")
        self.summary_file = os.path.join(a.log_dir or self.tmp, "summary.json")
        cmd = [self.daemon_path, "--model", "external", "--workers", str(a.workers),
               "--listen", "tcp://127.0.0.1:0", "--endpoint-file", self.endpoint_file,
               "--summary-file", self.summary_file, *self.daemon_args]
        self.daemon = subprocess.Popen(cmd, preexec_fn=_child_setup,
                                       stderr=self._log_file("daemon"))
        deadline = time.monotonic() + a.start_timeout
        while True:
            if self.daemon.poll() is not None:
                raise _Stop(f"groupsgdd exited with {self.daemon.returncode} before it listened "
                            f"(command: {shlex.join(cmd)})")
            try:
                with open(self.endpoint_file) as f:
                    endpoint = f.read().strip()
                if endpoint:
                    return endpoint
            except FileNotFoundError:
                pass
            if self.signal is not None:
                raise _Stop("interrupted while the daemon started")
            if time.monotonic() > deadline:
                raise _Stop(f"groupsgdd did not listen within {a.start_timeout:g} s")
            time.sleep(0.05)

    def _stop_daemon(self):
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)

    def _summary(self):
        if self.daemon is None:
            return None
        try:
            with open(self.summary_file) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    # -- the workers --------------------------------------------------------------------
    def _start_workers(self, endpoint):
        a = self.args
        t = self.slurm
        # (name, role, local rank, extra environment)
        if t is None:
            specs = [(f"{a.name_prefix}{i}", "trainer", i, {}) for i in range(a.workers)]
            if a.evaluate:
                specs.append(("evaluator", "evaluator", a.workers, {}))
        else:
            # This task's share of the step's trainers; the evaluator on task 0.
            where = {"GROUPSGD_WORLD_SIZE": str(t.world_size * a.workers),
                     "GROUPSGD_NODE": t.node, "GROUPSGD_NODES": ",".join(t.nodes)}
            specs = []
            for i in range(a.workers):
                rank = t.rank * a.workers + i
                specs.append((f"{a.name_prefix}{rank}", "trainer", t.local_rank * a.workers + i,
                              dict(where, GROUPSGD_RANK=str(rank))))
            if a.evaluate and t.rank == 0:
                specs.append(("evaluator", "evaluator", t.local_rank * a.workers + a.workers,
                              dict(where)))
        for name, role, rank, extra in specs:
            env = dict(os.environ, GROUPSGD_COORDINATOR=endpoint, GROUPSGD_NAME=name,
                       GROUPSGD_LOCAL_RANK=str(rank), GROUPSGD_ROLE=role, **extra)
            log = self._log_file(name)
            proc = subprocess.Popen([sys.executable, a.script, *a.script_args], env=env,
                                    preexec_fn=_child_setup, stdout=log,
                                    stderr=subprocess.STDOUT if log else None)
            self.workers.append((name, role, proc))

    def _log_file(self, name):
        """--log-dir: DIR/NAME.log opened for a child (it keeps its own descriptor)."""
        if not self.args.log_dir:
            return None
        f = open(os.path.join(self.args.log_dir, f"{name}.log"), "ab")
        self.logs.append(f)
        return f

    # -- the run ------------------------------------------------------------------------
    def _wait(self, procs, timeout):
        """Until every process in procs has exited, or timeout seconds; True if all did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(p.poll() is not None for p in procs):
                return True
            time.sleep(0.05)
        return all(p.poll() is not None for p in procs)

    def _shut_down(self, reason):
        """Stops what is still running: the daemon (SIGTERM; it tells the workers to stop),
        or, attached, the workers (SIGINT); then SIGTERM and SIGKILL after the timeout.
        Workers that outlive a finished daemon get SIGTERM at once: they had their time."""
        if reason:
            _log(reason)
        if all(p.poll() is not None for p in self._children()):
            return
        timeout = self.args.stop_timeout
        if self.daemon is None:
            self._kill_all(signal.SIGINT)
        elif self.daemon.poll() is None:
            self._stop_daemon()
        else:
            timeout = 0
        if self._wait(self._children(), timeout):
            return
        if timeout:
            _log(f"still running after {timeout:g} s: terminating")
        self._kill_all(signal.SIGTERM)
        if self._wait(self._children(), 5):
            return
        _log("killing what is left")
        self._kill_all(signal.SIGKILL)
        self._wait(self._children(), 5)

    def run(self):
        a = self.args
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self._on_signal)
        try:
            if a.coordinator:
                endpoint = a.coordinator
            else:
                endpoint = self._start_daemon()
                _log(f"groupsgdd (pid {self.daemon.pid}) listens on {endpoint}")
            if self.signal is None:
                self._start_workers(endpoint)
            self._supervise()
        except _Stop as e:
            self._shut_down(str(e))
            return self._status(failed_start=True)
        finally:
            if not self.killed:
                self._shut_down(None)
            self._kill_all(signal.SIGKILL)  # nothing outlives the launcher
            for p in self._children():
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self._report()
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)
        return self._status()

    def _supervise(self):
        """Until the run ends: the daemon finished, a stop signal, or (attached) every
        worker exited; with a daemon, every trainer having quit ends it too."""
        trainers = [p for _, role, p in self.workers if role == "trainer"]
        self.trainers_quit = False
        quit_at = None  # when the last trainer exited
        while self.signal is None:
            if self.daemon is not None:
                if self.daemon.poll() is not None:
                    # The run is over; workers told to stop leave by themselves.
                    self._wait([p for _, _, p in self.workers], self.args.stop_timeout)
                    return
                if trainers and all(p.poll() is not None for p in trainers):
                    # Trainers leave first at the end of a run, the daemon follows: it gets
                    # --stop-timeout to finish unless a trainer failed.
                    quit_at = quit_at or time.monotonic()
                    failed = any(p.returncode != 0 for p in trainers)
                    if failed or time.monotonic() - quit_at > self.args.stop_timeout:
                        self.trainers_quit = True
                        self._shut_down("every trainer has exited"
                                        + (", some failing" if failed else "")
                                        + ": stopping the daemon")
                        return
            elif all(p.poll() is not None for _, _, p in self.workers):
                return
            time.sleep(0.1)
        self._shut_down(None)

    def _report(self):
        failed = [(n, p.returncode) for n, _, p in self.workers
                  if p.returncode not in (0, None)]
        for name, rc in failed:
            _log(f"worker {name} exited with {rc}")
        for f in self.logs:
            f.close()
        summary = self._summary()
        if summary is not None:
            if not self.args.no_summary:
                print(json.dumps(summary, separators=(",", ":")), flush=True)
        elif self.daemon is not None:
            _log("the daemon wrote no summary")

    def _status(self, failed_start=False):
        if self.signal is not None:
            return 128 + self.signal
        worker_failed = any(p.returncode not in (0, None) for _, _, p in self.workers)
        if self.daemon is None:
            return 1 if failed_start or worker_failed else 0
        rc = self.daemon.returncode
        if rc is not None and rc != 0:
            return 128 - rc if rc < 0 else rc
        if failed_start:
            return 1
        if getattr(self, "trainers_quit", False) and worker_failed:
            return 1
        summary = self._summary()
        if summary is not None:
            config = summary.get("config") or {}
            for key, what in (("target_acc", "accuracy"), ("target_loss", "loss")):
                target = config.get(key) or 0
                if target > 0 and not summary.get("reached", False):
                    _log(f"the target {what} {target} was not reached")
                    return EXIT_TARGET_NOT_REACHED
        return 0


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        task = slurm_task()
    except ValueError as e:
        _log(f"under Slurm, but {e}")
        return EXIT_USAGE
    if task is not None:
        # Under srun: the head is the job's (groupsgd.sbatch), each task adds its share.
        args.coordinator = args.coordinator or os.environ.get("GROUPSGD_COORDINATOR")
        if not args.coordinator:
            _log(f"under Slurm (task {task.rank} of {task.world_size} in step "
                 f"{task.job_id}.{task.step_id}) give --coordinator or $GROUPSGD_COORDINATOR: "
                 "the job runs the head (scripts/slurm/groupsgd.sbatch)")
            return EXIT_USAGE
        if args.workers is None:
            args.workers = 0 if args.evaluate else 1
        if args.workers < 0 or (args.workers == 0 and not args.evaluate):
            _log("--workers must be at least 1 (0 only with --evaluate)")
            return EXIT_USAGE
    elif args.workers is None:
        _log("--workers is required (outside a Slurm job step)")
        return EXIT_USAGE
    elif args.workers < 1:
        _log("--workers must be at least 1")
        return EXIT_USAGE
    if not os.path.isfile(args.script):
        _log(f"no such script: {args.script}")
        return EXIT_USAGE
    if args.log_dir:
        try:
            os.makedirs(args.log_dir, exist_ok=True)
        except OSError as e:
            _log(f"--log-dir: {e}")
            return EXIT_USAGE
    launcher = Launcher(args)
    launcher.slurm = task
    if task is not None:
        _log(f"Slurm task {task.rank} of {task.world_size} (job {task.job_id}, step "
             f"{task.step_id}, node {task.node or '?'}): {args.workers} trainer(s)"
             + (", the evaluator" if args.evaluate and task.rank == 0 else ""))
    if not args.coordinator:
        launcher.daemon_path = _find_daemon(args.daemon)
        if launcher.daemon_path is None:
            _log("no groupsgdd found (--daemon PATH, $GROUPSGDD or groupsgdd on PATH)")
            return EXIT_USAGE
        try:
            launcher.daemon_args = shlex.split(args.daemon_args)
        except ValueError as e:
            _log(f"--daemon-args: {e}")
            return EXIT_USAGE
    elif args.daemon_args or args.daemon:
        _log("--daemon and --daemon-args are for a daemon it starts, not with --coordinator")
        return EXIT_USAGE
    return launcher.run()


if __name__ == "__main__":
    sys.exit(main())
