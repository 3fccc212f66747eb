#!/usr/bin/env python3
"""A character-level language model (a small decoder-only transformer) on the text of
Debian's `fortunes`, as a groupsgd worker, as the evaluator, or under DDP.

The same model, data, batch per worker, optimizer, schedule and straggler emulation either
way, so the two are compared on the same code (docs/pytorch.md, "A transformer"):

  groupsgd, the workers' optimizer (a daemon with --model external and
  optimizer.placement=workers; each worker runs AdamW on the group's mean gradient):
    train_char_lm.py --coordinator tcp://127.0.0.1:5555 --name w1 [--slowdown 4]
  groupsgd, the daemon's optimizer (no optimizer here; the group PS steps, e.g. momentum):
    train_char_lm.py --server-optimizer --coordinator tcp://127.0.0.1:5555 --name w1
  the evaluator (validation loss and next-character accuracy of each central version):
    train_char_lm.py --evaluate --coordinator tcp://127.0.0.1:5555
  DDP (gloo), one process per rank, MASTER_ADDR/MASTER_PORT set:
    train_char_lm.py --ddp --rank R --world-size 8 [--slowdown 4]
  or through the launcher: python3 -m groupsgd.run --workers 4 --evaluate train_char_lm.py

Data: the fortune files under /usr/share/games/fortunes (Debian's `fortunes`,
`fortunes-min`; not the offensive set under off/, nor the .dat/.u8 index files),
concatenated in name order; every 20th block of 4096 characters is held out for
validation (5%, the same split on every host). The vocabulary is the corpus's characters.
Defaults: 4 layers, width 128, 4 heads, context 128 (about 0.8M parameters); --layers,
--width, --context shrink it. AdamW with linear warm-up and cosine decay
(torch.optim.lr_scheduler.LambdaLR) over --steps. Straggler emulation as
train_fashion_mnist.py's (--slowdown F, --device-ms D).
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_fashion_mnist import (Straggler, log, pad_before_allreduce,  # noqa: E402 (same dir)
                                 start_barrier)

DEFAULT_DATA = "/usr/share/games/fortunes"
BLOCK = 4096          # the split's unit, in characters
HOLD_OUT_EVERY = 20   # every 20th block is validation: 5%


# ---- data ------------------------------------------------------------------------------

def fortune_files(data_dir):
    """The fortune text files of data_dir in name order: regular files (symlinks such as
    the .u8 aliases are skipped), no .dat index files, no subdirectory (off/)."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"{data_dir} is not a directory (install Debian's fortunes: "
                                "scripts/install-deps.sh)")
    names = []
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        names.append(path)
    if not names:
        raise FileNotFoundError(f"no fortune files in {data_dir} (install Debian's fortunes)")
    return names


def load_corpus(data_dir, limit=0):
    """(train text, validation text, vocabulary): the files concatenated, split by blocks.
    limit > 0: only the first `limit` characters (tests)."""
    text = "".join(open(p, encoding="utf-8", errors="replace").read() for p in fortune_files(data_dir))
    if limit:
        text = text[:limit]
    blocks = [text[i:i + BLOCK] for i in range(0, len(text), BLOCK)]
    val = "".join(b for i, b in enumerate(blocks) if i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1)
    train = "".join(b for i, b in enumerate(blocks) if i % HOLD_OUT_EVERY != HOLD_OUT_EVERY - 1)
    if not val:  # a tiny corpus (tests): its last 5% instead
        cut = max(1, len(text) * 95 // 100)
        train, val = text[:cut], text[cut:]
    return train, val, sorted(set(text))


def encode(text, vocab):
    index = {c: i for i, c in enumerate(vocab)}
    return torch.tensor([index[c] for c in text], dtype=torch.long)


class Windows:
    """Random (input, target) windows of `context` characters from a token tensor, drawn
    by a generator of their own (each worker: its own seed and shard)."""

    def __init__(self, tokens, context, seed):
        if len(tokens) <= context + 1:
            raise ValueError(f"{len(tokens)} characters are too few for context {context}")
        self.tokens, self.context = tokens, context
        self.gen = torch.Generator().manual_seed(int(seed))

    def batch(self, n):
        starts = torch.randint(0, len(self.tokens) - self.context - 1, (n,), generator=self.gen)
        idx = starts[:, None] + torch.arange(self.context + 1)
        chunk = self.tokens[idx]
        return chunk[:, :-1], chunk[:, 1:]


def validation_windows(tokens, context, count):
    """Up to `count` non-overlapping windows spread evenly over the validation text: the
    same ones for every model measured (DDP and groupsgd alike)."""
    n = (len(tokens) - 1) // context
    if n < 1:
        raise ValueError(f"the validation text ({len(tokens)} characters) is shorter than one window")
    picks = sorted({int(i * n / min(n, count)) for i in range(min(n, count))})
    x = torch.stack([tokens[p * context:(p + 1) * context] for p in picks])
    y = torch.stack([tokens[p * context + 1:(p + 1) * context + 1] for p in picks])
    return x, y


# ---- model -----------------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention, then a 4x GELU MLP."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharTransformer(nn.Module):
    def __init__(self, vocab_size, context=128, width=128, layers=4, heads=4):
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.context = context
        self.tok = nn.Embedding(vocab_size, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        # Future positions masked; made per call, not a buffer (no state outside the
        # parameters: nothing for DDP to broadcast or a checkpoint to miss).
        mask = torch.ones(t, t, dtype=torch.bool, device=idx.device).triu(1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def lm_loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(model, val_x, val_y, device="cpu", batch=32):
    """(next-character accuracy, mean cross-entropy in nats) over the validation windows."""
    was = model.training
    model.eval()
    loss_sum, correct, total = 0.0, 0, 0
    for i in range(0, len(val_x), batch):
        xb, yb = val_x[i:i + batch].to(device), val_y[i:i + batch].to(device)
        logits = model(xb)
        loss_sum += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1),
                                    reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
        total += yb.numel()
    model.train(was)
    return correct / max(1, total), loss_sum / max(1, total)


# ---- optimizer -------------------------------------------------------------------------

def make_optimizer(args, params):
    """AdamW, linear warm-up over --warmup steps, cosine decay to --min-lr-ratio at --steps.
    --optimizer sgd: momentum SGD at a constant --lr instead, as a daemon's group PS steps
    (the DDP baseline of --server-optimizer runs)."""
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)

    def factor(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
        return args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


# ---- roles -----------------------------------------------------------------------------

def run_groupsgd_worker(args, model, train_tokens):
    import groupsgd.torch as gt

    start_barrier(args)
    common = dict(coordinator=args.coordinator, name=args.name, log_level=args.log_level)
    if args.server_optimizer:
        opt = sched = None
        w = gt.Worker(model, **common)
    else:
        opt, sched = make_optimizer(args, model.parameters())
        try:
            w = gt.Worker(model, optimizer=opt, **common)
        except TypeError as e:
            raise SystemExit(f"this groupsgd has no workers' optimizer (gt.Worker(model, "
                             f"optimizer=...)): {e}; run with --server-optimizer") from None
    windows = Windows(train_tokens, args.context, args.seed * 1000003 + w.shard_index)
    straggler = Straggler(args.slowdown, args.device_ms)
    model.train()
    step_time, first_loss, loss = 0.0, None, None
    while not w.should_stop:
        t0 = time.monotonic()
        xb, yb = windows.batch(w.batch_size)
        xb, yb = xb.to(args.device), yb.to(args.device)
        loss = lm_loss(model, xb, yb)
        loss.backward()
        if args.clip > 0 and opt is None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)  # in place, in the buffer
        straggler.pad(t0, len(yb))
        # The workers' optimizer: w.step pushes the gradients, puts the group's mean into
        # .grad and calls opt.step() and opt.zero_grad(); the schedule then advances.
        w.step(loss, batch=len(yb))
        if sched is not None:
            sched.step()
        step_time += time.monotonic() - t0
        first_loss = float(loss) if first_loss is None else first_loss
        if args.max_steps and w.steps >= args.max_steps:
            break
    log(args, role="worker", name=args.name, steps=w.steps,
        mean_step_ms=round(1000 * step_time / max(1, w.steps), 3),
        first_loss=first_loss, last_loss=None if loss is None else round(float(loss), 4))
    w.close()


def run_groupsgd_evaluator(args, model, val_x, val_y):
    import groupsgd.torch as gt

    ev = gt.Evaluator(model, coordinator=args.coordinator, name=args.name or None,
                      log_level=args.log_level)
    started = time.monotonic()
    ev.run(metrics=lambda m: evaluate(m, val_x, val_y, args.device), interval_s=args.eval_interval_s,
           on_result=lambda v, a: log(args, role="evaluator", t=round(time.monotonic() - started, 2),
                                      version=v, acc=round(a, 4), val_loss=round(ev.loss, 4)))


def run_ddp(args, model, train_tokens, val_x, val_y):
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world_size)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt, sched = make_optimizer(args, ddp.parameters())
    state = pad_before_allreduce(ddp, Straggler(args.slowdown, args.device_ms), args.batch_size)
    windows = Windows(train_tokens, args.context, args.seed * 1000003 + args.rank)
    training_s, steps, loss = 0.0, 0, None
    while True:
        t0 = time.monotonic()
        xb, yb = windows.batch(args.batch_size)
        state.update(t0=t0, batch=len(yb), padded=False)
        opt.zero_grad()
        loss = lm_loss(ddp, xb.to(args.device), yb.to(args.device))
        loss.backward()  # padded, then the allreduce: every rank waits for the slowest
        if args.clip > 0 and args.optimizer == "sgd":
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)  # as the workers do
        opt.step()
        sched.step()
        steps += 1
        training_s += time.monotonic() - t0
        last = (args.max_steps and steps >= args.max_steps) or training_s >= args.max_seconds
        done = torch.tensor([1.0 if last else 0.0])
        dist.all_reduce(done)  # ranks agree on the end (their clocks differ a little)
        if args.rank == 0 and (steps % args.eval_every_steps == 0 or done.item() > 0):
            acc, val = evaluate(model, val_x, val_y, args.device)  # off the clock
            log(args, role="ddp", t=round(training_s, 2), steps=steps, acc=round(acc, 4),
                val_loss=round(val, 4), loss=round(float(loss), 4))
        if done.item() > 0:
            break
    if args.rank == 0:
        acc, val = evaluate(model, val_x, val_y, args.device)
        log(args, bench="ddp_run", training_s=round(training_s, 3), steps=steps,
            samples=steps * args.batch_size * args.world_size, val_loss=round(val, 4),
            val_acc=round(acc, 4))
    dist.destroy_process_group()


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA, help="the fortune files' directory")
    p.add_argument("--text-limit", type=int, default=0, help="use the first N characters (0 = all)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slowdown", type=float, default=1.0, help="straggler factor F")
    p.add_argument("--device-ms", type=float, default=0.0, help="emulated device time per step at the first batch")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps of this worker (0 = when told)")
    p.add_argument("--json", action="store_true")
    # Optimizer and schedule (workers' optimizer and DDP)
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw",
                   help="adamw (warm-up, cosine decay) or sgd (momentum, constant lr)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="--optimizer sgd: its momentum")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=50, help="warm-up steps")
    p.add_argument("--steps", type=int, default=2000, help="schedule length: cosine decay ends here")
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0,
                   help="--server-optimizer: clip each worker's gradient norm; DDP with "
                        "--optimizer sgd: the mean gradient's (0 = off)")
    # groupsgd
    p.add_argument("--coordinator", default=None, help="default: $GROUPSGD_COORDINATOR")
    p.add_argument("--name", default=None, help="default: $GROUPSGD_NAME")
    p.add_argument("--evaluate", action="store_true", help="the evaluator instead of a trainer")
    p.add_argument("--server-optimizer", action="store_true",
                   help="no optimizer here: the daemon's group PS steps (optimizer.placement=server)")
    p.add_argument("--eval-windows", type=int, default=64, help="validation windows measured")
    p.add_argument("--eval-interval-s", type=float, default=0.5, help="evaluator: seconds between fetches")
    p.add_argument("--log-level", default="warn")
    p.add_argument("--start-barrier", default="", help="benchmarks: a directory to wait in for 'go'")
    # DDP
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)))
    p.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 1)))
    p.add_argument("--batch-size", type=int, default=16, help="DDP: windows per rank per step")
    p.add_argument("--eval-every-steps", type=int, default=50, help="DDP: rank 0 measures every N steps (off the clock)")
    p.add_argument("--max-seconds", type=float, default=600, help="DDP: training time limit")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    if args.name is None:
        args.name = os.environ.get("GROUPSGD_NAME", "")
    if os.environ.get("GROUPSGD_ROLE") == "evaluator":
        args.evaluate = True  # started by python3 -m groupsgd.run --evaluate
    torch.set_num_threads(args.threads)
    train, val, vocab = load_corpus(args.data, args.text_limit)
    torch.manual_seed(args.seed)  # every worker starts from the same weights
    model = CharTransformer(len(vocab), args.context, args.width, args.layers, args.heads).to(args.device)
    val_x, val_y = validation_windows(encode(val, vocab), args.context, args.eval_windows)
    if args.ddp:
        run_ddp(args, model, encode(train, vocab), val_x, val_y)
    elif args.evaluate:
        run_groupsgd_evaluator(args, model, val_x, val_y)
    else:
        run_groupsgd_worker(args, model, encode(train, vocab))
    return 0


if __name__ == "__main__":
    sys.exit(main())
