"""docs/pytorch.md's Quickstart, run as written: its `sh quickstart` blocks in order, in a
scratch directory beside the examples, the `sh install` block replaced by the build under
test (PYTHONPATH, GROUPSGDD) and the documented QUICKSTART_* limits set small."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from conftest import GROUPSGDD, SOURCE_DIR  # noqa: E402

DOC = os.path.join(SOURCE_DIR, "docs", "pytorch.md")


def blocks(kind):
    text = open(DOC).read()
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [textwrap.dedent(b) for b in
            re.findall(r"^ *```sh " + kind + r"\n(.*?)^ *```$", quickstart, re.S | re.M)]


def test_the_quickstart_commands_train_and_load_the_model(tmp_path):
    install = blocks("install")
    assert len(install) == 1 and "scripts/install-deps.sh" in install[0]
    commands = blocks("quickstart")
    assert len(commands) == 2, commands
    assert commands[0].startswith("python3 -m groupsgd.run ")
    # `python3` as the doc says it, meaning the Python with torch that runs this test.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(os.path.join(SOURCE_DIR, "examples"))
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", GROUPSGDD=GROUPSGDD,
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", QUICKSTART_TARGET="0.7",
               QUICKSTART_MAX_SECONDS="150", QUICKSTART_TRAIN_LIMIT="12000")
    results = [subprocess.run(["bash", "-e", "-c", c], cwd=work, env=env, capture_output=True,
                              text=True, timeout=280) for c in commands]
    train, load = results
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    summary = json.loads(train.stdout.strip().splitlines()[-1])  # the launcher's last line
    assert summary["reached"] and summary["acc_at_target"] >= 0.7, summary
    checkpoints = sorted((work / "ckpt").glob("ckpt-*.gsgd"))
    assert checkpoints, os.listdir(work)
    assert load.returncode == 0, load.stdout + load.stderr
    loaded = load.stdout.strip().splitlines()[-1].split()
    assert loaded[:2] == ["loaded", f"ckpt/{checkpoints[-1].name}"], load.stdout
    assert int(loaded[-1]) > 0  # a trained version, not the initial model
