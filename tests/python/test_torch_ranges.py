"""data_allocation ranges from Python (docs/protocol.md, "Sample ranges"): groupsgd.torch's
sampler claims sample ranges from a real groupsgdd, so every epoch of the run visits every
sample once, with no duplicates when nobody fails; bad use is refused."""

import collections
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402
from groupsgd import _core  # noqa: E402

N = 1000    # training samples
BATCH = 16  # the coordinator's ranges: 16 x 16 = 256 positions
COMMON = ["--heartbeat-ms", "300", "--model", "external", "--log-level", "warn", "--mode",
          "grouped", "--groups", "1", "--workers", "2", "--batch-size", str(BATCH),
          "--max-seconds", "120"]


def tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 10))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(N, 20, generator=g), torch.randint(0, 10, (N,), generator=g)


def train(endpoint, name, drawn, first):
    """One Python trainer: tensor_batches until the run stops, recording every index drawn."""
    x, y = data()
    model = tiny()
    w = gt.Worker(model, coordinator=endpoint, name=name, connect_timeout_ms=30000)
    sampler = gt.ShardBatchSampler(w, N)
    try:
        assert w.data_ranges
        while not w.should_stop:
            idx = sampler.next_batch()
            if not idx:
                break
            if name not in first:
                first[name] = (list(idx), w.seed)
            drawn[name].extend(idx)
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            w.step(loss)
    finally:
        w.close()


def test_python_sampler_claims_ranges_and_each_epoch_covers_the_set_once(daemon):
    d = daemon(*COMMON, "--data-allocation", "ranges", "--max-samples", str(int(2.6 * N)))
    drawn = collections.defaultdict(list)
    first = {}
    threads = [threading.Thread(target=train, args=(d.endpoint, f"p{i}", drawn, first))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    summary = d.wait(60)
    assert summary["data_allocation"] == "ranges"
    epochs = summary["epochs"]
    finished = [e for e in epochs if e["finished"]]
    assert len(finished) >= 2, epochs
    for e in epochs:
        assert e["samples"] == N
        # Nobody failed: exactly once.
        assert e["duplicates"] == 0, (epochs, d.log_text()[-3000:])
        if e["finished"]:
            assert e["coverage"] == 1.0
    # Each trainer's first batch is the start of a range the ledger cut from an epoch's
    # permutation, as the binding computes it from the run seed (a trainer that starts
    # late may begin in a later epoch: the group trains with whoever is there).
    for name, (idx, seed) in first.items():
        starts = []
        for epoch in range(len(epochs)):
            perm = _core.epoch_permutation(N, seed, epoch).tolist()
            starts += [perm[b:b + BATCH] for b in range(0, N, BATCH * BATCH)]
        assert idx in starts, name
    # Every sample drawn once per finished epoch, and at most once more in the epochs
    # begun after them (the last, cut short by the stop, and batches drawn as it came).
    counts = collections.Counter(drawn["p0"] + drawn["p1"])
    assert len(counts) == N
    assert min(counts.values()) >= len(finished)
    assert max(counts.values()) <= len(epochs) + 1


def test_epoch_permutation_is_fixed_by_seed_and_epoch_and_refuses_a_huge_set():
    p = _core.epoch_permutation(100, 5, 0)
    assert sorted(p.tolist()) == list(range(100))
    assert np.array_equal(p, _core.epoch_permutation(100, 5, 0))
    assert not np.array_equal(p, _core.epoch_permutation(100, 5, 1))
    with pytest.raises(ValueError):
        _core.epoch_permutation(2**33, 5, 0)


def test_shards_runs_keep_the_shard_sampler(daemon):
    d = daemon(*COMMON, "--max-samples", "200")
    x, y = data()
    result = {}

    def run(i):
        model = tiny()
        w = gt.Worker(model, coordinator=d.endpoint, name=f"s{i}", connect_timeout_ms=30000)
        result[i] = (w.data_ranges, w.shard_index, w.shard_count)
        with pytest.raises(RuntimeError, match="data_allocation shards"):
            w._session.next_range_batch(N, BATCH)
        for xb, yb in gt.tensor_batches(w, x, y):
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            w.step()
        w.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    summary = d.wait(60)
    assert summary["data_allocation"] == "shards"
    assert "epochs" not in summary
    assert sorted(r[1] for r in result.values()) == [0, 1]
    assert all(r[0] is False for r in result.values())


def test_one_worker_iterating_the_sampler_draws_the_epoch_permutation_in_order(daemon):
    n = 600
    d = daemon("--heartbeat-ms", "300", "--model", "external", "--log-level", "warn", "--mode",
               "sync", "--workers", "1", "--batch-size", str(BATCH), "--max-seconds", "120",
               "--data-allocation", "ranges", "--max-samples", str(n))
    x, y = torch.randn(n, 20), torch.randint(0, 10, (n,))
    model = tiny()
    w = gt.Worker(model, coordinator=d.endpoint, name="solo", connect_timeout_ms=30000)
    sampler = gt.ShardBatchSampler(w, n)
    assert len(sampler) == -(-n // BATCH)  # an equal share: all of it, for one worker
    seed, batches = w.seed, len(sampler)
    drawn = []
    try:
        for idx in sampler:  # one iteration: len() batches
            drawn.extend(idx)
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            w.step()
    finally:
        w.close()
    summary = d.wait(60)
    # Alone, the worker draws the run's permutations in order: epoch 0, then epoch 1.
    order = _core.epoch_permutation(n, seed, 0).tolist() + \
        _core.epoch_permutation(n, seed, 1).tolist()
    assert len(drawn) == batches * BATCH
    assert drawn == order[:len(drawn)]
    assert summary["epochs"][0]["finished"] and summary["epochs"][0]["coverage"] == 1.0
    assert summary["epochs"][0]["duplicates"] == 0
