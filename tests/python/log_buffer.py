"""A logging handler that buffers every record and never flushes: a leak
of many small objects (about 5000 records an epoch), which pymalloc's
arenas hold. Which object needs a new arena, along which native path, is
chance: the arenas are charged to the logging line through a few stacks.
Each epoch ends with tracer_mark.

Usage: log_buffer.py EPOCHS
"""

import logging
import logging.handlers
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from tracer_mark import mark  # noqa: E402

log = logging.getLogger("train")
log.setLevel(logging.INFO)
log.addHandler(logging.handlers.MemoryHandler(capacity=10**9, flushLevel=logging.CRITICAL + 10))
log.propagate = False


def train_step(step):
    words = [f"tok{step % 97}_{i}" for i in range(8)]
    log.info("step %d loss %.5f", step, 1.0 / (step + 1))  # buffered for good
    return len(words)


step = 0
for epoch in range(int(sys.argv[1])):
    for _ in range(5000):
        train_step(step)
        step += 1
    mark(f"epoch {epoch}")
