"""What the Python frame walk costs per allocation.

Runs (timing by thread CPU time, so that a busy machine distorts less) a loop of malloc-sized allocations (bytearray(2000), freed at once) at
several Python stack depths, each under the tracer with Python frames on and
off (TRACER_PYTHON_FRAMES=0), and prints the time per allocation and the
difference, which is the walk's cost.

Usage: bench_walk.py [LIBTRACER] [PYTHON...]
  LIBTRACER defaults to target/release/libtracer.so beside this checkout;
  PYTHON defaults to the running interpreter.
"""

import os
import subprocess
import sys
import tempfile
import time

ROUNDS = 200_000
DEPTHS = (1, 10, 30)
REPEATS = 7


def child(depth):
    def nest(level):
        if level > 1:
            return nest(level - 1)
        start = time.thread_time_ns()
        for _ in range(ROUNDS):
            b = bytearray(2000)
            del b
        return (time.thread_time_ns() - start) / ROUNDS

    # nest(1) sits below <module>, child() and nest: depth counts nest's frames.
    print(nest(depth))


def measure(python, lib, depth, frames_on):
    best = None
    with tempfile.TemporaryDirectory() as scratch:
        # One epoch, every allocation of it recorded (by default the first epoch is sampled).
        env = dict(os.environ, LD_PRELOAD=lib, TRACER_OUTPUT=os.path.join(scratch, "trace.bin"), TRACER_EPOCH_SECONDS="0",
                   TRACER_WARMUP_SAMPLE_BYTES="0")
        env.pop("TRACER_INHERITED_OUTPUT", None)
        if not frames_on:
            env["TRACER_PYTHON_FRAMES"] = "0"
        for _ in range(REPEATS):
            out = subprocess.run([python, __file__, "--child", str(depth)], env=env, check=True, capture_output=True, text=True)
            ns = float(out.stdout.split()[-1])
            best = ns if best is None else min(best, ns)
    return best


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    lib = argv[0] if argv else os.path.join(here, "..", "..", "target", "release", "libtracer.so")
    lib = os.path.abspath(lib)
    pythons = argv[1:] or [sys.executable]
    print(f"{ROUNDS} allocations per run, best of {REPEATS}; ns per allocation")
    print(f"{'python':<40} {'depth':>5} {'frames off':>11} {'frames on':>10} {'walk':>8} {'per frame':>9}")
    for python in pythons:
        for depth in DEPTHS:
            off = measure(python, lib, depth, False)
            on = measure(python, lib, depth, True)
            frames = depth + 2
            print(f"{python:<40} {depth:>5} {off:>11.0f} {on:>10.0f} {on - off:>8.0f} {(on - off) / frames:>9.1f}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(int(sys.argv[2]))
    else:
        main(sys.argv[1:])
