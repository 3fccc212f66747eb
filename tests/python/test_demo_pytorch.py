"""scripts/demo.sh --trainer pytorch: the demo's PyTorch run goes through the launcher
(python3 -m groupsgd.run): the daemon's progress and closing lines on stdout, one log per
process in the run's directory, exit 0 at the target."""

import json
import os
import subprocess

import pytest

pytest.importorskip("torch")

from conftest import SOURCE_DIR  # noqa: E402


def test_the_pytorch_demo_runs_through_the_launcher(tmp_path):
    build = os.path.dirname(os.environ["PYTHONPATH"].split(os.pathsep)[0])
    env = dict(os.environ, BENCH_NO_BUILD="1", BUILD_DIR=build, TMPDIR=str(tmp_path))
    out = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "demo.sh"), "--trainer", "pytorch",
                          "--workers", "2", "--stragglers", "1", "--target-acc", "0.6",
                          "--max-seconds", "120", "--json"],
                         capture_output=True, text=True, env=env, timeout=280)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])  # --json: the last line
    assert summary["reached"] and summary["config"]["model"] == "external", summary
    assert {w["name"] for w in summary["worker_stats"]} >= {"w0", "w1"}
    assert "groupsgd.run: groupsgdd (pid" in out.stderr  # started by the launcher
    run_dir = out.stderr.split("logs in ", 1)[1].split()[0]
    assert sorted(os.listdir(run_dir)) == ["daemon.log", "evaluator.log", "summary.json",
                                           "w0.log", "w1.log"]
    assert json.load(open(os.path.join(run_dir, "summary.json")))["reached"]
