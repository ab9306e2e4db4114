"""A Python helper of the program's own called from two functions.

`make_buffer` hands out 64 KiB buffers; `ingest` keeps the four it gets
each epoch for good, `preview` drops its four at once. With --both,
`preview` keeps its buffers too. The job marks the end of each of its 8
epochs with tracer_mark (scripts/tracer_mark.py).

Usage: helper_callers.py [--both]
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from tracer_mark import mark  # noqa: E402

KEPT = []


def make_buffer():
    return bytearray(64 * 1024)  # the allocating line


def ingest():
    KEPT.append(make_buffer())  # the keeping call


def preview(keep):
    buffer = make_buffer()  # the other call
    if keep:
        KEPT.append(buffer)


def main():
    keep = "--both" in sys.argv[1:]
    for epoch in range(8):
        for _ in range(4):
            ingest()
            preview(keep)
        mark(f"epoch {epoch}")
    print(f"helper_callers: {len(KEPT)} kept")


if __name__ == "__main__":
    main()
