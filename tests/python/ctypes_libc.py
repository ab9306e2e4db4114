"""A leak through malloc looked up on a handle to libc itself.

ctypes.CDLL(ctypes.util.find_library("c")) opens libc, and its malloc is
looked up in libc's own scope: each epoch keeps 100 blocks of 4000 bytes
from it, and frees as many of the program's blocks (from the global
scope's malloc) through the handle's free. Epochs are cut with
scripts/tracer_mark.py.

Usage: ctypes_libc.py
"""

import ctypes
import ctypes.util
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from tracer_mark import mark  # noqa: E402

libc = ctypes.CDLL(ctypes.util.find_library("c"))
process = ctypes.CDLL(None)
for function in (libc.malloc, process.malloc):
    function.restype = ctypes.c_void_p
    function.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
KEPT = []


def stage_blocks():
    for _ in range(100):
        KEPT.append(libc.malloc(4000))  # the leaking line


def free_through_handle():
    for _ in range(100):
        libc.free(process.malloc(6000))


for epoch in range(8):
    stage_blocks()
    free_through_handle()
    mark(f"epoch {epoch}")
print(f"ctypes_libc: {len(KEPT)} blocks kept")
