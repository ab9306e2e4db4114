"""Small Python objects leaked every epoch, under the default pymalloc.

Each epoch keeps 40,000 small tuples: pymalloc serves objects
of 512 bytes or less from arenas it maps itself, so the leak never reaches
malloc. Epochs are cut with scripts/tracer_mark.py.

Usage: small_objects.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from tracer_mark import mark  # noqa: E402

KEPT = []


def leak_small_objects(count):
    # Only the tuple is new (the loop's ints are freed as it goes), so the
    # leaked objects all come from one line.
    for _ in range(count):
        KEPT.append((count, count))


for epoch in range(8):
    leak_small_objects(40_000)
    mark(f"epoch {epoch}")
print(f"small_objects: {len(KEPT)} kept")
