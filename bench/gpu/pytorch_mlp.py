#!/usr/bin/env python3
"""PyTorch baselines for bench/gpu/bench_step.cu (issue 4): the same two models, batch
sizes, data and optimizer on the same GPU.

  launch: Flatten, Linear(784,512), ReLU, Linear(512,512), ReLU, Linear(512,10),
          cross-entropy, batch 64 (launch-bound)
  gemm:   4 x [Linear(4096,4096), ReLU], Linear(4096,10), cross-entropy, batch 8192
          (GEMM-bound)

SGD(lr=0.01, momentum=0.9) as in bench_step. Variants:
  eager                    plain PyTorch
  cudagraph                the whole step (forward, backward, optimizer.step) captured with
                           torch.cuda.graph on static input tensors after a warm-up on a side
                           stream, as in PyTorch's CUDA-graph docs ("whole network capture")
  compile                  torch.compile(mode="default") of model + loss (forward and
                           backward); the optimizer step runs eagerly (foreach SGD)
  compile-max-autotune     torch.compile(mode="max-autotune-no-cudagraphs")
  compile-reduce-overhead  torch.compile(mode="reduce-overhead"): inductor with its own
                           CUDA graphs (an extra, for the "best PyTorch variant")
Precisions: fp32 (TF32 off), tf32 (TF32 on), and for the gemm model bf16 (autocast, TF32 on).

Two timing protocols per configuration, torch.cuda.Event around N steps, median of R repeats:
  host   = what a strata step does: copy the batch from pinned host memory into static
           device tensors, run the step, read the loss back (loss.item(): one sync per step)
  device = PyTorch's best case: batches already on the GPU, no per-step synchronisation
Batches rotate over K pre-generated ones made with bench_step's formula (same values).

Each configuration runs in its own Python process (timeout per configuration) so that a
torch.compile failure or hang, or a broken CUDA context, is reported ("failed: reason")
and the others still run. Needs only torch (and the standard library).

  python3 bench/gpu/pytorch_mlp.py [--models launch,gemm] [--variants ...]
      [--precisions fp32,tf32,bf16] [--steps N] [--wide-steps N] [--repeats R]
      [--warmup W] [--batches K] [--timeout S] [--quick] [--no-isolate] [--merge]
      [--out FILE.md] [--json FILE.json]

Markdown to --out (else $OUT/pytorch_mlp.md when OUT is set, else stdout), JSON next to it;
both are rewritten after every configuration. --merge keeps the results already in the JSON
for configurations this run does not repeat (to split the variants over several runs).
Exit: 0 ok (compile failures included), 1 an eager configuration failed, 77 no torch/GPU.
"""
import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

try:
    import torch
except ImportError:  # reported by main()
    torch = None

MODELS = {
    "launch": {
        "title": "(a) launch-bound: demo MLP, batch 64",
        "batch": 64,
        "in_elems": 784,
        "widths": [784, 512, 512, 10],
        "flatten": True,
        "precisions": ["fp32", "tf32"],
    },
    "gemm": {
        "title": "(b) GEMM-bound: 4 x 4096-wide MLP, batch 8192",
        "batch": 8192,
        "in_elems": 4096,
        "widths": [4096, 4096, 4096, 4096, 4096, 10],
        "flatten": False,
        "precisions": ["fp32", "tf32", "bf16"],
    },
}
CLASSES = 10
VARIANTS = ["eager", "cudagraph", "compile", "compile-max-autotune", "compile-reduce-overhead"]
COMPILE_MODES = {
    "compile": "default",
    "compile-max-autotune": "max-autotune-no-cudagraphs",
    "compile-reduce-overhead": "reduce-overhead",
}
PRECISION_TEXT = {
    "fp32": "FP32 (TF32 off)",
    "tf32": "TF32",
    "bf16": "bf16 autocast (TF32 on)",
}
LR, MOMENTUM = 0.01, 0.9


# ---------------------------------------------------------------------------
# data: bench_step.cu's formula
# ---------------------------------------------------------------------------

def make_batch(key, b):
    """Batch b of model `key` on the CPU: x float32 [batch, in], y int64 [batch]."""
    m = MODELS[key]
    n = torch.arange(m["batch"] * m["in_elems"], dtype=torch.int64)
    u = ((n + 1) * 2654435761 + (b + 1) * 97531) % (1 << 32)
    x = (u.to(torch.float64) / 2147483648.0 - 1.0).to(torch.float32).view(m["batch"], m["in_elems"])
    s = torch.arange(m["batch"], dtype=torch.int64)
    v = ((s + 1) * 2246822519 + (b + 1) * 3266489917) % (1 << 32)
    y = (v >> 16) % CLASSES
    return x, y


def build_model(key):
    m = MODELS[key]
    nn = torch.nn
    layers = [nn.Flatten()] if m["flatten"] else []
    w = m["widths"]
    for i in range(len(w) - 1):
        layers.append(nn.Linear(w[i], w[i + 1]))
        if i + 2 < len(w):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def set_precision(p):
    tf32 = p in ("tf32", "bf16")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def summarize(v):
    return {"ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v)}


# ---------------------------------------------------------------------------
# one configuration
# ---------------------------------------------------------------------------

def run_config(a, key, precision, variant):
    """Times one (model, precision, variant); returns a result dict (never raises)."""
    r = {"model": key, "precision": precision, "variant": variant, "status": "ok"}
    try:
        r.update(_run_config(a, key, precision, variant))
    except Exception as e:  # noqa: BLE001 - every failure is a reported result
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
        r["status"] = "failed: %s: %s" % (type(e).__name__, msg[:300])
        r["traceback"] = traceback.format_exc()[-3000:]
    return r


def _run_config(a, key, precision, variant):
    m = MODELS[key]
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if variant == "cudagraph" and not cuda:
        raise RuntimeError("CUDA graphs need a CUDA device")
    set_precision(precision)
    if variant.startswith("compile"):
        torch._dynamo.reset()
    torch.manual_seed(0)

    class WithLoss(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.net(x), y)

    net = build_model(key).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    loss_mod = WithLoss(net)
    fn = torch.compile(loss_mod, mode=COMPILE_MODES[variant]) if variant.startswith("compile") else loss_mod
    mark_step = None
    if variant == "compile-reduce-overhead":
        mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    if precision == "bf16":
        # cache_enabled=False: autocast's weight cache must not outlive a graph capture
        def autocast():
            return torch.autocast(dev.type, dtype=torch.bfloat16, cache_enabled=(variant != "cudagraph"))
    else:
        autocast = contextlib.nullcontext

    K = a.batches
    host_x, host_y, dev_x, dev_y = [], [], [], []
    for b in range(K):
        x, y = make_batch(key, b)
        host_x.append(x.pin_memory() if cuda else x)
        host_y.append(y.pin_memory() if cuda else y)
        dev_x.append(x.to(dev))
        dev_y.append(y.to(dev))
    static_x = dev_x[0].clone()
    static_y = dev_y[0].clone()

    def sync():
        if cuda:
            torch.cuda.synchronize()
    sync()

    def step(x, y):
        if mark_step is not None:
            mark_step()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = fn(x, y)
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    if variant == "cudagraph":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step(static_x, static_y)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            with autocast():
                static_loss = loss_mod(static_x, static_y)
            static_loss.backward()
            opt.step()
        sync()

        def run_host(k):
            static_x.copy_(host_x[k], non_blocking=True)
            static_y.copy_(host_y[k], non_blocking=True)
            g.replay()
            return static_loss

        def run_device(k):
            static_x.copy_(dev_x[k])
            static_y.copy_(dev_y[k])
            g.replay()
            return static_loss
    else:
        def run_host(k):
            static_x.copy_(host_x[k], non_blocking=True)
            static_y.copy_(host_y[k], non_blocking=True)
            return step(static_x, static_y)

        def run_device(k):
            return step(dev_x[k], dev_y[k])

    # the first step: compilation (torch.compile) or the replay right after capture
    first_loss = run_host(0).item()
    first_step_s = time.perf_counter() - t0
    for i in range(a.warmup):
        run_host((i + 1) % K).item()
        run_device((i + 1) % K)
    sync()

    n = a.steps if key == "launch" else a.wide_steps
    start = torch.cuda.Event(enable_timing=True) if cuda else None
    end = torch.cuda.Event(enable_timing=True) if cuda else None
    counter = [0]

    def timed(run, sync_each_step):
        out = []
        loss = None
        for _ in range(a.repeats):
            t = time.perf_counter()
            if cuda:
                start.record()
            for _ in range(n):
                loss = run(counter[0] % K)
                counter[0] += 1
                if sync_each_step:
                    loss.item()
            if cuda:
                end.record()
                end.synchronize()
                out.append(start.elapsed_time(end) / n)
            else:
                out.append((time.perf_counter() - t) * 1e3 / n)
        return summarize(out), loss

    host_t, _ = timed(run_host, True)
    device_t, loss = timed(run_device, False)
    last_loss = loss.item()
    return {
        "host_ms": host_t["ms"], "host_min_ms": host_t["min_ms"], "host_max_ms": host_t["max_ms"],
        "device_ms": device_t["ms"], "device_min_ms": device_t["min_ms"], "device_max_ms": device_t["max_ms"],
        "first_step_s": first_step_s, "first_loss": first_loss, "last_loss": last_loss,
        "steps_per_repeat": n, "repeats": a.repeats,
    }


# ---------------------------------------------------------------------------
# environment and report
# ---------------------------------------------------------------------------

def driver_version():
    """cuDriverGetVersion through ctypes (torch does not expose the driver version)."""
    try:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return "%d.%d (cuDriverGetVersion %d)" % (v.value // 1000, (v.value % 1000) // 10, v.value)
    except Exception:  # noqa: BLE001
        pass
    return "unknown"


def environment(command):
    env = {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "cudnn": str(torch.backends.cudnn.version()),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (smoke test)",
        "driver": driver_version(),
        "python": sys.version.split()[0],
    }
    try:
        import triton  # comes with torch on Linux; only reported
        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        env["triton"] = "not importable"
    return env


def fmt(v, f="%.4f"):
    return f % v if isinstance(v, (int, float)) else "-"


def markdown(a, env, results):
    md = ["# PyTorch baselines for the strata training-step benchmarks", ""]
    md.append("- device: %s, driver %s" % (env["device"], env["driver"]))
    md.append("- torch %s (CUDA %s, cuDNN %s, triton %s), Python %s"
              % (env["torch"], env["cuda"], env["cudnn"], env["triton"], env["python"]))
    md.append("- date: %s" % env["date"])
    for c in env.get("commands", [env["command"]]):
        md.append("- command: `%s`" % c)
    md.append("- SGD(lr=%g, momentum=%g); data from bench_step.cu's formula, rotating over %d batches; "
              "PyTorch's default initialisation (seed 0)" % (LR, MOMENTUM, a.batches))
    md.append("- timing: warm-up steps (%d in this run), then repeats of N steps between torch.cuda.Events; "
              "median repeat / N (min, max of the repeats in the JSON)" % a.warmup)
    md.append("- **host** protocol = a strata step's work: batch copied from pinned host memory into static "
              "device tensors, step, `loss.item()` (one sync per step). **device** protocol = PyTorch's best "
              "case: batches already on the GPU, no per-step sync.")
    md.append("- compile variants compile model + loss (forward and backward); optimizer.step() runs eagerly "
              "(foreach SGD). `cudagraph` captures forward, backward and optimizer.step() as one graph. "
              "`first step (s)` includes compilation (compile variants) or warm-up + capture (cudagraph).")
    md.append("")
    for key in a.models:
        rows = [r for r in results if r["model"] == key]
        if not rows:
            continue
        m = MODELS[key]
        md.append("## %s" % m["title"])
        md.append("")
        md.append("| precision | variant | ms/step, host protocol | ms/step, device protocol | "
                  "first step (s) | loss first -> last | N x repeats | status |")
        md.append("|---|---|---:|---:|---:|---|---|---|")
        for r in rows:
            ok = r["status"] == "ok"
            md.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                PRECISION_TEXT[r["precision"]], r["variant"],
                fmt(r.get("host_ms")) if ok else "-", fmt(r.get("device_ms")) if ok else "-",
                fmt(r.get("first_step_s"), "%.1f") if ok else "-",
                ("%s -> %s" % (fmt(r.get("first_loss")), fmt(r.get("last_loss")))) if ok else "-",
                ("%s x %s" % (r.get("steps_per_repeat"), r.get("repeats"))) if ok else "-",
                r["status"].replace("|", "/")))
        md.append("")
    return "\n".join(md) + "\n"


# ---------------------------------------------------------------------------

def child_args(a, key, precision, variant):
    return [sys.executable, os.path.abspath(__file__), "--child", "%s:%s:%s" % (key, precision, variant),
            "--steps", str(a.steps), "--wide-steps", str(a.wide_steps), "--repeats", str(a.repeats),
            "--warmup", str(a.warmup), "--batches", str(a.batches), "--device", a.device]


def run_isolated(a, key, precision, variant):
    try:
        p = subprocess.run(child_args(a, key, precision, variant), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=a.timeout, universal_newlines=True)
    except subprocess.TimeoutExpired:
        return {"model": key, "precision": precision, "variant": variant,
                "status": "failed: timed out after %d s (--timeout)" % a.timeout}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = [l for l in (p.stderr or "").strip().splitlines() if l.strip()]
    reason = tail[-1][:300] if tail else "no output"
    return {"model": key, "precision": precision, "variant": variant,
            "status": "failed: exit %d: %s" % (p.returncode, reason), "stderr_tail": (p.stderr or "")[-3000:]}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="launch,gemm")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--precisions", default="fp32,tf32,bf16",
                    help="bf16 applies to the gemm model only")
    ap.add_argument("--steps", type=int, default=200, help="steps per repeat, launch-bound model")
    ap.add_argument("--wide-steps", type=int, default=10, help="steps per repeat, GEMM-bound model")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per configuration (isolated runs)")
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    ap.add_argument("--no-isolate", action="store_true", help="run every configuration in this process")
    ap.add_argument("--merge", action="store_true",
                    help="keep the results already in --json for configurations this run does not repeat")
    ap.add_argument("--out", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a smoke test of this script without a GPU (eager and compile only)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.quick:
        a.steps, a.wide_steps, a.repeats, a.warmup = 50, 3, 3, 3
    a.models = [m for m in a.models.split(",") if m]
    a.variants = [v for v in a.variants.split(",") if v]
    a.precisions = [p for p in a.precisions.split(",") if p]
    for m in a.models:
        if m not in MODELS:
            ap.error("unknown model %r (launch, gemm)" % m)
    for v in a.variants:
        if v not in VARIANTS:
            ap.error("unknown variant %r (%s)" % (v, ", ".join(VARIANTS)))
    for p in a.precisions:
        if p not in PRECISION_TEXT:
            ap.error("unknown precision %r (fp32, tf32, bf16)" % p)
    a.steps, a.wide_steps = max(1, a.steps), max(1, a.wide_steps)
    a.repeats, a.warmup, a.batches = max(1, a.repeats), max(1, a.warmup), max(1, a.batches)
    if not a.out and os.environ.get("OUT"):
        a.out = os.path.join(os.environ["OUT"], "pytorch_mlp.md")
    if not a.json and a.out:
        a.json = (a.out[:-3] if a.out.endswith(".md") else a.out) + ".json"
    return a


def main(argv):
    a = parse_args(argv)
    if torch is None:
        print("pytorch_mlp: torch is not installed: skipping")
        return 77
    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipping")
        return 77
    if a.child:
        key, precision, variant = a.child.split(":")
        print("RESULT " + json.dumps(run_config(a, key, precision, variant)))
        sys.stdout.flush()
        return 0

    command = " ".join([os.path.basename(sys.executable), sys.argv[0]] + argv)
    env = environment(command)
    print("pytorch_mlp: %s, torch %s, driver %s" % (env["device"], env["torch"], env["driver"]))
    results = []
    if a.merge and a.json and os.path.exists(a.json):
        # keep earlier results of configurations this run does not repeat
        try:
            with open(a.json) as f:
                old = json.load(f)
            results = old.get("results", [])
            env["commands"] = old.get("environment", {}).get("commands", []) + [command]
        except (OSError, ValueError):
            results = []
    env.setdefault("commands", [command])
    order = {(k, p, v): i for i, (k, p, v) in enumerate(
        (k, p, v) for k in MODELS for p in PRECISION_TEXT for v in VARIANTS)}

    for path in (a.out, a.json):
        if path and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)

    def save():
        results.sort(key=lambda r: order.get((r["model"], r["precision"], r["variant"]), 1 << 30))
        md = markdown(a, env, results)
        if a.out:
            with open(a.out, "w") as f:
                f.write(md)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"environment": env, "results": results}, f, indent=1)
        return md

    for key in a.models:
        for precision in MODELS[key]["precisions"]:
            if precision not in a.precisions:
                continue
            for variant in a.variants:
                t0 = time.time()
                r = (run_config(a, key, precision, variant) if a.no_isolate
                     else run_isolated(a, key, precision, variant))
                r["wall_s"] = time.time() - t0
                results[:] = [x for x in results
                              if (x["model"], x["precision"], x["variant"]) != (key, precision, variant)]
                results.append(r)
                if r["status"] == "ok":
                    print("%-6s %-5s %-24s host %9.4f ms/step  device %9.4f ms/step  first step %6.1f s  "
                          "loss %.4f -> %.4f" % (key, precision, variant, r["host_ms"], r["device_ms"],
                                                 r["first_step_s"], r["first_loss"], r["last_loss"]))
                else:
                    print("%-6s %-5s %-24s %s" % (key, precision, variant, r["status"]))
                sys.stdout.flush()
                save()  # after every configuration: a run cut off still leaves its results

    md = save()
    if a.out:
        print("wrote %s" % a.out)
    else:
        sys.stdout.write(md)
    if a.json:
        print("wrote %s" % a.json)
    eager_failed = any(r["variant"] == "eager" and r["status"] != "ok" for r in results)
    return 1 if eager_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
