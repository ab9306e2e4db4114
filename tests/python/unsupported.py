"""Runs on any Python 3: allocates a little and prints a line.

Usage: unsupported.py
"""

def make():
    return [bytearray(1000 + i) for i in range(100)]


print(sum(len(b) for b in make()))
