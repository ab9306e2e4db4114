"""A job whose work runs in the workers of a multiprocessing pool started
with the `fork` method (Linux's default before Python 3.14).

Each of its 8 epochs maps 8 tasks over the pool's 2 workers and ends with
tracer_mark (scripts/tracer_mark.py); each task keeps 48 buffers of 16
KiB in the worker that runs it (`keep_task_buffers`): a leak in the
workers, none in the job itself. The tasks meet in pairs at a barrier, so
that each worker runs half of every epoch's tasks: left to chance, a
worker of a busy machine could run none of an epoch's, and would then
have no allocation at which to follow that epoch. The pool is closed and joined, so that
its workers exit as they do at the end of a job. With
--one-task-per-worker the pool forks a new worker for every task
(maxtasksperchild=1).

Usage: forked_pool.py [--one-task-per-worker]
"""

import multiprocessing
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from tracer_mark import mark  # noqa: E402

EPOCHS = 8
WORKERS = 2
KEPT = []
TASKS_MEET = multiprocessing.get_context("fork").Barrier(WORKERS)


def keep_task_buffers(_task):
    TASKS_MEET.wait(timeout=60)
    for _ in range(48):
        KEPT.append(bytearray(16 * 1024))  # the workers' leak
    return len(KEPT)


if __name__ == "__main__":
    tasks_per_worker = 1 if "--one-task-per-worker" in sys.argv[1:] else None
    pool = multiprocessing.get_context("fork").Pool(WORKERS, maxtasksperchild=tasks_per_worker)
    for epoch in range(1, EPOCHS + 1):
        pool.map(keep_task_buffers, range(4 * WORKERS), chunksize=1)
        mark(f"epoch {epoch}")
        print(f"epoch {epoch}: done", flush=True)
    pool.close()
    pool.join()
