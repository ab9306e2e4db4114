"""Allocates rarely after its start: keeps a 200 KB bytearray every 50 ms
for SECONDS, then exits, freeing them as the interpreter shuts down. Cut
into time slices, each slice keeps about 20 of them.

Usage: slow_slices.py SECONDS
"""

import sys
import time

KEPT = []
started = time.monotonic()
while time.monotonic() - started < float(sys.argv[1]):
    KEPT.append(bytearray(200_000))  # kept for good
    time.sleep(0.05)
print("kept", len(KEPT))
