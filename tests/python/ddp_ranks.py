"""A two-rank job as torchrun starts it (gloo, on the CPU), where rank 1
alone keeps a tensor of 64 KiB every step: 8 steps an epoch, 8 epochs
closed with scripts/tracer_mark.py.

Usage: torchrun --standalone --nproc_per_node=2 ddp_ranks.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from tracer_mark import mark  # noqa: E402


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for epoch in range(8):
        for _ in range(8):
            x = torch.randn(64, 256)
            loss = model(x).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == 1:
                kept.append(x.detach().clone())  # rank 1's leak
        mark(f"epoch {epoch}")
    dist.destroy_process_group()
    print(f"rank {rank}: {len(kept)} kept", flush=True)


if __name__ == "__main__":
    main()
    # torch 2.13's gloo process group sometimes aborts in its C++ teardown at
    # the interpreter's exit ("terminate called without an active
    # exception"), untraced as well: leave without running it.
    os._exit(0)
