"""Epochs of a job that iterates a DataLoader, on any supported interpreter.

The loader is the stand-in next to this script (stand_in/torch/...), so no
torch wheel is needed. Each epoch makes a training pass and an evaluation
pass; every training step keeps a 64 KiB buffer for good. With --wrap the
loops go over each loader through a generator (as over tqdm(loader)),
from which CPython 3.12 and later start the pass inline once they have
specialized the loop.

Usage: stand_in_epochs.py [EPOCHS] [--wrap]
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "stand_in"))
from torch.utils.data.dataloader import DataLoader  # noqa: E402

KEPT = []


def wrapped(loader):
    for batch in loader:
        yield batch


def main():
    arguments = [a for a in sys.argv[1:] if a != "--wrap"]
    epochs = int(arguments[0]) if arguments else 6
    wrap = wrapped if "--wrap" in sys.argv else (lambda loader: loader)
    train_loader = DataLoader(range(16))
    eval_loader = DataLoader(range(4))
    for epoch in range(1, epochs + 1):
        for _ in wrap(train_loader):
            KEPT.append(bytearray(64 * 1024))
        for _ in wrap(eval_loader):
            bytearray(4096)
        print(f"epoch {epoch}: kept {len(KEPT)}", flush=True)


if __name__ == "__main__":
    main()
