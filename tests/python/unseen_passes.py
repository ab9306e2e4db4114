"""Passes the tracer sees only at first: the stand-in DataLoader's __iter__
allocates through malloc for its first three passes only, then starts its
passes with small objects alone (as persistent workers over an unshuffled
dataset do), which no hook sees. Each pass keeps a 64 KiB buffer for good.

Usage: unseen_passes.py SECONDS
"""

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "stand_in"))
from torch.utils.data.dataloader import DataLoader  # noqa: E402

KEPT = []


class QuietLoader(DataLoader):
    passes = 0

    def __iter__(self):
        QuietLoader.passes += 1
        if QuietLoader.passes <= 3:
            return super().__iter__()
        return iter(self.items)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 22
    loader = QuietLoader(list(range(4)))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in loader:
            # A step's work: the tracer looks at the clock as it allocates.
            work = [bytearray(1024) for _ in range(100)]
            del work
            time.sleep(0.05)
        KEPT.append(bytearray(64 * 1024))
    print(f"{QuietLoader.passes} passes, kept {len(KEPT)}", flush=True)


if __name__ == "__main__":
    main()
