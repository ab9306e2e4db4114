"""A PyTorch training job with a planted leak that never marks its epochs.

Every epoch makes one pass over a training DataLoader and one over an
evaluation DataLoader; every training step keeps a 64 KiB buffer for good
(`keep_step_buffer`). With --mark the job marks the end of each epoch with
tracer_mark (scripts/tracer_mark.py) instead of leaving the epochs to the
tracer. With --persistent the loaders keep their workers from pass to pass
(each later pass then resets its iterator instead of making one). With
--worker-leak every sample the Dataset hands out keeps a 16 KiB buffer in
the process that made it (`keep_sample_buffer`): with persistent workers, a
leak that grows in the workers, epoch after epoch. With --read-parent-objects
the training Dataset holds two million Python ints, made before the workers
are forked, and every sample reads a run of them that no earlier sample of
its worker read: reading a Python object writes its reference count, so
each worker copies pages it shared with its parent, about 8 MiB an epoch,
while no heap grows (pytorch/pytorch#13246). With --keep-batches the
training samples are 64 KiB each and the training loop keeps every batch:
batches made by workers reach the main process in shared memory, which it
maps and keeps as long as it keeps the batch (pytorch/pytorch#11201).
With --first-pass-wait S each worker of the first training pass waits S
seconds before its first sample: at more than a time slice (10 s), one of
the start-up slices the parent cuts until its training loader repeats ends
while those workers live. With --new-loaders the job builds a new training
loader every epoch, as some loops do: the new one is made while the one
before is alive, so that their addresses take turns. With --enumerate the
loops go over enumerate(loader), whose call CPython 3.11 specializes after
the first passes. With --eval-every N the training loop also evaluates every
N steps, from inside its loop (as trainers with an evaluation interval do).
With --fine-tune N the job then fine-tunes the model for N passes over
another loader, each step sleeping --tune-step-wait seconds; with
--tuning-leaks its steps keep a 64 KiB buffer for good (`keep_tuning_buffer`)
and the training steps none. With --start-method spawn the loaders' workers
are started with multiprocessing's `spawn` method (fresh interpreters), with
--start-method forkserver by its `forkserver` method (forked by a server
process the job starts, a fresh interpreter itself), not forked from the job.

Usage: loader_epochs.py [--epochs N] [--steps N] [--workers N] [--persistent]
                        [--worker-leak] [--read-parent-objects] [--keep-batches] [--mark]
                        [--no-shuffle] [--first-pass-wait S] [--new-loaders] [--enumerate]
                        [--eval-every N] [--fine-tune N] [--tune-step-wait S] [--tuning-leaks]
                        [--start-method fork|spawn|forkserver]
"""

import argparse
import pathlib
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from tracer_mark import mark  # noqa: E402

BATCH = 8
ENUMERATE = False
TUNING_LEAKS = False
FEATURES = 16
KEPT = []
SAMPLES_KEPT = []
BATCHES_KEPT = []


def keep_sample_buffer():
    SAMPLES_KEPT.append(bytearray(16 * 1024))


PARENT_OBJECTS = 2_000_000
# Ints read per sample: with 32 samples per worker and epoch (the defaults,
# two workers), 8 MiB of 32-byte objects.
OBJECTS_PER_SAMPLE = 8192


class Numbers(Dataset):
    def __init__(self, length, leak=False, parent_objects=None, width=FEATURES, wait=0.0):
        self.length, self.leak, self.parent_objects, self.width = length, leak, parent_objects, width
        self.cursor = 0
        self.wait = wait

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if self.wait:
            # In the worker's own copy of the Dataset: once per worker.
            time.sleep(self.wait)
            self.wait = 0.0
        if self.leak:
            keep_sample_buffer()
        if self.parent_objects is not None:
            start = self.cursor % (len(self.parent_objects) - OBJECTS_PER_SAMPLE)
            self.cursor += OBJECTS_PER_SAMPLE
            i += sum(self.parent_objects[start:start + OBJECTS_PER_SAMPLE]) % 2
        return torch.full((self.width,), float(i) / self.length)


def keep_step_buffer():
    if not TUNING_LEAKS:
        KEPT.append(bytearray(64 * 1024))


def keep_tuning_buffer():
    KEPT.append(bytearray(65536))


def fine_tune(loader, model, optimizer, wait):
    for batch in loader:
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if TUNING_LEAKS:
            keep_tuning_buffer()
        time.sleep(wait)


def passes(loader):
    """The batches of a pass over `loader`, through enumerate with --enumerate."""
    return (batch for _, batch in enumerate(loader)) if ENUMERATE else loader


def train(loader, model, optimizer, keep_batches, eval_loader, eval_every):
    step = 0
    for batch in passes(loader):
        step += 1
        loss = model(batch[:, :FEATURES]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        keep_step_buffer()
        if keep_batches:
            BATCHES_KEPT.append(batch)
        if eval_every and step % eval_every == 0:
            evaluate(eval_loader, model)


def evaluate(loader, model):
    with torch.no_grad():
        return sum(model(batch).sum().item() for batch in passes(loader))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8, help="training batches per epoch")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--persistent", action="store_true", help="persistent_workers=True (needs --workers)")
    parser.add_argument("--worker-leak", action="store_true", help="the training Dataset keeps a buffer per sample")
    parser.add_argument("--read-parent-objects", action="store_true",
                        help="the training Dataset reads Python objects made before the fork")
    parser.add_argument("--keep-batches", action="store_true", help="64 KiB samples; the training loop keeps every batch")
    parser.add_argument("--mark", action="store_true", help="mark each epoch's end with tracer_mark")
    parser.add_argument("--no-shuffle", action="store_true", help="the training loader keeps its samples' order")
    parser.add_argument("--first-pass-wait", type=float, default=0.0,
                        help="seconds each worker of the first training pass waits before its first sample")
    parser.add_argument("--new-loaders", action="store_true", help="a new training loader every epoch")
    parser.add_argument("--enumerate", action="store_true", help="loops over enumerate(loader)")
    parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N training steps too")
    parser.add_argument("--fine-tune", type=int, default=0, help="passes of fine-tuning after the training")
    parser.add_argument("--tune-step-wait", type=float, default=0.05, help="seconds each fine-tuning step waits")
    parser.add_argument("--tuning-leaks", action="store_true", help="the fine-tuning leaks, not the training")
    parser.add_argument("--start-method", choices=["fork", "spawn", "forkserver"], default="fork",
                        help="how multiprocessing starts the loaders' workers (needs --workers)")
    args = parser.parse_args()
    global ENUMERATE, TUNING_LEAKS
    ENUMERATE = args.enumerate
    TUNING_LEAKS = args.tuning_leaks

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    workers = {"num_workers": args.workers, "persistent_workers": args.persistent}
    if args.start_method != "fork":
        workers["multiprocessing_context"] = args.start_method
    parent_objects = list(range(1000, 1000 + PARENT_OBJECTS)) if args.read_parent_objects else None
    width = 16384 if args.keep_batches else FEATURES
    train_data = Numbers(args.steps * BATCH, leak=args.worker_leak, parent_objects=parent_objects, width=width,
                         wait=args.first_pass_wait)
    train_loader = DataLoader(train_data, batch_size=BATCH, shuffle=not args.no_shuffle, **workers)
    eval_loader = DataLoader(Numbers(4 * BATCH), batch_size=BATCH, **workers)
    for epoch in range(1, args.epochs + 1):
        if args.new_loaders:
            train_loader = DataLoader(train_data, batch_size=BATCH, shuffle=not args.no_shuffle, **workers)
        train(train_loader, model, optimizer, args.keep_batches, eval_loader, args.eval_every)
        # The workers of later passes are forked from a Dataset that waits no more.
        train_data.wait = 0.0
        total = evaluate(eval_loader, model)
        if args.mark:
            mark(f"epoch {epoch}")
        print(f"epoch {epoch}: eval {total:.3f}, kept {len(KEPT)}", flush=True)
    tuning_loader = DataLoader(Numbers(args.steps * BATCH), batch_size=BATCH, shuffle=True)
    for tuning in range(1, args.fine_tune + 1):
        fine_tune(tuning_loader, model, optimizer, args.tune_step_wait)
        print(f"fine-tuning {tuning}: kept {len(KEPT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
