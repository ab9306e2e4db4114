"""A streaming training job that never marks its epochs, with a planted leak.

The training data is an endless IterableDataset: one long DataLoader pass
that never repeats. Every --every steps, evaluate() iterates several
validation loaders (--loaders) from one line, so the evaluation's passes
go round those loaders. Every training step keeps a 16 KiB buffer for good
(`keep_step_buffer`); with --evaluation-leaks, every evaluation batch does
instead (`keep_evaluation_buffer`), 4 a loader and round.

Usage: eval_rounds.py [--rounds N] [--every N] [--loaders N] [--evaluation-leaks]
"""

import argparse
import sys

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

FEATURES = 16
KEPT = []
EVALUATION_LEAKS = False


class Stream(IterableDataset):
    def __iter__(self):
        while True:
            yield torch.randn(FEATURES)


def keep_step_buffer():
    if not EVALUATION_LEAKS:
        KEPT.append(bytearray(16 * 1024))


def keep_evaluation_buffer():
    KEPT.append(bytearray(16384))


def evaluate(loaders, model):
    total = 0.0
    with torch.no_grad():
        for loader in loaders:
            for (batch,) in loader:
                total += model(batch).sum().item()
                if EVALUATION_LEAKS:
                    keep_evaluation_buffer()
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="evaluations")
    parser.add_argument("--every", type=int, default=64, help="training steps between evaluations")
    parser.add_argument("--loaders", type=int, default=4, help="validation loaders")
    parser.add_argument("--evaluation-leaks", action="store_true", help="the evaluation leaks, not the training")
    args = parser.parse_args()
    global EVALUATION_LEAKS
    EVALUATION_LEAKS = args.evaluation_leaks

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    val_loaders = [DataLoader(TensorDataset(torch.randn(32, FEATURES)), batch_size=8) for _ in range(args.loaders)]
    rounds = 0
    for step, batch in enumerate(DataLoader(Stream(), batch_size=8), 1):
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        keep_step_buffer()
        if step % args.every == 0:
            rounds += 1
            total = evaluate(val_loaders, model)
            print(f"round {rounds}: eval {total:.3f}, kept {len(KEPT)}", flush=True)
            if rounds == args.rounds:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
