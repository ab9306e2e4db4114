"""A training loop that reaches DataLoader.__iter__ the way a framework's
data fetcher does: through wrappers whose __iter__ calls iter() on the
object they wrap. CPython 3.11 specializes each of those calls once its
function is warm, and then calls the inner __iter__ from the instruction
two code units before (the PRECALL), so that the frames the passes start
from move, wrapper by wrapper, over the first epochs; here two of them
move between the same two passes. Every training step keeps a 64 KiB
buffer for good.

Usage: framework_passes.py [EPOCHS]
"""

import sys

from torch.utils.data import DataLoader

KEPT = []


class Fetcher:
    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        started = 0  # puts the call at another offset than Combined's
        return iter(self.inner)


class Combined:
    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        return iter(self.inner)


def run_epoch(loader):
    for _ in Fetcher(Combined(loader)):
        KEPT.append(bytearray(64 * 1024))


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    train = DataLoader(range(8))
    for epoch in range(1, epochs + 1):
        # The framework iterates its wrappers elsewhere too, and so warms
        # them up (both at the same pace here).
        iter(Combined([]))
        iter(Fetcher([]))
        run_epoch(train)
        print(f"epoch {epoch}: kept {len(KEPT)}", flush=True)


if __name__ == "__main__":
    main()
