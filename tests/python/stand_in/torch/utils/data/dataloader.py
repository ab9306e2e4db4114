"""A stand-in for PyTorch's DataLoader module, for interpreters without a torch wheel.

The tracer knows a pass over a loader by the file that defines the class
(a path ending in torch/utils/data/dataloader.py) and the method's qualified
name (DataLoader.__iter__), so this module is enough to exercise it.
"""

# Importing torch's module allocates thousands of times while its body runs,
# which is when a sampling tracer finds the method among its constants.
_IMPORT_WORK = [bytearray(1024) for _ in range(512)]
del _IMPORT_WORK


class DataLoader:
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        # torch's starts a pass with a few allocations too (an iterator, a seed tensor).
        self._seed = bytearray(2048)
        return iter(list(self.items))
