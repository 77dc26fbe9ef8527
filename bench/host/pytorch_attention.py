# PyTorch's CPU scaled_dot_product_attention (causal), forward + backward, float32, at
# the shapes of bench_attention.cpp: one sequence, 8 heads of 64, Seq 512 to 8192.
# Best of `reps` passes (4x at Seq <= 1024) after one warm-up, as there. `--threads T` sets torch's threads.
import argparse
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--reps", type=int, default=3)
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
heads, dh = 8, 64
for seq in (512, 1024, 2048, 4096, 8192):
    q, k, v = (torch.randn(1, heads, seq, dh, requires_grad=True) for _ in range(3))
    go = torch.randn(1, heads, seq, dh)
    best_fwd, best_all = 1e30, 1e30
    passes = 4 * a.reps if seq <= 1024 else a.reps  # as bench_attention.cpp
    for r in range(passes + 1):
        t0 = time.perf_counter()
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t1 = time.perf_counter()
        o.backward(go)
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        if r == 0:
            continue
        best_fwd = min(best_fwd, (t1 - t0) * 1e3)
        best_all = min(best_all, (t2 - t0) * 1e3)
    flops = 3.5 * 4.0 * seq * seq * dh * heads / 2.0
    print(f"pytorch seq {seq} threads {a.threads} forward {best_fwd:.2f} ms forward+backward {best_all:.2f} ms "
          f"{flops / best_all * 1e-6:.1f} GFLOP/s", flush=True)
