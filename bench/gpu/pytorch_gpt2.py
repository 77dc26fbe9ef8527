#!/usr/bin/env python3
"""GPT-2 small training in plain PyTorch: the PyTorch reference of issue 30, item 1.

The configuration llm.c (bench/gpu/llmc.sh), PyTorch (this script) and strata share:
GPT-2 small, 12 pre-LayerNorm blocks, D 768, 12 heads, context T 1024, vocabulary 50304
(50257 padded to a multiple of 128, as llm.c does), learned position embedding, causal
attention through F.scaled_dot_product_attention(is_causal=True), tanh-GeLU MLP of 4*D,
final LayerNorm, lm head tied to the token embedding, cross-entropy; no dropout; bf16
autocast with FP32 parameters (the master weights); torch.optim.AdamW(lr 6e-4, betas
0.9/0.95, eps 1e-8, weight decay 0.1 on the matrices and embeddings, fused=True);
global-norm clipping at 1.0 like llm.c (--no-clip drops it); B sequences per step
(--batch, default 16: 16384 tokens), random initialisation (nanoGPT's: N(0, 0.02),
residual projections N(0, 0.02/sqrt(2L)), biases 0), random uniform tokens < 50257 already
on the device.

    python3 bench/gpu/pytorch_gpt2.py [--batch 16] [--steps 30] [--variants eager,compile]
        [--json FILE] [--warmup 3] [--no-clip] [--peak-tflops X] [--device cuda|cpu] [--tiny]

First it measures the device's bf16 dense GEMM rate (the MFU's peak): torch.matmul of two
random 8192 x 8192 bf16 matrices, median of 10 timed calls after 3 warm-ups
(--peak-tflops X uses X instead). Then, per variant (eager; compile = torch.compile of the
model, default mode, optimizer eager): build, warm up (--warmup steps; the first step's
time, which holds the compilation, is reported as compile s), then --steps timed steps,
each between two CUDA events with no synchronisation in between; ms/step is their median.
tokens/s = B*T / median step; MFU = tokens/s * (6N + 12*L*D*T) / peak, N = all parameters
(the tied wte counted once, wpe included: 124475904, the N llm.c uses). A variant that
fails is reported as failed in the table and the others still run (a per-variant alarm,
--variant-timeout, turns a hang into a failure). Markdown table on stdout; JSON to --json
(default $OUT/pytorch_gpt2.json when OUT is set), which llmc.sh reads for the peak.
--device cpu --tiny is a smoke test (2 layers, D 64, 4 heads, T 64, vocabulary 512, 3 steps).
Exit 0 unless every variant failed.
"""
import argparse
import json
import math
import os
import signal
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB_REAL = 50257  # tokens are drawn below GPT-2's real vocabulary, as llm.c's data


class Config:
    def __init__(self, n_layer=12, n_embd=768, n_head=12, seq=1024, vocab=50304, vocab_real=VOCAB_REAL):
        self.n_layer, self.n_embd, self.n_head, self.seq, self.vocab = n_layer, n_embd, n_head, seq, vocab
        self.vocab_real = min(vocab_real, vocab)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(c.vocab, c.n_embd)
        self.wpe = nn.Embedding(c.seq, c.n_embd)
        self.h = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layer))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias") and "ln_" not in name:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def n_params(model):
    return sum(p.numel() for p in model.parameters())  # parameters() yields the tied weight once


def flops_per_token(c, n):
    return 6 * n + 12 * c.n_layer * c.n_embd * c.seq


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def measure_peak(device, tiny):
    """bf16 dense GEMM rate in TFLOP/s: n^3 matmul, median of 10 after 3 warm-ups."""
    n = 256 if tiny else 8192
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    for _ in range(3):
        torch.matmul(a, b)
    sync(device)
    times = []
    for _ in range(10):
        if device == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.matmul(a, b)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
        else:
            t0 = time.perf_counter()
            torch.matmul(a, b)
            times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return {"peak_tflops": 2 * n ** 3 / t / 1e12, "peak_gemm_n": n, "peak_gemm_ms_median": t * 1e3,
            "peak_gemm_ms_min": min(times) * 1e3}


class VariantTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise VariantTimeout("variant timed out")


def run_variant(variant, c, args, peak):
    device = args.device
    torch.manual_seed(1234)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_build = time.perf_counter()
    with torch.device(device):
        model = GPT(c)
    n = n_params(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=(device == "cuda"))
    if variant == "eager":
        fwd = model
    elif variant == "compile":
        fwd = torch.compile(model)
    else:
        raise ValueError(f"unknown variant {variant!r} (eager, compile)")
    g = torch.Generator(device=device).manual_seed(42)
    nbuf = 4
    data = torch.randint(0, c.vocab_real, (nbuf, args.batch, c.seq + 1), device=device, generator=g)
    sync(device)
    build_s = time.perf_counter() - t_build

    def step(i):
        buf = data[i % nbuf]
        x, y = buf[:, :-1], buf[:, 1:]
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        if not args.no_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    # warm-up: the first step holds torch.compile's compilation (and cuBLAS/SDPA set-up)
    t0 = time.perf_counter()
    loss = step(0)
    sync(device)
    first_s = time.perf_counter() - t0
    warm_times = []
    for i in range(1, max(args.warmup, 1)):
        t0 = time.perf_counter()
        loss = step(i)
        sync(device)
        warm_times.append(time.perf_counter() - t0)
    loss0 = float(loss)

    # timed steps: an event before each step and after the last, one synchronisation at the end
    times = []
    t_wall = time.perf_counter()
    if device == "cuda":
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
        ev[0].record()
        for i in range(args.steps):
            loss = step(i)
            ev[i + 1].record()
        torch.cuda.synchronize()
        times = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(args.steps)]
    else:
        for i in range(args.steps):
            t0 = time.perf_counter()
            loss = step(i)
            times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - t_wall
    loss1 = float(loss)
    if not (math.isfinite(loss0) and math.isfinite(loss1)):
        raise FloatingPointError(f"loss not finite: {loss0} -> {loss1}")

    ms = statistics.median(times) * 1e3
    tokens = args.batch * c.seq
    tps = tokens / (ms / 1e3)
    fpt = flops_per_token(c, n)
    warm_med = statistics.median(warm_times) if warm_times else 0.0
    return {
        "variant": variant, "ok": True, "ms_per_step": ms, "ms_mean": statistics.fmean(times) * 1e3,
        "ms_min": min(times) * 1e3, "ms_max": max(times) * 1e3, "wall_ms_per_step": wall / args.steps * 1e3,
        "tokens_per_step": tokens, "tokens_per_s": tps,
        "mfu": tps * fpt / (peak * 1e12) if peak else None,
        "first_step_s": first_s,
        # compilation time: the first step less an ordinary (warm-up) step's time
        "compile_s": max(first_s - warm_med, 0.0) if variant == "compile" else None,
        "build_s": build_s, "steps_timed": args.steps, "loss_first": loss0, "loss_last": loss1,
        "n_params": n, "flops_per_token": fpt,
        "max_mem_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else None,
    }


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per variant (default 30)")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps, the first included (default 3)")
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--json", default=None, help="JSON output (default $OUT/pytorch_gpt2.json when OUT is set)")
    ap.add_argument("--no-clip", action="store_true", help="no global-norm clipping (llm.c always clips at 1.0)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="use this peak instead of measuring it")
    ap.add_argument("--variant-timeout", type=int, default=300, help="seconds per variant before it counts as failed")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="2 layers, D 64, T 64, vocabulary 512, 3 steps (smoke test)")
    args = ap.parse_args()
    if args.tiny:
        c = Config(n_layer=2, n_embd=64, n_head=4, seq=64, vocab=512)
        args.steps = min(args.steps, 3)
    else:
        c = Config()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipping (use --device cpu --tiny for a smoke test)")
        sys.exit(77)
    json_path = args.json or (os.path.join(os.environ["OUT"], "pytorch_gpt2.json") if os.environ.get("OUT") else None)

    dev_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    info = {"device": dev_name, "torch": torch.__version__, "cuda": torch.version.cuda, "command": " ".join(sys.argv),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": {"n_layer": c.n_layer, "n_embd": c.n_embd, "n_head": c.n_head, "seq": c.seq, "vocab": c.vocab,
                       "batch": args.batch, "tokens_per_step": args.batch * c.seq, "clip": not args.no_clip,
                       "precision": "bf16 autocast, fp32 params", "optimizer": "AdamW fused lr 6e-4 b 0.9/0.95 eps 1e-8 wd 0.1"},
            "mfu_formula": "tokens/s * (6N + 12*L*D*T) / peak, N = all parameters (tied wte once)"}
    if args.peak_tflops:
        info.update(peak_tflops=args.peak_tflops, peak_source="--peak-tflops")
    else:
        try:
            info.update(measure_peak(args.device, args.tiny), peak_source="measured")
        except Exception as e:  # noqa: BLE001
            info.update(peak_tflops=None, peak_error=f"{type(e).__name__}: {e}")
    peak = info.get("peak_tflops")
    print(f"device {dev_name}, torch {torch.__version__} (CUDA {torch.version.cuda}); "
          f"bf16 GEMM peak {fmt(peak, '.1f')} TFLOP/s" + (f" ({info.get('peak_gemm_n')}^3 matmul)" if 'peak_gemm_n' in info else ""),
          flush=True)

    results = []

    def save():
        if json_path:
            os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
            with open(json_path, "w") as f:
                json.dump({**info, "results": results}, f, indent=1)

    save()
    use_alarm = hasattr(signal, "SIGALRM") and args.variant_timeout > 0
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        t0 = time.perf_counter()
        if use_alarm:
            signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(args.variant_timeout)
        try:
            r = run_variant(variant, c, args, peak)
        except BaseException as e:  # noqa: BLE001 - fail soft: report and go on (Ctrl-C still stops)
            if isinstance(e, KeyboardInterrupt):
                raise
            traceback.print_exc()
            r = {"variant": variant, "ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}
        finally:
            if use_alarm:
                signal.alarm(0)
        r["variant_s"] = time.perf_counter() - t0
        results.append(r)
        if r["ok"]:
            print(f"{variant}: {r['ms_per_step']:.2f} ms/step, {r['tokens_per_s']:.0f} tokens/s, "
                  f"MFU {fmt(r['mfu'], '.3f')}, first step {r['first_step_s']:.1f} s, loss {r['loss_first']:.3f} -> "
                  f"{r['loss_last']:.3f}, N {r['n_params']}", flush=True)
        else:
            print(f"{variant}: FAILED {r['error']}", flush=True)
        save()
        # free the variant's model, optimizer and compiled code before the next one
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        try:
            torch._dynamo.reset()
        except Exception:  # noqa: BLE001
            pass

    n = next((r["n_params"] for r in results if r.get("ok")), None)
    print()
    print(f"GPT-2 small (L {c.n_layer}, D {c.n_embd}, H {c.n_head}, T {c.seq}, V {c.vocab}), B {args.batch} "
          f"({args.batch * c.seq} tokens/step), bf16 autocast + fp32 AdamW (fused), "
          f"{'clip 1.0' if not args.no_clip else 'no clip'}; {dev_name}; peak {fmt(peak, '.1f')} TFLOP/s "
          f"(bf16 {info.get('peak_gemm_n', '-')}^3 matmul); N {n}; MFU = tokens/s * (6N + 12LDT) / peak")
    print()
    print("| variant | ms/step | tokens/s | MFU | compile s |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        if r["ok"]:
            print(f"| {r['variant']} | {r['ms_per_step']:.2f} | {r['tokens_per_s']:.0f} | {fmt(r['mfu'], '.3f')} | "
                  f"{fmt(r['compile_s'], '.1f')} |")
        else:
            print(f"| {r['variant']} | failed: {r['error']} | | | |")
    if json_path:
        print(f"\nJSON: {json_path}")
    sys.exit(0 if any(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
