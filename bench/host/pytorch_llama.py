#!/usr/bin/env python3
"""A Llama-style decoder in PyTorch on the CPU, the reference bench_llama's ratio is taken
against: a token embedding tied to the output head, pre-RMSNorm blocks (eps 1e-5) of
grouped-query causal attention with rotary positions (base 10000, rotate-half) through
torch's fused scaled_dot_product_attention, and a bias-free SwiGLU MLP; final RMSNorm,
cross-entropy; AdamW lr 1e-3, weight decay 0.01. Same protocol as bench_llama: a warm-up,
then the mean time of `--steps` full training steps on one fixed batch.

Prints one line per batch: `pytorch <config> sequences <B> threads <T> <ms> ms/step <tokens/s>`.
"""
import argparse
import time

import torch
import torch.nn.functional as F

# name: vocab, context, D, heads, kv heads, SwiGLU hidden, blocks (bench_llama.cpp's configs)
CONFIGS = {"main": (2048, 128, 128, 4, 2, 352, 4), "wide": (4096, 512, 512, 8, 2, 1408, 2)}


def rope(x, base=10000.0):  # x [B, heads, S, dh]: rotate-half pairs (i, i + dh/2)
    s, dh = x.shape[-2], x.shape[-1]
    inv = base ** (-torch.arange(0, dh // 2, dtype=torch.float64) * 2 / dh)
    ang = torch.outer(torch.arange(s, dtype=torch.float64), inv).to(x.dtype)
    c, si = ang.cos(), ang.sin()
    a, b = x[..., : dh // 2], x[..., dh // 2:]
    return torch.cat([a * c - b * si, b * c + a * si], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, d, h, kv, hidden):
        super().__init__()
        self.h, self.kv, self.dh = h, kv, d // h
        self.n1, self.n2 = torch.nn.RMSNorm(d, eps=1e-5), torch.nn.RMSNorm(d, eps=1e-5)
        self.qkv = torch.nn.Linear(d, (h + 2 * kv) * self.dh, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)
        self.gate = torch.nn.Linear(d, hidden, bias=False)
        self.up = torch.nn.Linear(d, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.h * self.dh, self.kv * self.dh, self.kv * self.dh], dim=-1)
        q = rope(q.view(b, s, self.h, self.dh).transpose(1, 2))
        k = rope(k.view(b, s, self.kv, self.dh).transpose(1, 2))
        v = v.view(b, s, self.kv, self.dh).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(torch.nn.Module):
    def __init__(self, vocab, d, h, kv, hidden, blocks):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.Sequential(*[Block(d, h, kv, hidden) for _ in range(blocks)])
        self.norm = torch.nn.RMSNorm(d, eps=1e-5)

    def forward(self, ids):
        return self.norm(self.blocks(self.tok(ids))) @ self.tok.weight.t()  # the tied head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="main", choices=sorted(CONFIGS))
    ap.add_argument("--batches", default="8,16,32")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    vocab, seq, d, h, kv, hidden, blocks = CONFIGS[args.config]

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for batch in (int(b) for b in args.batches.split(",")):
        model = Llama(vocab, d, h, kv, hidden, blocks)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        x = torch.randint(0, vocab, (batch, seq))
        y = torch.randint(0, vocab, (batch, seq))

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
            loss.backward()
            opt.step()
            return loss

        for _ in range(args.warmup):
            step()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        loss.item()
        ms = (time.perf_counter() - t0) / args.steps * 1e3
        print(f"pytorch {args.config} sequences {batch} threads {args.threads} {ms:.3f} ms/step "
              f"{batch * seq / ms * 1e3:.0f} tokens/s", flush=True)


if __name__ == "__main__":
    main()
