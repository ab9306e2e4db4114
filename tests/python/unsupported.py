"""Runs on any Python 3: allocates a little and prints a line; with
`leak`, first keeps 64 buffers of 4 KiB in each of 8 marked epochs.

Usage: unsupported.py [leak]
"""

import ctypes
import sys

KEPT = []


def make():
    return [bytearray(1000 + i) for i in range(100)]


if sys.argv[1:] == ["leak"]:
    mark = ctypes.CDLL(None).tracer_mark
    mark.argtypes = [ctypes.c_char_p]
    for epoch in range(8):
        KEPT.extend(bytearray(4096) for _ in range(64))
        mark(f"epoch {epoch}".encode())

print(sum(len(b) for b in make()))
