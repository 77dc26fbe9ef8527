"""The Python half of python.hf_roundtrip (hf_roundtrip.cpp has the other), with Hugging Face
transformers and torch:

  make <dir>    a randomly initialised GPT2LMHeadModel (float32, tied embeddings, 16
                positions), LlamaForCausalLM (float64, untied head, attention biases, 16
                positions) and a Llama 3-style one (float64, 2 key/value heads, no biases, tied
                embeddings) saved with save_pretrained into <dir>/hf_gpt2, hf_llama, hf_llama3
  check <dir>   every folder strata exported loads with from_pretrained (no missing,
                unexpected or mismatched tensor) and gives strata's logits on strata's tokens;
                strata's logits of the folders it imported equal transformers' own

Tolerances, relative to the largest logit: float64 1e-10, float32 1e-4. transformers' Llama
computes RMSNorm, the rotary angles and (eager) attention's softmax in float32 whatever the
model's dtype: here RMSNorm and the rotary embedding run the same formulas in the model's
precision when it is above float32 (at_least_float32 below), and attention runs as SDPA.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

transformers.utils.logging.disable_progress_bar()

V, S, D, H, F = 32, 8, 16, 4, 24
failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("MISMATCH:", what)


def randomise(model, seed):
    """O(1) weights (transformers' init gives near-zero logits): normal(0, 0.3), norms 1 + 0.1·n."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = torch.randn(p.shape, generator=g, dtype=torch.float64)
            p.copy_((1 + 0.1 * n) if ("ln_" in name or "norm" in name) and name.endswith("weight") else 0.3 * n)


def make(work):
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=D, n_layer=2, n_head=H, n_positions=16,
                                     bos_token_id=None, eos_token_id=None))
    randomise(gpt, 1)
    gpt.save_pretrained(os.path.join(work, "hf_gpt2"))  # float32; lm_head tied to wte: not saved
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=2,
                                         num_attention_heads=H, max_position_embeddings=16, rms_norm_eps=1e-5,
                                         rope_theta=10000.0, attention_bias=True, tie_word_embeddings=False,
                                         bos_token_id=None, eos_token_id=None)).to(torch.float64)
    randomise(llama, 2)
    llama.save_pretrained(os.path.join(work, "hf_llama"))
    llama3 = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=2,
                                          num_attention_heads=H, num_key_value_heads=2, max_position_embeddings=16,
                                          rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=False,
                                          tie_word_embeddings=True, bos_token_id=None,
                                          eos_token_id=None)).to(torch.float64)
    randomise(llama3, 3)
    llama3.save_pretrained(os.path.join(work, "hf_llama3"))  # lm_head tied to embed_tokens: not saved
    print("hf_roundtrip: transformers saved hf_gpt2 (float32, tied), hf_llama (float64) and hf_llama3 (float64, "
          "grouped-query, tied)")


def at_least_float32(dtype):
    return torch.promote_types(dtype, torch.float32)


def rms_norm(self, x):  # LlamaRMSNorm.forward, in float32 or better
    h = x.to(at_least_float32(x.dtype))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    return self.weight * h.to(x.dtype)


def rotary(self, x, position_ids):  # LlamaRotaryEmbedding.forward (default rope), in float32 or better
    t = at_least_float32(x.dtype)
    dim = 2 * self.inv_freq.shape[0]
    inv_freq = 1.0 / (self.config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=t) / dim))
    freqs = position_ids[..., None].to(t) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


modeling_llama.LlamaRMSNorm.forward = rms_norm
modeling_llama.LlamaRotaryEmbedding.forward = rotary


def load(folder, dtype):
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa",
                                                       output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    expect(not problems, f"{folder}: from_pretrained reported {problems}")
    return model.eval()


def strata_logits(path):
    with safe_open(path, framework="pt") as f:
        return f.get_tensor("tokens"), f.get_tensor("logits")


def compare(label, folder, logits_file, dtype, tol):
    tokens, want = strata_logits(logits_file)
    model = load(folder, dtype)
    with torch.no_grad():
        got = model(input_ids=tokens).logits.to(torch.float64)
    err = ((got - want).abs().max() / want.abs().max()).item()
    print(f"hf_roundtrip: {label:52s} {str(dtype):14s} max |logit| {want.abs().max().item():7.3f}, "
          f"relative difference {err:.2e} (tolerance {tol:.0e})")
    expect(err <= tol, f"{label}: {err:.3e} > {tol:.0e}")


def same_files(a, b):
    def tensors(folder):
        with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    ta, tb = tensors(a), tensors(b)
    same = ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    same = same and json.load(open(os.path.join(a, "config.json"))) == json.load(open(os.path.join(b, "config.json")))
    print(f"hf_roundtrip: export from the strata checkpoint equals the export from the trainer: {same}")
    expect(same, f"{b} differs from {a}")


def check(work):
    f64, f32 = torch.float64, torch.float32
    for name, what in (("gpt2", "GPT-2 trained by strata (PP2 x TP2 + SP)"), ("llama", "Llama trained by strata (PP2 x TP2)"),
                       ("llama3", "Llama GQA + tied, trained by strata (PP2 x TP2)")):
        logits = os.path.join(work, name, "strata_logits.safetensors")
        compare(f"{what}, F64 export", os.path.join(work, name), logits, f64, 1e-10)
        compare(f"{what}, F32 export", os.path.join(work, name + "_f32"), logits, f32, 1e-4)
    expect(os.path.exists(os.path.join(work, "llama", "model.safetensors.index.json")), "llama: no sharded index")
    same_files(os.path.join(work, "gpt2"), os.path.join(work, "gpt2_ckpt"))
    gpt, llama = os.path.join(work, "hf_gpt2"), os.path.join(work, "hf_llama")
    compare("transformers' GPT-2 imported, strata float64", gpt, os.path.join(gpt, "strata_logits.safetensors"), f64, 1e-10)
    compare("transformers' GPT-2 imported, strata float32", gpt, os.path.join(gpt, "strata_logits_f32.safetensors"), f32, 1e-4)
    compare("transformers' Llama imported, strata float64", llama, os.path.join(llama, "strata_logits.safetensors"), f64, 1e-10)
    llama3 = os.path.join(work, "hf_llama3")
    compare("transformers' Llama GQA + tied imported, strata float64", llama3,
            os.path.join(llama3, "strata_logits.safetensors"), f64, 1e-10)


mode, work = sys.argv[1], sys.argv[2]
print(f"hf_roundtrip: torch {torch.__version__}, transformers {transformers.__version__}")
make(work) if mode == "make" else check(work)
print("hf_roundtrip:", "FAILED: " + "; ".join(failures) if failures else "OK")
sys.exit(1 if failures else 0)
