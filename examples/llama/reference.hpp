// A Llama-family decoder in plain float64, one token at a time with a key/value cache,
// written independently of strata's kernels from the parameters the trainer gathers and
// the plan's layer names: Embedding, per block [ResidualBegin, RMSNorm, attention,
// ResidualEnd, ResidualBegin, RMSNorm, SwiGLU, ResidualEnd] (Dropout anywhere: the
// identity at evaluation), the final RMSNorm and a TiedHead or a bias-free Linear head.
// Formulas as transformers' LlamaForCausalLM: RMSNorm x / √(mean x² + eps) · w, rotary
// positions in the rotate-half convention (θ = p · base^(−2i/dh) on the pair (i, i + dh/2)),
// grouped-query attention, SwiGLU (silu(x·W_gate) ⊙ x·W_up)·W_down.
// The job checks the trained model's loss on validation windows against the distributed
// evaluation with it, and samples text.
#pragma once
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace llama_reference {

using tensor = std::vector<double>;
using parameters = std::vector<std::vector<tensor>>;  // [layer][tensor], as gather_parameters

struct config {
  int vocab, d, heads, kv_heads, hidden;
  double norm_eps, rope_base;
};

class model {
 public:
  // `names`: the plan's layer names, in order (P::layer_plans[i].desc.name).
  model(config c, parameters p, std::vector<std::string> names) : c_(c), p_(std::move(p)), names_(std::move(names)) {
    for (const std::string& n : names_) blocks_ += n == "CausalSelfAttention";
    k_.resize(std::size_t(blocks_));
    v_.resize(std::size_t(blocks_));
  }

  // Feeds the token at the next position; returns the logits for the position after it.
  std::vector<double> next(int token) {
    const int D = c_.d;
    tensor x, skip;
    int block = 0;
    for (std::size_t i = 0; i < names_.size(); ++i) {
      const std::string& n = names_[i];
      const std::vector<tensor>& w = p_[i];
      if (n == "Embedding") {
        x.assign(w[0].begin() + std::ptrdiff_t(token) * D, w[0].begin() + std::ptrdiff_t(token + 1) * D);
      } else if (n == "ResidualBegin") {
        skip = x;
      } else if (n == "ResidualEnd") {
        for (int j = 0; j < D; ++j) x[std::size_t(j)] += skip[std::size_t(j)];
      } else if (n == "RMSNorm") {
        x = rms_norm(x, w[0]);
      } else if (n == "CausalSelfAttention") {
        x = attend(block++, x, w);
      } else if (n == "SwiGLU") {
        tensor g = affine(x, w[0], c_.hidden), u = affine(x, w[1], c_.hidden);
        for (std::size_t j = 0; j < g.size(); ++j) g[j] = g[j] / (1 + std::exp(-g[j])) * u[j];
        x = affine(g, w[2], D);
      } else if (n == "TiedHead") {  // x · tableᵀ
        tensor z(std::size_t(c_.vocab), 0.0);
        for (int v = 0; v < c_.vocab; ++v)
          for (int j = 0; j < D; ++j) z[std::size_t(v)] += x[std::size_t(j)] * w[0][std::size_t(v * D + j)];
        x = z;
      } else if (n == "Linear") {
        if (w.size() != 1) throw std::invalid_argument("llama_reference: a head with a bias");
        x = affine(x, w[0], c_.vocab);
      } else if (n == "Dropout" || n == "SoftmaxCrossEntropy") {
      } else {
        throw std::invalid_argument("llama_reference: no formula for layer " + n);
      }
    }
    ++pos_;
    return x;
  }

 private:
  tensor rms_norm(const tensor& x, const tensor& g) const {
    double ms = 0;
    for (double e : x) ms += e * e;
    const double r = 1 / std::sqrt(ms / double(x.size()) + c_.norm_eps);
    tensor y(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) y[j] = x[j] * r * g[j];
    return y;
  }
  // y = x W, W row-major [in, out]
  static tensor affine(const tensor& x, const tensor& w, int out) {
    tensor y(std::size_t(out), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i)
      for (int o = 0; o < out; ++o) y[std::size_t(o)] += x[i] * w[i * std::size_t(out) + std::size_t(o)];
    return y;
  }
  // One head's dh features at position p rotated (rotate-half pairs).
  void rotate(double* h, int p) const {
    const int dh = c_.d / c_.heads, half = dh / 2;
    for (int i = 0; i < half; ++i) {
      const double t = double(p) * std::pow(c_.rope_base, -2.0 * i / dh), co = std::cos(t), si = std::sin(t);
      const double a = h[i], b = h[i + half];
      h[i] = a * co - b * si;
      h[i + half] = b * co + a * si;
    }
  }
  // Causal grouped-query attention of the newest position over the cache. The QKV
  // projection's columns, per key/value group g: its G = heads/kv_heads query heads, then
  // k_g, then v_g (dh each); biases follow the same order when present.
  tensor attend(int block, const tensor& x, const std::vector<tensor>& w) {
    const int D = c_.d, H = c_.heads, KV = c_.kv_heads, G = H / KV, dh = D / H, width = (H + 2 * KV) * dh;
    const bool bias = w.size() == 4;
    tensor qkv = affine(x, w[0], width);
    if (bias)
      for (int j = 0; j < width; ++j) qkv[std::size_t(j)] += w[1][std::size_t(j)];
    tensor q(static_cast<std::size_t>(D)), k(static_cast<std::size_t>(KV * dh)), v(static_cast<std::size_t>(KV * dh));
    for (int g = 0; g < KV; ++g) {
      const double* at = qkv.data() + g * (G + 2) * dh;
      for (int j = 0; j < G * dh; ++j) q[std::size_t(g * G * dh + j)] = at[j];
      for (int j = 0; j < dh; ++j) k[std::size_t(g * dh + j)] = at[G * dh + j], v[std::size_t(g * dh + j)] = at[(G + 1) * dh + j];
    }
    if (c_.rope_base > 0) {
      for (int h = 0; h < H; ++h) rotate(q.data() + h * dh, pos_);
      for (int g = 0; g < KV; ++g) rotate(k.data() + g * dh, pos_);
    }
    auto& K = k_[std::size_t(block)];
    auto& V = v_[std::size_t(block)];
    K.push_back(k);
    V.push_back(v);
    tensor ctx(static_cast<std::size_t>(D), 0.0);
    const double scale = 1 / std::sqrt(double(dh));
    for (int h = 0; h < H; ++h) {
      const int g = h / G;
      std::vector<double> s(K.size());
      double top = -1e300;
      for (std::size_t u = 0; u < K.size(); ++u) {
        double dot = 0;
        for (int j = 0; j < dh; ++j) dot += q[std::size_t(h * dh + j)] * K[u][std::size_t(g * dh + j)];
        s[u] = dot * scale;
        top = std::max(top, s[u]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - top));
      for (std::size_t u = 0; u < K.size(); ++u)
        for (int j = 0; j < dh; ++j) ctx[std::size_t(h * dh + j)] += s[u] / sum * V[u][std::size_t(g * dh + j)];
    }
    tensor y = affine(ctx, w[bias ? 2 : 1], D);
    if (bias)
      for (int j = 0; j < D; ++j) y[std::size_t(j)] += w[3][std::size_t(j)];
    return y;
  }

  config c_;
  parameters p_;
  std::vector<std::string> names_;
  int blocks_ = 0;
  std::vector<std::vector<tensor>> k_, v_;  // per block, per position
  int pos_ = 0;
};

// Mean next-token loss (nats) over one window of seq + 1 token ids.
template <class Id>
double window_loss(const config& c, const parameters& p, const std::vector<std::string>& names, const Id* ids,
                   int seq) {
  model m(c, p, names);
  double loss = 0;
  for (int t = 0; t < seq; ++t) {
    const std::vector<double> z = m.next(int(ids[t]));
    double top = z[0];
    for (double e : z) top = std::max(top, e);
    double sum = 0;
    for (double e : z) sum += std::exp(e - top);
    loss += top + std::log(sum) - z[std::size_t(ids[t + 1])];
  }
  return loss / seq;
}

}  // namespace llama_reference
