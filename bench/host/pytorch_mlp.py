#!/usr/bin/env python3
"""The seed MLP (Flatten, 784-512 ReLU, 512-512 ReLU, 512-10, softmax cross-entropy,
Adam lr 1e-3) trained in PyTorch on the CPU: the reference bench_step's ratio is
taken against. Same protocol as bench_step: a warm-up, then the mean time of
`--steps` full training steps (forward, backward, optimizer) on one fixed batch.

Prints one line per batch size: `pytorch batch <B> threads <T> <ms> ms/step <samples/s>`.
"""
import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="64,256,1024")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for batch in (int(b) for b in args.batches.split(",")):
        model = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(784, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss()
        x = torch.randn(batch, 1, 28, 28)
        y = torch.randint(0, 10, (batch,))

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        for _ in range(args.warmup):
            step()
        steps = max(args.steps, int(args.steps * 256 / batch))  # small batches: more steps
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        loss.item()
        ms = (time.perf_counter() - t0) / steps * 1e3
        print(f"pytorch batch {batch} threads {args.threads} {ms:.4f} ms/step {batch / ms * 1e3:.0f} samples/s",
              flush=True)


if __name__ == "__main__":
    main()
