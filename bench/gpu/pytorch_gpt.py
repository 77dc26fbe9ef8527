#!/usr/bin/env python3
"""PyTorch baseline for the GPT main job (examples/gpt_job.hpp, the single-device plan).

Same model as strata's job, taken from bench/host/pytorch_gpt.py (byte vocabulary 256,
context 128, D 128, 4 heads, 4 pre-LayerNorm blocks, attention through
scaled_dot_product_attention with is_causal, tanh-GeLU MLP of 4*D, final LayerNorm, an untied
vocabulary Linear); one step = 4 micro-batches of 4 sequences accumulated (2048 tokens), global-norm clipping at
1.0, AdamW lr 2e-3 (weight decay 0.01 on matrices only). Batches come from pinned host memory
each step, and the loss is read back each step, as strata's trainer does.

    python3 bench/gpu/pytorch_gpt.py [--steps N] [--variants eager,compile] [--device cuda|cpu]

Prints ms/step and tokens/s per variant (median of repeats, after warm-up).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# the model is bench/host/pytorch_gpt.py's (the CPU baseline): one definition for both
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host"))
from pytorch_gpt import GPT, S as T, V  # noqa: E402

MICRO, NMICRO = 4, 4


def loss_of(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))


def run(variant, device, steps, repeats, warmup):
    torch.manual_seed(0)
    model = GPT().to(device)
    matrices = [p for n, p in model.named_parameters() if p.dim() >= 2 and "ln" not in n]
    others = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "ln" not in n)]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.01}, {"params": others, "weight_decay": 0.0}],
                            lr=2e-3, fused=device == "cuda")
    fn = torch.compile(loss_of) if variant == "compile" else loss_of
    pin = device == "cuda"
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, V, (NMICRO, MICRO, T), generator=g).pin_memory() if pin else
                torch.randint(0, V, (NMICRO, MICRO, T), generator=g)) for _ in range(4)]
    xs = torch.empty((NMICRO, MICRO, T), dtype=torch.long, device=device)

    def step(i):
        xs.copy_(batches[i % len(batches)], non_blocking=True)
        total = 0.0
        for m in range(NMICRO):
            x = xs[m]
            y = torch.roll(x, -1, dims=1)  # next byte (timing only: the data's meaning does not matter)
            loss = fn(model, x, y) / NMICRO
            loss.backward()
            total = total + loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(total)  # one sync per step, as strata reads its loss back

    t0 = time.perf_counter()
    first = step(0)
    first_s = time.perf_counter() - t0
    for i in range(1, warmup):
        step(i)
    times = []
    for r in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            last = step(i)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps)
    ms = statistics.median(times) * 1e3
    print("gpt %-8s %8.3f ms/step  %9.0f tokens/s  (min %.3f, max %.3f; first step %.1f s; loss %.3f -> %.3f)"
          % (variant, ms, NMICRO * MICRO * T / (ms / 1e3), min(times) * 1e3, max(times) * 1e3, first_s, first, last),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("pytorch_gpt: no CUDA device")
        raise SystemExit(77)
    print("pytorch_gpt: %s, torch %s" % (torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
                                          torch.__version__), flush=True)
    for v in a.variants.split(","):
        try:
            run(v, a.device, a.steps, a.repeats, a.warmup)
        except Exception as e:  # a compile failure should not hide the eager number
            print("gpt %-8s failed: %s" % (v, str(e).splitlines()[0] if str(e) else type(e).__name__), flush=True)


if __name__ == "__main__":
    main()
