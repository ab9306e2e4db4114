"""Threads, the cycle collector, a subprocess and multiprocessing pools
(fork and spawn) under the tracer: the run must end normally and every
process must leave a readable trace.

Usage: stress.py
"""

import gc
import multiprocessing
import subprocess
import sys
import threading


def work(n):
    data = [bytearray(1000 + i) for i in range(n)]
    cycle = [data]
    cycle.append(cycle)
    del cycle
    gc.collect()
    return sum(len(d) for d in data)


def churn(seed):
    kept = []
    for i in range(300):
        block = [bytearray(600 + seed) for _ in range(8)]
        if i % 3 == 0:
            kept.append(block)
        if i % 100 == 0:
            gc.collect()
    return len(kept)


def run_pool(method):
    expected = sum(1000 + i for i in range(50))
    context = multiprocessing.get_context(method)
    pool = context.Pool(2)
    assert pool.map(work, [50] * 6) == [expected] * 6
    # close and join, not terminate: the workers end normally and finish their traces.
    pool.close()
    pool.join()


def main():
    threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    gc.collect()
    for thread in threads:
        thread.join()
    child = subprocess.run(
        [sys.executable, "-c", "print(sum(len(bytearray(700 + i)) for i in range(100)))"],
        check=True, capture_output=True, text=True,
    )
    assert child.stdout.strip() == str(sum(700 + i for i in range(100))), child.stdout
    for method in ("fork", "spawn"):
        run_pool(method)
    gc.collect()
    # spawn started a resource tracker; stop it and wait, so that no process
    # is still writing its trace when this one ends.
    from multiprocessing import resource_tracker
    resource_tracker._resource_tracker._stop()
    print("stress ok")


if __name__ == "__main__":
    main()
