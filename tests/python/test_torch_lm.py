"""The character-level transformer (examples/pytorch/train_char_lm.py) against a real
groupsgdd: tiny sizes, a few seconds of training. The evaluator's validation loss stops
the run (target_loss), and keep_best keeps the best-evaluated model, not the last."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402

from conftest import SOURCE_DIR, wait_for  # noqa: E402

LM = os.path.join(SOURCE_DIR, "examples", "pytorch", "train_char_lm.py")
FORTUNES = "/usr/share/games/fortunes"
# One layer, width 32, context 32, the first 300k characters: a few ms a step.
TINY = ["--layers", "1", "--width", "32", "--heads", "2", "--context", "32",
        "--text-limit", "300000", "--eval-windows", "32"]
FAST = ["--heartbeat-ms", "200", "--model", "external", "--log-level", "warn"]

pytestmark = pytest.mark.skipif(not os.path.isdir(FORTUNES),
                                reason="Debian's fortunes is not installed (scripts/install-deps.sh)")


def spawn_lm(tmp_path, name, *args):
    log = open(tmp_path / f"{name}.log", "w")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, LM, "--name", name, "--json", *TINY, *map(str, args)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    proc.log_path = tmp_path / f"{name}.log"
    return proc


def json_lines(path):
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows


def lm_module():
    sys.path.insert(0, os.path.dirname(LM))
    import train_char_lm
    return train_char_lm


# The two places the optimizer can run: momentum SGD at the group PS (--server-optimizer),
# or each worker's own AdamW with warm-up and cosine decay on the group's mean gradient
# (optimizer.placement workers), the transformer's usual recipe.
PLACEMENTS = {
    "server": ([], ["--server-optimizer"]),
    "workers": (["--config"], ["--optimizer", "adamw", "--lr", "1e-2", "--warmup", "10",
                               "--steps", "400"]),
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_two_lm_workers_and_the_evaluator_reach_the_target_loss(daemon, processes, tmp_path,
                                                                placement):
    target = 3.0
    daemon_args, worker_args = PLACEMENTS[placement]
    if daemon_args:
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"optimizer": {"placement": placement}}))
        daemon_args = [*daemon_args, config]
    d = daemon(*FAST, "--mode", "grouped", "--workers", "2", "--groups", "2", "--batch-size", "16",
               "--lr", "0.3", "--momentum", "0.9", "--target-loss", target, "--max-seconds", "45",
               "--checkpoint-dir", tmp_path / "ckpt", *daemon_args)
    # Both register together once each has imported torch and read the text (a loaded
    # machine once started one so late that the other reached the target alone).
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    for i in range(2):
        processes.append(spawn_lm(tmp_path, f"w{i}", *worker_args, "--coordinator", d.endpoint,
                                  "--start-barrier", barrier))
    # The evaluator measures the initial model before training starts.
    processes.append(spawn_lm(tmp_path, "evaluator", "--evaluate", "--coordinator", d.endpoint,
                              "--eval-interval-s", "0.3"))
    wait_for(lambda: len(list(barrier.glob("ready.*"))) == 2, 120, "two workers ready")
    wait_for(lambda: json_lines(tmp_path / "evaluator.log"), 120, "the evaluator's first report")
    (barrier / "go").touch()
    summary = d.wait(120)
    for p in processes:
        assert p.wait(timeout=30) == 0, p.log_path.read_text()
    reports = [r for r in json_lines(tmp_path / "evaluator.log") if r.get("role") == "evaluator"]
    assert reports, (tmp_path / "evaluator.log").read_text()
    # The loss fell from about ln(vocabulary) to the target, which stopped the run.
    assert reports[0]["val_loss"] > target + 0.5, reports[:3]
    assert summary["stop_reason"] == "target loss reached", summary
    assert summary["reached"] and summary["loss_at_target"] <= target, summary
    assert summary["final_test_loss"] is not None and summary["final_test_acc"] is not None
    # Best by loss under a target loss: no higher than the final report's.
    assert summary["best_test_loss"] <= summary["final_test_loss"] + 1e-6, summary
    assert summary["best_model_file"] == str(tmp_path / "ckpt" / "best.ckpt"), summary
    workers = [r for p in ("w0", "w1") for r in json_lines(tmp_path / f"{p}.log") if r.get("role") == "worker"]
    assert len(workers) == 2 and all(r["steps"] > 0 for r in workers), workers
    assert all(r["last_loss"] < r["first_loss"] for r in workers), workers
    assert summary["accounting_ok"]


def test_keep_best_keeps_the_best_evaluated_version_not_the_last(daemon, processes, tmp_path):
    lm = lm_module()
    ckpt = tmp_path / "ckpt"
    d = daemon(*FAST, "--mode", "sync", "--workers", "1", "--batch-size", "8", "--lr", "0.1",
               "--max-seconds", "60", "--checkpoint-dir", ckpt)
    processes.append(spawn_lm(tmp_path, "w0", "--server-optimizer", "--coordinator", d.endpoint))
    train, val, vocab = lm.load_corpus(lm.DEFAULT_DATA, 300000)
    torch.manual_seed(1)
    model = lm.CharTransformer(len(vocab), context=32, width=32, layers=1, heads=2)
    ev = gt.Evaluator(model, coordinator=d.endpoint, name="scripted", connect_timeout_ms=60000)
    # A scripted evaluator: its best accuracy (0.6) is neither its first nor its last.
    script = [0.3, 0.6, 0.4]
    fetched = {}  # version -> the parameters it was served
    reported = []
    stop_sent = False
    try:
        with pytest.raises(ValueError):
            ev.report(1.5, 0)
        with pytest.raises(ValueError):
            ev.report(0.5, 0, loss=float("nan"))
        while not ev.should_stop:
            version = ev.fetch()
            if version != ev.version and version > 0:
                acc = script[len(reported)] if len(reported) < len(script) else 0.1
                fetched[version] = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
                sent = ev._session.heartbeats_sent
                ev.report(acc, version, loss=2.0 - acc)
                reported.append((version, acc))
                # Sent at once: the coordinator has it before the next fetch.
                wait_for(lambda: ev._session.heartbeats_sent > sent, 10, "the report's heartbeat")
            if len(reported) >= len(script) + 1 and not stop_sent:
                d.proc.send_signal(signal.SIGINT)  # the run ends; the evaluator measures on
                stop_sent = True
            time.sleep(0.1)
    finally:
        ev.close()
    summary = d.wait(60)
    best_version = reported[1][0]
    assert summary["best_version"] == best_version, (summary, reported)
    assert summary["best_test_acc"] == pytest.approx(0.6), summary
    assert summary["best_test_loss"] == pytest.approx(1.4), summary
    assert summary["final_test_acc"] == pytest.approx(reported[-1][1]), (summary, reported)
    assert summary["final_acc_version"] == reported[-1][0] != best_version
    assert summary["final_test_loss"] == pytest.approx(2.0 - reported[-1][1])
    assert summary["best_model_file"] == str(ckpt / "best.ckpt"), summary
    # The file holds exactly the parameters the evaluator was served at the best version.
    check = lm.CharTransformer(len(vocab), context=32, width=32, layers=1, heads=2)
    assert gt.load_checkpoint(check, summary["best_model_file"]) == best_version
    flat = torch.cat([p.detach().reshape(-1) for p in check.parameters()])
    assert torch.equal(flat, fetched[best_version])
    assert not torch.equal(flat, fetched[reported[-1][0]])


def test_the_lm_script_trains_under_ddp(tmp_path):
    # A port the kernel says is free (29500 + pid % 1000 likely collided once in CI: rank 1
    # was still waiting 120 s after rank 0 had ended).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = [subprocess.Popen([sys.executable, LM, "--ddp", "--rank", str(r), "--world-size", "2",
                               "--json", *TINY, "--max-steps", "30", "--eval-every-steps", "10",
                               "--warmup", "5", "--steps", "30", "--batch-size", "8"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
             for r in range(2)]
    deadline = time.monotonic() + 180
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        outs = [p.communicate()[0] for p in procs]
        raise AssertionError(f"the DDP ranks did not finish in 180 s: {outs}")
    assert all(p.returncode == 0 for p in procs), outs
    rows = [json.loads(line) for line in outs[0].splitlines() if line.startswith("{")]
    run = [r for r in rows if r.get("bench") == "ddp_run"]
    assert run and run[0]["steps"] == 30 and run[0]["samples"] == 30 * 8 * 2, rows
    evals = [r for r in rows if r.get("role") == "ddp"]
    assert [r["steps"] for r in evals] == [10, 20, 30], rows
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] < 4.5, rows  # ln(vocabulary) is about 4.5
