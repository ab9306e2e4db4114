"""Allocations at known lines through every kind of Python frame.

Each scenario allocates one bytearray of a size no other allocation has and,
on the same line, records the stack CPython itself reports for that line.
The expected stacks go to the JSON file named by the first argument; the
buffers stay alive and the process ends with os._exit so that the tracer's
final snapshot still holds them.

Usage: frames.py EXPECTED.json
"""

import asyncio
import gc
import json
import os
import sys
import threading
import traceback

KEEP = []
EXPECTED = {}


def here():
    """The caller's stack, innermost first: (file, qualified name, line)."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append([frame.f_code.co_filename, frame.f_code.co_qualname, frame.f_lineno])
        frame = frame.f_back
    # traceback's view of the same stack (outermost first, this frame last) must agree.
    summary = traceback.extract_stack(sys._getframe(1))
    assert [(s.filename, s.lineno) for s in reversed(summary)] == [(f, l) for f, _, l in frames], (summary, frames)
    return frames


def allocate(name, size, stack):
    EXPECTED[name] = {"size": size, "stack": stack}


# Each allocation line below reads: allocate(name, size, here()) then the
# bytearray on the same line, so both see the same instruction's line.

def inner(size):
    KEEP.append(bytearray(size)); allocate("nested", size, here())


def middle(size):
    inner(size)


def outer(size):
    middle(size)


class Holder:
    def make(self, size):
        self.buffer = bytearray(size); allocate("method", size, here())
        KEEP.append(self.buffer)


def generator(size):
    yield 1
    KEEP.append(bytearray(size)); allocate("generator", size, here())
    yield 2


def consume(size):
    for _ in generator(size):
        pass


async def coroutine_leaf(size):
    await asyncio.sleep(0)
    KEEP.append(bytearray(size)); allocate("coroutine", size, here())


async def coroutine_main(size):
    await coroutine_leaf(size)


def manual_coroutine(size):
    async def leaf():
        KEEP.append(bytearray(size)); allocate("coroutine_send", size, here())
    try:
        leaf().send(None)
    except StopIteration:
        pass


def recurse(depth, size):
    if depth == 0:
        KEEP.append(bytearray(size)); allocate("recursion", size, here())
        return
    recurse(depth - 1, size)


EXEC_SOURCE = """
def exec_function(size):
    KEEP.append(bytearray(size)); allocate("exec", size, here())
exec_function(SIZE)
"""


def run_exec(size):
    code = compile(EXEC_SOURCE, "<exec-source>", "exec")
    exec(code, {"KEEP": KEEP, "allocate": allocate, "here": here, "SIZE": size})


def thread_body(size):
    KEEP.append(bytearray(size)); allocate("thread", size, here())


def run_thread(size):
    thread = threading.Thread(target=thread_body, args=(size,))
    thread.start()
    thread.join()


REUSE_FILE = "<reuse>"


def run_reused(count):
    """Code objects made and freed one after another, so that a new one can
    take a freed one's address (and its line table a freed table's): each
    must still get its own lines. Same file object, same qualified name, same
    first line; only the body, and so the allocating line, differs."""
    for i in range(count):
        body = "    x = 1\n" * i
        source = f"def f(size):\n{body}    KEEP.append(bytearray(size)); allocate(NAME, size, here())\n"
        scope = {"KEEP": KEEP, "allocate": allocate, "here": here, "NAME": f"reuse{i}"}
        exec(compile(source, REUSE_FILE, "exec"), scope)
        scope["f"](150_000 + 1000 * i)
        del scope
        gc.collect()  # the function and its globals form a cycle


MOVED_FILE = "<moved>"
MOVED_SCOPES = []


def run_moved(count):
    """Module code made and freed one after another whose only difference
    is the lines it is on: same file object, name, first line and bytecode,
    a line table of the same size. Its frame, the caller of the function it
    defines, must get its own lines."""
    for i in range(count):
        source = "\n" * i + "def g(size):\n    KEEP.append(bytearray(size)); allocate(NAME, size, here())\ng(SIZE)\n"
        scope = {"KEEP": KEEP, "allocate": allocate, "here": here, "NAME": f"moved{i}", "SIZE": 190_000 + 1000 * i}
        exec(compile(source, MOVED_FILE, "exec"), scope)
        MOVED_SCOPES.append(scope)


def main():
    outer(123_457)
    Holder().make(124_457)
    consume(125_457)
    asyncio.run(coroutine_main(126_457))
    manual_coroutine(127_457)
    recurse(5, 128_457)
    run_exec(129_457)
    run_thread(130_457)
    run_reused(30)
    run_moved(8)
    KEEP.append(bytearray(131_457)); allocate("main", 131_457, here())


main()
with open(sys.argv[1], "w") as out:
    json.dump(EXPECTED, out)
sys.stdout.flush()
os._exit(0)
