"""The launcher under Slurm (python3 -m groupsgd.run inside an srun step): SLURM_* read from
a fake environment (a fake scontrol expands the node list), each task's share of trainers
and names, the evaluator on task 0 only, and what it refuses. No Slurm and no daemon: the
launcher is attached (--coordinator) and the script only records its environment."""

import json
import os
import stat
import subprocess
import sys

import pytest

from groupsgd.run import slurm_task

# Writes its GROUPSGD_* environment to DIR/NAME.json.
SCRIPT = r'''
import json, os, sys
env = {k: v for k, v in os.environ.items() if k.startswith("GROUPSGD_")}
with open(os.path.join(sys.argv[1], env["GROUPSGD_NAME"] + ".json"), "w") as f:
    json.dump(env, f)
'''


@pytest.fixture
def fake_scontrol(tmp_path, monkeypatch):
    """A scontrol on PATH that expands n[1-2] (and only that) as Slurm does."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "scontrol"
    tool.write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames n[1-2]" ] || '
                    '{ echo "scontrol: unexpected: $*" >&2; exit 1; }\nprintf "n1\\nn2\\n"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir


def step_env(procid, localid, ntasks, node="n2"):
    return {"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "3", "SLURM_PROCID": str(procid),
            "SLURM_LOCALID": str(localid), "SLURM_NTASKS": str(ntasks),
            "SLURM_JOB_NODELIST": "n[1-2]", "SLURMD_NODENAME": node}


def test_slurm_task_reads_the_step_environment(fake_scontrol):
    t = slurm_task(step_env(3, 1, 4))
    assert (t.job_id, t.step_id, t.rank, t.local_rank, t.world_size, t.node) == \
        ("41", "3", 3, 1, 4, "n2")
    assert t.nodes == ["n1", "n2"]


def test_slurm_task_is_none_outside_a_step():
    assert slurm_task({}) is None
    batch = step_env(0, 0, 4)
    del batch["SLURM_STEP_ID"]  # a batch script is not a step
    assert slurm_task(batch) is None


@pytest.mark.parametrize("key,value,message", [
    ("SLURM_PROCID", "x", "SLURM_PROCID='x' is not a number"),
    ("SLURM_LOCALID", "-1", "SLURM_LOCALID='-1' is below 0"),
    ("SLURM_NTASKS", "0", "SLURM_NTASKS='0' is below 1"),
    ("SLURM_PROCID", "4", "SLURM_PROCID=4 is not below SLURM_NTASKS=4"),
])
def test_slurm_task_refuses_bad_values(fake_scontrol, key, value, message):
    env = step_env(1, 0, 4)
    env[key] = value
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        slurm_task(env)


def test_a_failing_scontrol_is_an_error(fake_scontrol):
    env = step_env(0, 0, 1)
    env["SLURM_JOB_NODELIST"] = "gpu[7-8]"
    with pytest.raises(ValueError, match="scontrol show hostnames 'gpu.7-8.' failed"):
        slurm_task(env)


def launch(tmp_path, env_extra, *args):
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "record.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM") and k != "GROUPSGD_COORDINATOR"}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-m", "groupsgd.run", *args, str(script), str(out)],
                          env=env, capture_output=True, text=True, timeout=60)
    records = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    return proc, records


def test_each_task_starts_its_share_of_trainers(fake_scontrol, tmp_path):
    proc, rec = launch(tmp_path, step_env(1, 1, 2), "--coordinator", "tcp://127.0.0.1:9",
                       "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Slurm task 1 of 2 (job 41, step 3, node n2): 2 trainer(s)" in proc.stderr
    assert sorted(rec) == ["w2", "w3"]
    for i, name in enumerate(["w2", "w3"]):
        assert rec[name]["GROUPSGD_RANK"] == str(2 + i)
        assert rec[name]["GROUPSGD_LOCAL_RANK"] == str(2 + i)
        assert rec[name]["GROUPSGD_WORLD_SIZE"] == "4"
        assert rec[name]["GROUPSGD_ROLE"] == "trainer"
        assert rec[name]["GROUPSGD_NODE"] == "n2"
        assert rec[name]["GROUPSGD_NODES"] == "n1,n2"
        assert rec[name]["GROUPSGD_COORDINATOR"] == "tcp://127.0.0.1:9"


def test_one_trainer_per_task_by_default_coordinator_from_the_environment(fake_scontrol, tmp_path):
    env = dict(step_env(3, 0, 4), GROUPSGD_COORDINATOR="tcp://head:5555")
    proc, rec = launch(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert list(rec) == ["w3"]
    assert rec["w3"]["GROUPSGD_LOCAL_RANK"] == "0"
    assert rec["w3"]["GROUPSGD_COORDINATOR"] == "tcp://head:5555"


def test_the_evaluator_on_task_0_only(fake_scontrol, tmp_path):
    proc, rec = launch(tmp_path, step_env(0, 0, 2), "--coordinator", "tcp://h:1", "--evaluate")
    assert proc.returncode == 0, proc.stderr
    assert list(rec) == ["evaluator"]
    assert rec["evaluator"]["GROUPSGD_ROLE"] == "evaluator"
    proc, rec = launch(tmp_path / "task1", step_env(1, 0, 2), "--coordinator", "tcp://h:1",
                       "--evaluate")
    assert proc.returncode == 0, proc.stderr
    assert rec == {}
    assert "Slurm task 1 of 2 (job 41, step 3, node n2): 0 trainer(s)\n" in proc.stderr


def test_refusals(fake_scontrol, tmp_path):
    proc, rec = launch(tmp_path, step_env(0, 0, 2))
    assert proc.returncode == 2
    assert "give --coordinator or $GROUPSGD_COORDINATOR" in proc.stderr
    proc, rec = launch(tmp_path, dict(step_env(0, 0, 2), SLURM_PROCID="two"),
                       "--coordinator", "tcp://h:1")
    assert proc.returncode == 2
    assert "under Slurm, but SLURM_PROCID='two' is not a number" in proc.stderr
    proc, rec = launch(tmp_path, step_env(0, 0, 2), "--coordinator", "tcp://h:1",
                       "--workers", "0")
    assert proc.returncode == 2
    assert "0 only with --evaluate" in proc.stderr
    proc, rec = launch(tmp_path, {})  # not under Slurm: --workers stays required
    assert proc.returncode == 2
    assert "--workers is required" in proc.stderr
    assert rec == {}
