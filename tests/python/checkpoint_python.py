"""Reads a strata checkpoint with Python's safetensors package (numpy), as a PyTorch user
would: index.json lists the model (each tensor's name and shape), maps every piece to its
file (weight_map; the optimizer state in optimizer_map) and gives each piece's box of its
tensor in plain fields ("pieces": {piece: {"tensor", "start", "stop"}}); each tensor is
assembled by slicing, and must equal, bit for bit, the gathered model strata wrote as one
reference file. Every parameter has its AdamW state (exp_avg, exp_avg_sq) in the same boxes."""
import json
import os
import sys

import numpy as np
from safetensors import safe_open

d = sys.argv[1]
ckpt = os.path.join(d, "ckpt")
with open(os.path.join(ckpt, "index.json")) as f:
    index = json.load(f)
meta, files, where = index["metadata"], index["files"], index["weight_map"]
states, pieces, model = index["optimizer_map"], index["pieces"], index["model"]
assert meta["format"] == "strata-checkpoint-2", meta["format"]
assert not any(k.startswith("optimizer.") for k in where), "optimizer state in the weight_map"
assert meta["step"] == "2" and meta["optimizer"] == "AdamW" and meta["user"] == {"data.position": "2"}, meta
for name, size in files.items():
    assert os.path.getsize(os.path.join(ckpt, name)) == size, name

opened = {}


def tensor(piece, files_of=where):
    fname = files_of[piece]
    if fname not in opened:
        opened[fname] = safe_open(os.path.join(ckpt, fname), framework="numpy")
    return opened[fname].get_tensor(piece)


def assemble(name, shape, state=None):
    """The whole tensor from the boxes of its pieces (with `state`: that optimizer state)."""
    out = np.full(shape, np.nan)
    mine = [p for p, box in pieces.items() if box["tensor"] == name]
    assert mine, f"{name}: no pieces"
    for p in mine:
        box = tuple(slice(a, b) for a, b in zip(pieces[p]["start"], pieces[p]["stop"]))
        assert np.all(np.isnan(out[box])), f"{name}: pieces overlap at {p}"
        out[box] = tensor(p) if state is None else tensor(f"optimizer.{state}.{p}", states)
    assert not np.any(np.isnan(out)), f"{name}: the pieces leave a gap"
    return out, len(mine)


checked = sharded = 0
with safe_open(os.path.join(d, "model.safetensors"), framework="numpy") as ref:
    names = list(ref.keys())
    assert sorted(t["tensor"] for t in model) == sorted(names), (model, names)
    for entry in model:
        name = entry["tensor"]
        want = ref.get_tensor(name)
        assert list(want.shape) == entry["shape"], (name, want.shape, entry["shape"])
        got, n = assemble(name, want.shape)
        assert got.dtype == np.float64 and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), f"{name}: values differ"
        for state in ("exp_avg", "exp_avg_sq"):
            s, _ = assemble(name, want.shape, state)
            assert np.all(np.isfinite(s)), (state, name)
        checked += 1
        sharded += n > 1
print(f"checkpoint_python: {checked} tensors ({sharded} in boxes over {len(files)} rank files) read by "
      f"safetensors equal strata's gathered model bit for bit; AdamW state present for each")
