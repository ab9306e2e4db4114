"""A PyTorch job whose memory grows inside a library, for a reason of the library's own.

--cause profiler: a CPU profiler is started before the loop and stopped
only after it; while it runs it keeps a record of every operator.
--cause onednn-shapes: every epoch runs a convolution on inputs of sizes
not seen before; oneDNN compiles a kernel for each new shape and keeps it
in its primitive cache (up to ONEDNN_PRIMITIVE_CACHE_CAPACITY entries).
--cause figures: every epoch plots its losses with pyplot and saves the
figure (an 8x6 inch PNG at 100 dpi: a 1.8 MiB pixel buffer), never closing
it; pyplot keeps every figure it opened. --close-figures closes each one
once it is saved and collects it: a figure and its artists refer to each
other, so a closed one waits for the cycle collector, and one that has
reached the oldest generation waits for a full collection, which in a
process holding torch's many long-lived objects may be far off.
--leak-too also keeps a 1 MiB tensor every epoch, a leak of the
program's own beside the library's growth.
Each epoch ends with tracer_mark.

Usage: library_growth.py --cause {profiler,onednn-shapes,figures} [--close-figures]
                         [--leak-too] [--epochs N] [--steps N]
"""

import argparse
import io
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from tracer_mark import mark  # noqa: E402


def train_steps(model, optimizer, steps):
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def plot_losses(losses, close):
    import gc

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(8, 6), dpi=100)
    plt.plot(losses)
    fig.savefig(io.BytesIO(), format="png")
    if close:
        plt.close(fig)
        del fig
        gc.collect()


KEPT = []


def keep_batch():
    KEPT.append(torch.randn(256, 1024))


def new_shapes(conv, epoch, shapes=12):
    with torch.no_grad():
        for n in range(epoch * shapes, (epoch + 1) * shapes):
            conv(torch.randn(1, 3, 80 + n, 80 + n))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cause", choices=["profiler", "onednn-shapes", "figures"], required=True)
    parser.add_argument("--close-figures", action="store_true")
    parser.add_argument("--leak-too", action="store_true")
    parser.add_argument("--epochs", type=int, default=7)
    parser.add_argument("--steps", type=int, default=150, help="training steps per epoch")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    conv = torch.nn.Conv2d(3, 8, 3)
    profiler = None
    if args.cause == "profiler":
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        profiler.start()
    for epoch in range(1, args.epochs + 1):
        losses = train_steps(model, optimizer, args.steps)
        if args.cause == "onednn-shapes":
            new_shapes(conv, epoch)
        if args.cause == "figures":
            plot_losses(losses, args.close_figures)
        if args.leak_too:
            keep_batch()
        mark(f"epoch {epoch}")
        print(f"epoch {epoch}", flush=True)
    if profiler is not None:
        profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
