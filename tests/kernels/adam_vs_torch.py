#!/usr/bin/env python3
"""The kernels' adam and adamw against torch.optim.Adam / AdamW on the same float32 inputs.

usage: adam_vs_torch.py ADAM_STEP_CLI. Exit 77 (skipped) without torch or numpy.
Gradients span 1e-7 to 30 so both the eps-dominated and the normalised regime are hit."""
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

N, STEPS = 1000, 20


def main(cli):
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(N).astype(np.float32)
    scale = rng.choice([1e-7, 1.0, 30.0], size=(STEPS, N))
    grads = (rng.standard_normal((STEPS, N)) * scale).astype(np.float32)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
        with open(src, "wb") as f:
            f.write(struct.pack("<II", N, STEPS) + p0.tobytes() + grads.tobytes())
        for kind, cls in (("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)):
            p = torch.tensor(p0.copy(), requires_grad=True)
            opt = cls([p], lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
            for s in range(STEPS):
                p.grad = torch.tensor(grads[s])
                opt.step()
            subprocess.run([cli, kind, src, dst], check=True)
            ours = np.fromfile(dst, dtype=np.float32)
            ref = p.detach().numpy()
            diff = np.abs(ours.astype(np.float64) - ref)
            # A few float32 roundings apart: torch's vectorised loops may order them otherwise.
            bound = 4 * np.finfo(np.float32).eps * np.maximum(1.0, np.abs(ref))
            moved = np.abs(ref - p0).max()
            same = int((ours == ref).sum())
            print(f"{kind}: torch {torch.__version__}: max |ours - torch| {diff.max():.3g}, "
                  f"bit-identical {same} of {N}, largest move {moved:.3g}")
            if not (diff <= bound).all() or moved < 1e-2:
                print(f"FAILED: {kind}: {(diff > bound).sum()} elements beyond 4 ulp")
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
