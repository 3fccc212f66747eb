#!/usr/bin/env python3
"""Fashion-MNIST with PyTorch, as a groupsgd worker or under DistributedDataParallel.

The same model, data, batch per worker, learning rate, target accuracy and straggler
emulation either way, so the two are compared on the same code (docs/pytorch.md):

  groupsgd, through the launcher (it starts the daemon, the trainers and the evaluator;
  each copy learns its role, name and coordinator from the environment it sets):
    python3 -m groupsgd.run --workers 4 --evaluate train_fashion_mnist.py --model mlp \
        [--slowdown 4 --stragglers 1]
  or by hand against a daemon started with --model external (docs/pytorch.md):
    train_fashion_mnist.py --coordinator tcp://127.0.0.1:5555 --name w1 [--slowdown 4]
    train_fashion_mnist.py --coordinator tcp://127.0.0.1:5555 --evaluate
  DDP (gloo), one process per rank, MASTER_ADDR/MASTER_PORT set:
    train_fashion_mnist.py --ddp --rank R --world-size 8 [--slowdown 4]

Data: the IDX files of dataset-fashion-mnist (/usr/share/datasets/fashion-mnist); nothing
is downloaded. Straggler emulation as groupsgd-worker's: a step whose real compute took
c ms lasts F * (c + D * b / b_ref) ms (--slowdown F, --device-ms D at the first batch).
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path, limit=0):
    """An IDX file of unsigned bytes (gzipped or not); limit > 0: its first `limit` items."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(4)
        if head[:2] != b"\0\0" or head[2] != 0x08:
            raise ValueError(f"{path} is not an IDX file of unsigned bytes")
        dims = head[3]
        shape = [int.from_bytes(f.read(4), "big") for _ in range(dims)]
        if limit:
            shape[0] = min(shape[0], limit)
        item = int(np.prod(shape[1:])) if dims > 1 else 1
        data = f.read(shape[0] * item)
    if len(data) != shape[0] * item:
        raise ValueError(f"{path} is truncated")
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise FileNotFoundError(f"{stem}[.gz] not in {data_dir} (install dataset-fashion-mnist)")


def load_split(data_dir, split, limit=0):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(find(data_dir, f"{prefix}-images-idx3-ubyte"), limit)
    y = read_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte"), limit)
    x = (torch.from_numpy(x.astype(np.float32) / 255.0) - MEAN) / STD
    return x.unsqueeze(1), torch.from_numpy(y.astype(np.int64))


class SmallCNN(nn.Module):
    """Two 5x5 convolutions and a linear layer (about 30k parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class MLP(nn.Module):
    """784-128-10: small enough for the tests."""

    def __init__(self, hidden=128):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Wide(nn.Module):
    """An MLP of about `millions` million parameters (the binding-overhead benchmark)."""

    def __init__(self, millions=10):
        super().__init__()
        hidden = int(millions * 1e6 / (784 + 10 + 1))
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def resnet18_28x28():
    """torchvision's ResNet-18 for 1x28x28 inputs: a 3x3 stride-1 stem, no max pool."""
    import torchvision

    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, 3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


def make_model(name, seed):
    torch.manual_seed(seed)  # every worker starts from the same weights
    if name == "cnn":
        return SmallCNN()
    if name == "mlp":
        return MLP()
    if name == "resnet18":
        return resnet18_28x28()
    if name.startswith("wide"):
        return Wide(float(name[4:] or 10))
    raise ValueError(f"unknown model {name}")


class Straggler:
    """Sleeps so a step lasts slowdown * (compute + device_ms * batch / reference batch)."""

    def __init__(self, slowdown, device_ms):
        self.slowdown, self.device_ms, self.reference = slowdown, device_ms, None

    def pad(self, started, batch):
        if self.reference is None:
            self.reference = batch
        compute_ms = (time.monotonic() - started) * 1000
        target = self.slowdown * (compute_ms + self.device_ms * batch / self.reference)
        if target > compute_ms:
            time.sleep((target - compute_ms) / 1000)


def pad_before_allreduce(ddp, straggler, batch_size):
    """The emulated device time goes where a slow device spends it: before the gradients
    are communicated (as a groupsgd worker pads before its push). A comm hook pads at the
    first gradient bucket of each step, then runs DDP's usual allreduce; the padding then
    never includes time spent waiting for the other ranks. (Exact for one-bucket models
    such as the mlp and cnn; for larger models later buckets' compute is not padded.)
    Returns the step's state: update(t0=start, batch=size, padded=False) at each step."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    step_state = {"t0": 0.0, "batch": batch_size, "padded": False}

    def padding_hook(_, bucket):
        if not step_state["padded"]:
            step_state["padded"] = True
            straggler.pad(step_state["t0"], step_state["batch"])
        return allreduce_hook(None, bucket)

    ddp.register_comm_hook(None, padding_hook)
    return step_state


def test_batches(x, y, size=1000):
    return lambda: ((x[i:i + size], y[i:i + size]) for i in range(0, len(x), size))


def log(args, **fields):
    if args.json:
        print(json.dumps(fields), flush=True)
    else:
        print(" ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def start_barrier(args):
    """Benchmarks: announce readiness (data loaded) and wait for the go, so every worker
    registers at once and the daemon's clock starts with all of them, as DDP's does."""
    if not args.start_barrier:
        return
    open(os.path.join(args.start_barrier, f"ready.{args.name or os.getpid()}"), "w").close()
    while not os.path.exists(os.path.join(args.start_barrier, "go")):
        time.sleep(0.02)


def run_groupsgd_worker(args, model, train_x, train_y):
    import groupsgd.torch as gt

    start_barrier(args)
    w = gt.Worker(model, coordinator=args.coordinator, name=args.name, compress=args.compress,
                  curve_secret_key_file=args.curve_secret_key_file,
                  curve_server_key_file=args.curve_server_key_file, log_level=args.log_level)
    straggler = Straggler(args.slowdown, args.device_ms)
    model.train()
    step_time = 0.0
    for xb, yb in gt.tensor_batches(w, train_x, train_y, device=args.device):
        t0 = time.monotonic()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        straggler.pad(t0, len(yb))
        w.step(loss, batch=len(yb))
        step_time += time.monotonic() - t0
        if args.max_steps and w.steps >= args.max_steps:
            break
    log(args, role="worker", name=args.name, steps=w.steps, mean_step_ms=round(1000 * step_time / max(1, w.steps), 3))
    w.close()


def run_groupsgd_evaluator(args, model, train_x, test_x, test_y):
    import groupsgd.torch as gt

    ev = gt.Evaluator(model, coordinator=args.coordinator, name=args.name,
                      curve_secret_key_file=args.curve_secret_key_file,
                      curve_server_key_file=args.curve_server_key_file, log_level=args.log_level)
    calib = lambda: (train_x[i:i + 256].to(args.device) for i in range(0, 256 * 8, 256))
    started = time.monotonic()
    ev.run(test_batches(test_x, test_y), calibration_batches=calib, interval_s=args.eval_interval_s,
           device=args.device,
           on_result=lambda v, a: log(args, role="evaluator", t=round(time.monotonic() - started, 2), version=v, acc=round(a, 4)))


def run_ddp(args, model, train_x, train_y, test_x, test_y):
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=args.rank, world_size=args.world_size)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    step_state = pad_before_allreduce(ddp, Straggler(args.slowdown, args.device_ms),
                                      args.batch_size)
    g = torch.Generator().manual_seed(args.seed * 1000003 + args.rank)
    shard = torch.arange(args.rank, len(train_x), args.world_size)
    order, pos = shard[torch.randperm(len(shard), generator=g)], 0
    evaluate = test_batches(test_x, test_y)
    training_s, steps, reached = 0.0, 0, None
    while True:
        t0 = time.monotonic()
        if pos + args.batch_size > len(order):
            order, pos = shard[torch.randperm(len(shard), generator=g)], 0
        idx = order[pos:pos + args.batch_size]
        pos += args.batch_size
        xb, yb = train_x[idx].to(args.device), train_y[idx].to(args.device)
        opt.zero_grad()
        step_state.update(t0=t0, batch=len(yb), padded=False)
        loss = F.cross_entropy(ddp(xb), yb)
        loss.backward()  # padded, then the allreduce: every rank waits for the slowest
        opt.step()
        steps += 1
        training_s += time.monotonic() - t0
        # Evaluation time is not training time: the clock counts training steps only
        # (groupsgd's evaluator runs beside the workers instead).
        # Every rank evaluates at the same steps (collectives must match across ranks).
        done = torch.zeros(1)
        if steps % args.eval_every_steps == 0 or (args.max_steps and steps >= args.max_steps):
            if args.rank == 0:
                acc = _accuracy(model, evaluate(), args.device)
                log(args, role="ddp", t=round(training_s, 2), steps=steps, acc=round(acc, 4))
                if acc >= args.target_acc and reached is None:
                    reached = training_s
                if reached is not None or training_s >= args.max_seconds or (args.max_steps and steps >= args.max_steps):
                    done[0] = 1
            dist.broadcast(done, 0)
            if done[0] == 1:
                break
    if args.rank == 0:
        log(args, bench="ddp_run", time_to_target_s=reached, training_s=round(training_s, 3), steps=steps, reached=reached is not None)
    dist.destroy_process_group()


@torch.no_grad()
def _accuracy(model, batches, device="cpu"):
    was = model.training
    model.eval()
    correct = total = 0
    for xb, yb in batches:
        xb, yb = xb.to(device), yb.to(device)
        correct += (model(xb).argmax(1) == yb).sum().item()
        total += len(yb)
    model.train(was)
    return correct / max(1, total)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="cnn", help="cnn | mlp | resnet18 | wideN (an N-million-parameter MLP)")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--train-limit", type=int, default=0, help="use the first N training images (0 = all)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slowdown", type=float, default=1.0, help="straggler factor F")
    p.add_argument("--stragglers", type=int, default=None,
                   help="under the launcher: only trainers of GROUPSGD_LOCAL_RANK < K are slowed "
                        "down by --slowdown (default: every copy)")
    p.add_argument("--device-ms", type=float, default=0.0, help="emulated device time per step at the first batch")
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--eval-interval-s", type=float, default=None,
                   help="groupsgd evaluator: seconds between fetches (default: paced by what a "
                        "measurement costs, at most about a quarter of a core)")
    p.add_argument("--eval-every-steps", type=int, default=20, help="DDP: rank 0 measures every N steps (off the clock)")
    # groupsgd
    # Unset: the launcher's environment (GROUPSGD_COORDINATOR, GROUPSGD_NAME), else
    # tcp://127.0.0.1:5555 and no name (groupsgd.torch reads them).
    p.add_argument("--coordinator", default=None)
    p.add_argument("--name", default=None)
    p.add_argument("--evaluate", action="store_true",
                   help="the evaluator instead of a trainer (also GROUPSGD_ROLE=evaluator)")
    p.add_argument("--compress", default=None)
    p.add_argument("--curve-secret-key-file", default=None)
    p.add_argument("--curve-server-key-file", default=None)
    p.add_argument("--log-level", default="warn")
    p.add_argument("--start-barrier", default="", help="benchmarks: a directory to wait in for 'go'")
    # DDP (the daemon sets these for groupsgd: keep them equal for a fair comparison)
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)))
    p.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 1)))
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--target-acc", type=float, default=0.85)
    p.add_argument("--max-seconds", type=float, default=300)
    args = p.parse_args(argv)
    args.evaluate = args.evaluate or os.environ.get("GROUPSGD_ROLE") == "evaluator"
    if args.stragglers is not None and int(os.environ.get("GROUPSGD_LOCAL_RANK", 0)) >= args.stragglers:
        args.slowdown = 1.0  # not one of the stragglers

    torch.set_num_threads(args.threads)
    model = make_model(args.model, args.seed).to(args.device)
    train_x, train_y = load_split(args.data, "train", args.train_limit)
    if args.ddp or args.evaluate:
        test_x, test_y = load_split(args.data, "test")
    if args.ddp:
        run_ddp(args, model, train_x, train_y, test_x, test_y)
    elif args.evaluate:
        run_groupsgd_evaluator(args, model, train_x, test_x, test_y)
    else:
        run_groupsgd_worker(args, model, train_x, train_y)
    return 0


if __name__ == "__main__":
    sys.exit(main())
