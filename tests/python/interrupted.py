"""A job stopped by Ctrl-C: an unhandled KeyboardInterrupt after six
epochs, each keeping 64 blocks of 8000 bytes. CPython finalizes, then
sends itself SIGINT with its default action, so that it dies of it as the
shell expects, without calling exit. Epochs are cut with
scripts/tracer_mark.py.

Usage: interrupted.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from tracer_mark import mark  # noqa: E402

KEPT = []


def keep_blocks():
    for _ in range(64):
        KEPT.append(bytearray(8000))  # the leaking line


for epoch in range(6):
    keep_blocks()
    mark(f"epoch {epoch}")
print(f"interrupted: {len(KEPT)} blocks kept", flush=True)
raise KeyboardInterrupt
