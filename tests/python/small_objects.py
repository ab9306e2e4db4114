"""Small Python objects leaked every epoch, under the default pymalloc.

Each epoch keeps 40,000 small tuples: pymalloc serves objects
of 512 bytes or less from arenas it maps itself, so the leak never reaches
malloc. Epochs are cut with scripts/tracer_mark.py.

With --churn, each tuple kept is followed by eight short-lived strings,
made and dropped on another line: of the same size class, they are what
most often finds the arenas full, so that line needs the new ones.

Usage: small_objects.py [--churn]
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from tracer_mark import mark  # noqa: E402

KEPT = []


def leak_small_objects(count, churn):
    # Only the tuple is new (the loop's ints are freed as it goes), so the
    # leaked objects all come from one line.
    for i in range(count):
        KEPT.append((count, count))
        if churn:
            make_short_lived(i)


def make_short_lived(i):
    # Strings have no free list: each is a pymalloc block, freed at once.
    short_lived = [str(i * 8 + j) for j in range(8)]
    del short_lived


churn = "--churn" in sys.argv[1:]
for epoch in range(8):
    leak_small_objects(40_000, churn)
    mark(f"epoch {epoch}")
print(f"small_objects: {len(KEPT)} kept")
