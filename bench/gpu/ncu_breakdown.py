#!/usr/bin/env python3
"""Per-category GPU time of one training step from an `ncu --csv` kernel list.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file ncu.csv \\
      build-gpu/bench/bench_gpu_gpt_small --batch 16 --eager --warmup 3 --steps 1
  python3 bench/gpu/ncu_breakdown.py ncu.csv[.gz] [--step-marker k_cast_ids]

A step starts at each launch whose name contains the marker (the trainer's first kernel of a
step, the ids' cast); the last step is reported. ncu times each kernel alone with its caches
flushed, so memory-bound kernels read slower than inside a replayed step: the shares, not the
sum, are what this is for.
"""
import argparse
import collections
import csv
import gzip

CATEGORIES = [  # (substring of the lower-cased kernel name, category), first match wins
    ("nvjet", "GEMM (cuBLASLt)"), ("cublas", "GEMM (cuBLASLt)"), ("flash", "flash attention"),
    ("heads", "head permutations"), ("colsum", "bias gradients (column sums)"),
    ("layernorm", "LayerNorm forward + backward"), ("update_multi", "AdamW (multi-tensor)"),
    ("axpy", "tied-table gradient sum"), ("xent", "softmax cross-entropy"), ("loss", "softmax cross-entropy"),
    ("bias_act", "GeLU forward / backward"), ("activation", "GeLU forward / backward"), ("k_add", "residual adds"),
    ("embedding", "embeddings"), ("position", "embeddings"), ("radix", "embeddings"), ("cast_ids", "embeddings"),
]


def category(name):
    low = name.lower()
    for key, cat in CATEGORIES:
        if key in low:
            return cat
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step-marker", default="k_cast_ids")
    a = ap.parse_args()
    opener = gzip.open if a.csv.endswith(".gz") else open
    with opener(a.csv, "rt") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    head, rows = rows[0], rows[1:]
    ki, vi = head.index("Kernel Name"), head.index("Metric Value")
    kernels = [(r[ki], float(r[vi].replace(",", "")) / 1e6) for r in rows]  # ns -> ms
    starts = [i for i, (n, _) in enumerate(kernels) if a.step_marker in n]
    if not starts:
        raise SystemExit("no launch named like '%s'" % a.step_marker)
    step = kernels[starts[-1]:]
    ms, count = collections.defaultdict(float), collections.Counter()
    for n, t in step:
        ms[category(n)] += t
        count[category(n)] += 1
    total = sum(ms.values())
    print("%d kernels, %.2f ms (each timed alone by ncu)\n" % (len(step), total))
    print("| kernels | launches | ms | share |\n|---|---:|---:|---:|")
    for cat, t in sorted(ms.items(), key=lambda x: -x[1]):
        print("| %s | %d | %.2f | %.1f%% |" % (cat, count[cat], t, 100 * t / total))


if __name__ == "__main__":
    main()
