"""A leak in a C library of the program's own, called through ctypes.

Each call of the library's compute_features keeps a 16 KiB scratch
buffer; 50 calls an epoch. Epochs are cut with scripts/tracer_mark.py.

Usage: ctypes_library.py LIBRARY
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from tracer_mark import mark  # noqa: E402

N = 1024
lib = ctypes.CDLL(sys.argv[1])
lib.compute_features.restype = ctypes.c_double
lib.compute_features.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]


def featurize(batch, out):
    return lib.compute_features(batch, N, out)  # the calling line


batch = (ctypes.c_float * N)(*range(N))
out = (ctypes.c_float * N)()
total = 0.0
for epoch in range(8):
    for _ in range(50):
        total += featurize(batch, out)
    mark(f"epoch {epoch}")
print(f"ctypes_library: {total:.0f}")
