"""Epoch marks for the leak tracer, from Python.

The tracer (libtracer.so, preloaded with LD_PRELOAD) exports
``void tracer_mark(const char *label)``; each call closes the current epoch.
``mark(label)`` calls it when the tracer is loaded in this process and does
nothing otherwise, so a script runs the same with and without the tracer.

    from tracer_mark import mark
    for epoch in range(1, epochs + 1):
        train_one_epoch()
        mark(f"epoch {epoch}")
"""

import ctypes

_UNSET = object()
_mark_fn = _UNSET


def _lookup():
    global _mark_fn
    if _mark_fn is _UNSET:
        _mark_fn = None
        try:
            process = ctypes.CDLL(None)
            fn = process.tracer_mark
        except (OSError, AttributeError):
            fn = None
        if fn is not None:
            fn.argtypes = [ctypes.c_char_p]
            fn.restype = None
            _mark_fn = fn
    return _mark_fn


def loaded() -> bool:
    """Whether the tracer is loaded in this process."""
    return _lookup() is not None


def mark(label: str) -> None:
    """Close the tracer's current epoch under ``label``; a no-op without the tracer."""
    fn = _lookup()
    if fn is not None:
        fn(label.replace("\0", " ").encode("utf-8", "replace"))
