"""A launcher that spawns one rank, as torch.multiprocessing.spawn does,
and waits for it without closing an epoch of its own.

The rank is a fresh interpreter started by multiprocessing's `spawn`
method. It trains over a DataLoader for 7 passes without marks, so its
epochs come from its own DataLoader passes, and every pass keeps 48
buffers of 32 KiB (`keep_step_buffers`). Its parent closing no epoch, it
keeps the epochs it cuts itself rather than following its parent's.

Usage: spawned_rank.py
"""

import multiprocessing

PASSES = 7


def keep_step_buffers(kept):
    for _ in range(48):
        kept.append(bytearray(32 * 1024))  # the rank's leak


def rank_main():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8)
    kept = []
    for _ in range(PASSES):
        for (batch,) in loader:
            batch.sum()
        keep_step_buffers(kept)
    print(f"rank: {len(kept)} buffers kept", flush=True)


if __name__ == "__main__":
    rank = multiprocessing.get_context("spawn").Process(target=rank_main)
    rank.start()
    rank.join()
    print(f"launcher: rank exited with {rank.exitcode}", flush=True)
