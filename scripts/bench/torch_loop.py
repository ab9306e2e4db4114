#!/usr/bin/env python3
"""CPU PyTorch training loop used by the benchmark (scripts/bench/run.sh).

An MLP on synthetic data fed by a DataLoader with worker processes (forked
again every epoch, the DataLoader default), gradient accumulation, Adam, and a
short evaluation pass per epoch. Each epoch's end is marked for the leak
tracer when it is loaded, unless --no-mark leaves the epochs to the tracer's
DataLoader detection. Torch's intra-op threads are fixed (--threads) so
timings do not depend on the machine's core count. No leak is planted: the
benchmark measures overhead, not findings.

    python scripts/bench/torch_loop.py --epochs 6 --steps 120
"""

import argparse
import ctypes
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FEATURES, HIDDEN, CLASSES = 128, 512, 10


def tracer_mark_function():
    """tracer_mark from libtracer.so when it is preloaded, else None."""
    try:
        return ctypes.CDLL(None).tracer_mark
    except (AttributeError, OSError):
        return None


class Synthetic(Dataset):
    """Deterministic samples: sample i is the same in every run."""

    def __init__(self, length, offset):
        self.length, self.offset = length, offset
        g = torch.Generator().manual_seed(12345)
        self.teacher = torch.randn(FEATURES, CLASSES, generator=g)

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.offset + i)
        x = torch.randn(FEATURES, generator=g)
        meta = {"index": i, "tag": f"sample-{self.offset + i}"}  # Python-side churn
        return x, (x @ self.teacher).argmax(), meta["index"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps", type=int, default=120, help="batches per epoch")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--accumulate", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-mark", action="store_true", help="never call tracer_mark")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    mark = tracer_mark_function()
    print(f"torch_loop: torch {torch.__version__}, {args.epochs} epochs x {args.steps} steps, "
          f"batch {args.batch_size}, {args.workers} workers, accumulate {args.accumulate}, "
          f"{torch.get_num_threads()} threads, tracer {'loaded' if mark else 'not loaded'}"
          f"{', not marking' if args.no_mark else ''}", flush=True)
    if args.no_mark:
        mark = None

    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    eval_batches = list(DataLoader(Synthetic(4 * args.batch_size, 1 << 40), batch_size=args.batch_size))
    history = []
    started = time.monotonic()
    first_epoch_s = 0.0
    steps_done = 0
    for epoch in range(1, args.epochs + 1):
        loader = DataLoader(Synthetic(args.steps * args.batch_size, epoch * 10_000_000),
                            batch_size=args.batch_size, num_workers=args.workers, shuffle=True)
        model.train()
        losses = []
        for xs, ys, _ in loader:
            loss = nn.functional.cross_entropy(model(xs), ys)
            (loss / args.accumulate).backward()
            losses.append(loss.item())
            steps_done += 1
            if steps_done % args.accumulate == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
        del loader
        model.eval()
        with torch.no_grad():
            acc = sum((model(x).argmax(-1) == y).float().mean().item() for x, y, _ in eval_batches)
        history.append(sum(losses) / len(losses))
        if mark:
            mark(f"epoch {epoch}".encode())
        print(f"epoch {epoch}/{args.epochs}: loss {history[-1]:.4f} eval acc {acc / len(eval_batches):.3f}",
              flush=True)
        if epoch == 1:
            first_epoch_s = time.monotonic() - started
    total_s = time.monotonic() - started
    # The epochs after the first run only code already run once: the steady
    # state a long job spends its hours in.
    print(f"torch_loop: done, {steps_done} steps in {total_s:.2f}s, "
          f"epochs after the first in {total_s - first_epoch_s:.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
