#!/usr/bin/env python3
"""A small PyTorch training job with memory leaks that can be switched on.

The same scenarios as demo-trainer (the Rust one), in plain PyTorch: an MLP on
a synthetic, deterministic classification task, a DataLoader with worker
processes, gradient accumulation, an evaluation pass under no-grad, the CUDA
cache emptied at the end of every epoch when CUDA is in use, and each epoch's
end marked for the leak tracer. It prints each epoch's resident set size.

    python scripts/train.py --epochs 6 --leak loss-history
    LD_PRELOAD=target/release/libtracer.so python scripts/train.py --leak batch-cache
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from tracer_mark import loaded as tracer_loaded, mark  # noqa: E402

FEATURES = 64
HIDDEN = 256
CLASSES = 10
EVAL_BATCHES = 4
NOISE_SLOTS = 32
LEAKS = ("none", "loss-history", "batch-cache", "grad-snapshots")


class SyntheticTask(Dataset):
    """Gaussian inputs labelled by a fixed random linear teacher; sample i is
    the same in every run with the same seed."""

    def __init__(self, seed, length, offset=0):
        self.seed, self.length, self.offset = seed, length, offset
        g = torch.Generator().manual_seed(seed ^ 0x7EAC4E55)
        self.teacher = torch.randn(FEATURES, CLASSES, generator=g)

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.offset + i)
        x = torch.randn(FEATURES, generator=g)
        return x, (x @ self.teacher).argmax()


class NoiseTable:
    """Augmentation noise, one tensor per step slot, made the first time a
    slot is used: it fills during the first epoch, then keeps its size."""

    def __init__(self, seed, shape, device):
        self.seed, self.shape, self.device = seed, shape, device
        self.slots = {}

    def augment(self, step, xs):
        slot = step % NOISE_SLOTS
        noise = self.slots.get(slot)
        if noise is None:
            g = torch.Generator().manual_seed(self.seed ^ 0xA06 ^ (slot << 32))
            noise = torch.randn(*self.shape, generator=g).to(self.device)
            self.slots[slot] = noise
        if noise.shape != xs.shape:  # a short last batch
            return xs
        return xs + noise * 0.05


def leak_loss_history(history, model, xs, ys):
    """LEAK loss-history: computes the batch's loss for the loss curve and
    keeps the tensor itself, autograd graph included, instead of loss.item()."""
    loss = nn.functional.cross_entropy(model(xs), ys)
    history.append(loss)


def leak_batch_cache(cache, model, xs, ys):
    """LEAK batch-cache: keeps every batch with its features (the last hidden
    layer) and logits for replaying hard examples later; nothing ever evicts
    an entry."""
    with torch.no_grad():
        features = model[:-1](xs)
        logits = model[-1](features)
    cache.append((xs.clone(), ys.clone(), features, logits))


def leak_grad_snapshots(snapshots, params):
    """LEAK grad-snapshots: keeps a copy of every gradient at each optimizer
    step, for plotting gradient norms at the end; never trimmed."""
    snapshots.append([p.grad.clone() for p in params])


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def mib(n):
    return n / (1024 * 1024)


def evaluate(model, eval_batches, device):
    with torch.no_grad():
        total = 0.0
        for xs, ys in eval_batches:
            logits = model(xs.to(device))
            total += (logits.argmax(-1) == ys.to(device)).float().mean().item()
    return total / len(eval_batches)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps", type=int, default=48, help="training steps (batches) per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--accumulate", type=int, default=1,
                   help="gradient accumulation: backward every step, optimizer step every K")
    p.add_argument("--leak", choices=LEAKS, default="none")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: default)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even when CUDA is available")
    args = p.parse_args(argv)
    if args.accumulate < 1:
        p.error("--accumulate must be at least 1")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")
    print(f"train.py: device {device}, {args.epochs} epochs x {args.steps} steps, batch {args.batch_size}, "
          f"{args.workers} workers, accumulate {args.accumulate}, leak {args.leak}, "
          f"tracer {'loaded' if tracer_loaded() else 'not loaded'}", flush=True)

    # Held-out samples: the same task, indices far from the training ones.
    eval_set = SyntheticTask(args.seed, EVAL_BATCHES * args.batch_size, offset=1 << 40)
    eval_batches = list(DataLoader(eval_set, batch_size=args.batch_size))

    model = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    ).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=args.lr)
    noise = NoiseTable(args.seed, (args.batch_size, FEATURES), device)
    loss_history, batch_cache, grad_snapshots = [], [], []
    accumulated = []  # detached losses since the last optimizer step
    steps_done = 0

    first_rss = None
    last_rss = rss_bytes()
    started = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        train_set = SyntheticTask(args.seed, args.steps * args.batch_size,
                                  offset=(epoch - 1) * args.steps * args.batch_size)
        loader = DataLoader(train_set, batch_size=args.batch_size, num_workers=args.workers,
                            pin_memory=cuda, prefetch_factor=2 if args.workers > 0 else None)
        model.train()
        losses = []
        for step, (xs, ys) in enumerate(loader):
            xs = xs.to(device, non_blocking=True)
            ys = ys.to(device, non_blocking=True)
            xs = noise.augment(step, xs)

            loss = nn.functional.cross_entropy(model(xs), ys)
            (loss / args.accumulate).backward()
            accumulated.append(loss.detach())

            if args.leak == "loss-history":
                leak_loss_history(loss_history, model, xs, ys)
            elif args.leak == "batch-cache":
                leak_batch_cache(batch_cache, model, xs, ys)

            steps_done += 1
            if steps_done % args.accumulate == 0:
                opt.step()
                if args.leak == "grad-snapshots":
                    leak_grad_snapshots(grad_snapshots, params)
                opt.zero_grad(set_to_none=False)
                losses.append(torch.stack(accumulated).mean().item())
                accumulated.clear()
        del loader

        model.eval()
        accuracy = evaluate(model, eval_batches, device)
        if cuda:
            torch.cuda.empty_cache()
        mark(f"epoch {epoch}")

        rss = rss_bytes()
        loss = sum(losses) / len(losses) if losses else float("nan")
        print(f"epoch {epoch}/{args.epochs}: loss {loss:.4f}  eval acc {accuracy:.3f}  "
              f"rss {mib(rss):.1f} MiB ({mib(rss - last_rss):+.2f} MiB)", flush=True)
        if first_rss is None:
            first_rss = rss
        last_rss = rss

    if args.epochs > 1:
        per_epoch = (last_rss - first_rss) / (args.epochs - 1)
        print(f"rss after epoch 1: {mib(first_rss):.1f} MiB, after epoch {args.epochs}: "
              f"{mib(last_rss):.1f} MiB, {mib(per_epoch):+.2f} MiB per epoch; "
              f"{time.monotonic() - started:.1f}s")
    kept = len(loss_history) + len(batch_cache) + len(grad_snapshots)
    if kept:
        print(f"leak {args.leak}: {kept} entries still held")


if __name__ == "__main__":
    main()
