#!/usr/bin/env python3
"""torchvision's resnet50 trained on the CPU, the reference bench_resnet's ratio is taken
against: float32, SGD with momentum 0.9 and weight decay 1e-4, cross-entropy over 1000
classes, one fixed batch of random images. Same protocol as bench_resnet: `--warmup`
steps, then the median of `--steps` timed full training steps (zero_grad, forward,
backward, optimizer step).

`--format nchw` is PyTorch's default layout; `--format nhwc` converts the model and the
input to torch.channels_last (strata's layout: oneDNN's NHWC convolutions).

Prints `pytorch-<format> resnet50 batch <B> image <S> threads <T> <ms> ms/step <images/s> images/s`.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--format", choices=["nchw", "nhwc"], default="nchw")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet50()
    model.train()
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 1000, (args.batch,))
    if args.format == "nhwc":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    print(f"pytorch-{args.format} resnet50 batch {args.batch} image {args.size} threads {args.threads} {ms:.1f} ms/step "
          f"{args.batch / ms * 1e3:.2f} images/s (min {min(times):.1f}, loss {loss:.3f})", flush=True)


if __name__ == "__main__":
    main()
