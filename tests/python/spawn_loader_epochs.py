"""A DataLoader whose workers Python's multiprocessing spawns, with a leak
in the workers.

The loader keeps its two workers for the whole run (persistent_workers=True)
and starts them with the `spawn` method (multiprocessing_context="spawn",
the usual choice with CUDA): each is a fresh interpreter, not a fork of this
process. Given `forkserver`, it starts them with that method instead: each
is a fork of a server process, a fresh interpreter that this job starts. Every sample the Dataset hands out keeps a 64 KiB buffer in the
worker that made it (`Leaky.__getitem__`), 2 MiB per worker and epoch. The
job marks the end of each of its 8 epochs with tracer_mark
(scripts/tracer_mark.py).

Usage: spawn_loader_epochs.py [spawn|forkserver]
"""

import pathlib
import sys

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from tracer_mark import mark  # noqa: E402

EPOCHS = 8
SAMPLES = 64


class Leaky(Dataset):
    def __init__(self):
        self.kept = []

    def __len__(self):
        return SAMPLES

    def __getitem__(self, index):
        self.kept.append(bytearray(64 * 1024))
        return torch.full((4,), float(index))


def main():
    start_method = sys.argv[1] if len(sys.argv) > 1 else "spawn"
    loader = DataLoader(
        Leaky(),
        batch_size=8,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=start_method,
        persistent_workers=True,
    )
    for epoch in range(1, EPOCHS + 1):
        total = 0.0
        for batch in loader:
            total += float(batch.sum())
        mark(f"epoch {epoch}")
        print(f"epoch {epoch}: {total:.0f}", flush=True)


if __name__ == "__main__":
    main()
