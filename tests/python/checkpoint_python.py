"""Reads a strata checkpoint with Python's safetensors package (numpy), as a PyTorch user
would: index.json maps every piece to its file; each tensor is assembled from its
".shardKofN" blocks (cut along the axes where a block's shape differs from the whole)
and must equal, bit for bit, the gathered model strata wrote as one reference file.
Every parameter has its AdamW state (exp_avg, exp_avg_sq) beside it, in the same blocks."""
import json
import os
import re
import sys

import numpy as np
from safetensors import safe_open

d = sys.argv[1]
ckpt = os.path.join(d, "ckpt")
with open(os.path.join(ckpt, "index.json")) as f:
    index = json.load(f)
meta, files, where = index["metadata"], index["files"], index["weight_map"]
assert meta["format"] == "strata-checkpoint-1", meta["format"]
assert meta["step"] == "2" and meta["optimizer"] == "AdamW" and meta["user"] == {"data.position": "2"}, meta
for name, size in files.items():
    assert os.path.getsize(os.path.join(ckpt, name)) == size, name

opened = {}


def tensor(piece):
    fname = where[piece]
    if fname not in opened:
        opened[fname] = safe_open(os.path.join(ckpt, fname), framework="numpy")
    return opened[fname].get_tensor(piece)


def assemble(name, shape):
    if name in where:
        return tensor(name)
    blocks = sorted((int(m.group(1)), int(m.group(2)), k) for k in where
                    for m in [re.fullmatch(re.escape(name) + r"\.shard(\d+)of(\d+)", k)] if m)
    assert blocks, f"{name}: no pieces"
    n = blocks[0][1]
    assert [b[0] for b in blocks] == list(range(n)), f"{name}: blocks {blocks}"
    parts = [tensor(b[2]) for b in blocks]
    axes = [a for a in range(len(shape)) if parts[0].shape[a] != shape[a]]
    assert len(axes) == 1, f"{name}: cut on axes {axes}"
    return np.concatenate(parts, axis=axes[0])


checked = sharded = 0
with safe_open(os.path.join(d, "model.safetensors"), framework="numpy") as ref:
    names = list(ref.keys())
    assert meta["model"].count(";") + 1 == len(names), (meta["model"], names)
    for name in names:
        want = ref.get_tensor(name)
        got = assemble(name, want.shape)
        assert got.dtype == np.float64 and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), f"{name}: values differ"
        for state in ("exp_avg", "exp_avg_sq"):
            s = assemble(f"optimizer.{state}.{name}", want.shape)
            assert s.shape == want.shape and np.all(np.isfinite(s)), (state, name)
        checked += 1
        sharded += name not in where
print(f"checkpoint_python: {checked} tensors ({sharded} in blocks over {len(files)} rank files) read by "
      f"safetensors equal strata's gathered model bit for bit; AdamW state present for each")
