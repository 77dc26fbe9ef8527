#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention, flash backend, on bench_attention.cu's shapes (bf16,
causal, 16 heads, head size 64, 16384 tokens per call, Seq 1k-16k), forward and forward +
backward, timed with CUDA events (median of 5 repeats of N calls after a warm-up); then the
ratio table against strata's JSON when given.

  python3 bench/gpu/pytorch_attention.py [--strata FILE.json] [--out FILE.md] [--iters N]
"""
import argparse
import json
import os
import statistics
import sys

TOKENS, HEADS, DH = 16384, 16, 64


def timed(torch, fn, iters):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / iters)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata")
    ap.add_argument("--out")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    args = ap.parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print("no torch: skipping")
        return 77
    if not torch.cuda.is_available():
        print("no CUDA device: skipping")
        return 77
    F = torch.nn.functional
    rows = []
    for seq in map(int, args.seqs.split(",")):
        batch = TOKENS // seq
        g = torch.Generator(device="cuda").manual_seed(seq)
        shape = (batch, HEADS, seq, DH)
        q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwdbwd():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                torch.autograd.grad(o, (q, k, v), do)

            f_ms = timed(torch, fwd, args.iters)
            fb_ms = timed(torch, fwdbwd, args.iters)
        flop = 4.0 * batch * HEADS * seq * seq * DH / 2
        rows.append({"impl": "torch", "seq": seq, "batch": batch, "fwd_ms": f_ms, "fwdbwd_ms": fb_ms,
                     "fwd_tflops": flop / (f_ms * 1e9), "fwdbwd_tflops": 3.5 * flop / (fb_ms * 1e9)})
        del q, k, v, do
        torch.cuda.empty_cache()
    mine = {}
    if args.strata and os.path.exists(args.strata):
        mine = {r["seq"]: r for r in json.load(open(args.strata))}
    lines = [f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}: SDPA flash backend, bf16, causal, "
             f"{HEADS} heads, head size {DH}, {TOKENS} tokens per call; ratio = PyTorch time / strata time "
             "(goal >= 0.9).", "",
             "| Seq | batch | torch fwd ms | TF/s | strata fwd ms | TF/s | fwd ratio "
             "| torch f+b ms | TF/s | strata f+b ms | TF/s | f+b ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        s = mine.get(r["seq"])
        if s:
            lines.append(f"| {r['seq']} | {r['batch']} | {r['fwd_ms']:.3f} | {r['fwd_tflops']:.0f} | "
                         f"{s['fwd_ms']:.3f} | {s['fwd_tflops']:.1f} | {r['fwd_ms'] / s['fwd_ms']:.3f} | "
                         f"{r['fwdbwd_ms']:.3f} | {r['fwdbwd_tflops']:.0f} | {s['fwdbwd_ms']:.3f} | "
                         f"{s['fwdbwd_tflops']:.1f} | {r['fwdbwd_ms'] / s['fwdbwd_ms']:.3f} |")
        else:
            lines.append(f"| {r['seq']} | {r['batch']} | {r['fwd_ms']:.3f} | {r['fwd_tflops']:.0f} | - | - | - | "
                         f"{r['fwdbwd_ms']:.3f} | {r['fwdbwd_tflops']:.0f} | - | - | - |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
