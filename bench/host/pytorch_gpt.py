#!/usr/bin/env python3
"""The main job's GPT in PyTorch on the CPU, the reference bench_gpt's ratio is taken
against: token + learned position embeddings, 4 pre-LN blocks (causal self-attention
through torch's fused scaled_dot_product_attention, a tanh-GeLU MLP of 4D), final
LayerNorm, a linear head over 256 bytes, cross-entropy; AdamW lr 1e-3, weight decay 0.01.
Same protocol as bench_gpt: a warm-up, then the mean time of `--steps` full training
steps on one fixed batch.

Prints one line per batch: `pytorch sequences <B> threads <T> <ms> ms/step <tokens/s>`
(`--seq L` sets the context, default 128; bench_gpt runs the same at 2048).
"""
import argparse
import time

import torch
import torch.nn.functional as F

V, S, D, H, BLOCKS = 256, 128, 128, 4, 4


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.qkv, self.out = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.up, self.down = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)

    def forward(self, x):
        b = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(b, S, H, 3, D // H).permute(3, 0, 2, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, S, D))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(V, D)
        self.pos = torch.nn.Parameter(torch.zeros(S, D))
        self.blocks = torch.nn.Sequential(*[Block() for _ in range(BLOCKS)])
        self.ln, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, V)

    def forward(self, ids):
        return self.head(self.ln(self.blocks(self.tok(ids) + self.pos)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="8,16,32")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    global S
    S = args.seq

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for batch in (int(b) for b in args.batches.split(",")):
        model = GPT()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        x = torch.randint(0, V, (batch, S))
        y = torch.randint(0, V, (batch, S))

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
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
        print(f"pytorch sequences {batch} threads {args.threads} {ms:.3f} ms/step {batch * S / ms * 1e3:.0f} tokens/s"
              + (f" context {S}" if S != 128 else ""), flush=True)


if __name__ == "__main__":
    main()
