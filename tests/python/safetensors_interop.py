"""Cross-check of strata's safetensors files with the reference implementation.

usage: safetensors_interop.py <interop program> <work dir>

1. The C++ program writes a checkpoint; the reference (Rust, via the Python package)
   must accept it, and numpy must read every tensor bit for bit; BF16, which numpy lacks,
   is checked as raw bytes; the CRCs strata stores must equal Python's zlib.crc32.
2. numpy writes a file with safetensors.numpy.save_file; the C++ program must read it.
The values come from the same formulas as in safetensors_interop.cpp.
"""
import json
import struct
import subprocess
import sys
import zlib

import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import save_file

program, work = sys.argv[1], sys.argv[2]
NOTE = 'caf\u00e9 "q"\n'
BF16 = [0x3F80, 0xC020, 0x7F80, 0x0001, 0x8000]
failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("MISMATCH:", what)


def arrays():
    f64 = (np.arange(6, dtype=np.float64) + 1) / 7.0
    f64[4], f64[5] = np.inf, -0.0
    return {
        "f64": f64.reshape(2, 3),
        "f32": (np.arange(4, dtype=np.float32) + 1) / np.float32(7),
        "i32": ((np.arange(6, dtype=np.int32) - 3) * 1000003).reshape(3, 2),
        "i64": np.array(-1234567890123456789, dtype=np.int64),
        "u8": np.array([0, 1, 128, 255], dtype=np.uint8),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


# 1. strata writes, Python reads.
subprocess.run([program, "write", work], check=True)
path = work + "/strata.safetensors"
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
expect(n % 8 == 0, f"header length {n} is not a multiple of 8")
header = json.loads(raw[8 : 8 + n])  # Python's own JSON parser agrees with the header
data = raw[8 + n :]

tensors = dict(deserialize(raw))  # the reference's full validation; raw bytes of every dtype
bf = tensors["bf16"]
expect(bf["dtype"].upper() == "BF16" and list(bf["shape"]) == [5], f"bf16 info {bf['dtype']} {bf['shape']}")
expect(np.frombuffer(bytes(bf["data"]), dtype="<u2").tolist() == BF16, "bf16 values")

with safe_open(path, framework="numpy") as f:
    meta = f.metadata()
    expect(set(f.keys()) == set(arrays()) | {"bf16"}, f"tensor names {sorted(f.keys())}")
    for name, want in arrays().items():
        got = f.get_tensor(name)
        expect(got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}")
        expect(got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}")
        expect(got.tobytes() == want.tobytes(), f"{name}: values {got} expected {want}")

expect(meta.get("model") == "gpt", "metadata model")
expect(meta.get("note") == NOTE, f"metadata note {meta.get('note')!r}")
expect(meta.get("strata.format") == "strata-checkpoint-1", "metadata strata.format")
for name, info in header.items():
    if name == "__metadata__":
        continue
    begin, end = info["data_offsets"]
    expect(meta.get("crc32." + name) == "%08x" % zlib.crc32(data[begin:end]), f"crc32.{name}")
stored = meta.get("strata.header_crc32", "")
zeroed = raw[: 8 + n].replace(f'"strata.header_crc32":"{stored}"'.encode(), b'"strata.header_crc32":"00000000"')
expect(zeroed != raw[: 8 + n] and "%08x" % zlib.crc32(zeroed) == stored, "strata.header_crc32")

index = json.load(open(work + "/model.safetensors.index.json"))
expect(index["weight_map"] == {k: "strata.safetensors" for k in header if k != "__metadata__"}, "index weight_map")
expect(index["metadata"] == {"total_size": len(data), "format": "strata"}, f"index metadata {index['metadata']}")

# 2. Python writes, strata reads.
theirs = arrays()
theirs["f16"] = np.array([1.0, -2.0, 0.5], dtype=np.float16)
theirs["bool"] = np.array([True, False, True])
save_file(theirs, work + "/numpy.safetensors", metadata={"source": "numpy", "note": NOTE})
if subprocess.run([program, "check", work + "/numpy.safetensors"]).returncode != 0:
    failures.append("the C++ reader rejected or misread numpy.safetensors")

print("safetensors_interop:", "FAILED: " + "; ".join(failures) if failures else "OK")
sys.exit(1 if failures else 0)
