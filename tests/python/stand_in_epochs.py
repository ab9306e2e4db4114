"""Epochs of a job that iterates a DataLoader, on any supported interpreter.

The loader is the stand-in next to this script (stand_in/torch/...), so no
torch wheel is needed. Each epoch makes a training pass and an evaluation
pass; every training step keeps a 64 KiB buffer for good.

Usage: stand_in_epochs.py [EPOCHS]
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "stand_in"))
from torch.utils.data.dataloader import DataLoader  # noqa: E402

KEPT = []


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    train_loader = DataLoader(range(16))
    eval_loader = DataLoader(range(4))
    for epoch in range(1, epochs + 1):
        for _ in train_loader:
            KEPT.append(bytearray(64 * 1024))
        for _ in eval_loader:
            bytearray(4096)
        print(f"epoch {epoch}: kept {len(KEPT)}", flush=True)


if __name__ == "__main__":
    main()
