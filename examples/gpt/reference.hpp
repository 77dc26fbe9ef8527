// The GPT of gpt_job.hpp in plain float64, one token at a time with a key/value cache:
// written independently of strata's kernels, from the parameters the trainer gathers.
// The job uses it to check the trained model's loss on a validation window against the
// distributed evaluation, and to generate text.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

namespace gpt_reference {

using tensor = std::vector<double>;
using parameters = std::vector<std::vector<tensor>>;  // [layer][tensor], as gather_parameters

struct config {
  int vocab, seq, d, heads, blocks, hidden;  // hidden: the MLP's width
};

class model {
 public:
  // Layers in the order the plan lists them: Embedding, PositionEmbedding, per block
  // [ResidualBegin, LayerNorm, attention, ResidualEnd, ResidualBegin, LayerNorm, Linear,
  // GeLU, Linear, ResidualEnd], final LayerNorm, Linear, loss.
  model(config c, parameters p) : c_(c), p_(std::move(p)), k_(c.blocks), v_(c.blocks) {}

  // Feeds the token at the next position; returns the logits for the position after it.
  std::vector<double> next(int token) {
    const int D = c_.d, t = pos_++;
    tensor x(D);
    for (int j = 0; j < D; ++j) x[j] = P(0, 0)[token * D + j] + P(1, 0)[t * D + j];
    for (int b = 0; b < c_.blocks; ++b) {
      const int at = 2 + 10 * b;  // the block's first layer (ResidualBegin)
      tensor h = norm(x, P(at + 1, 0), P(at + 1, 1));
      tensor a = attend(b, h, P(at + 2, 0), P(at + 2, 1), P(at + 2, 2), P(at + 2, 3));
      for (int j = 0; j < D; ++j) x[j] += a[j];
      h = norm(x, P(at + 5, 0), P(at + 5, 1));
      tensor u = affine(h, P(at + 6, 0), P(at + 6, 1), c_.hidden);
      for (double& e : u) e = gelu(e);
      tensor m = affine(u, P(at + 8, 0), P(at + 8, 1), D);
      for (int j = 0; j < D; ++j) x[j] += m[j];
    }
    const int last = 2 + 10 * c_.blocks;
    return affine(norm(x, P(last, 0), P(last, 1)), P(last + 1, 0), P(last + 1, 1), c_.vocab);
  }
  int position() const { return pos_; }

 private:
  const tensor& P(int layer, int k) const { return p_[std::size_t(layer)][std::size_t(k)]; }

  static double gelu(double x) {  // tanh approximation
    const double k = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
  }
  tensor norm(const tensor& x, const tensor& g, const tensor& b) const {
    double mean = 0, var = 0;
    for (double e : x) mean += e;
    mean /= double(x.size());
    for (double e : x) var += (e - mean) * (e - mean);
    var /= double(x.size());
    const double r = 1 / std::sqrt(var + 1e-5);
    tensor y(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) y[j] = (x[j] - mean) * r * g[j] + b[j];
    return y;
  }
  // y = x W + bias, W row-major [in, out]
  static tensor affine(const tensor& x, const tensor& w, const tensor& bias, int out) {
    tensor y(bias.begin(), bias.end());
    y.resize(std::size_t(out), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i)
      for (int o = 0; o < out; ++o) y[std::size_t(o)] += x[i] * w[i * std::size_t(out) + std::size_t(o)];
    return y;
  }
  // Causal self-attention of the newest position over the cache. The QKV projection's
  // columns are per head [q | k | v], dh each, heads in order.
  tensor attend(int block, const tensor& h, const tensor& w_qkv, const tensor& b_qkv, const tensor& w_out,
                const tensor& b_out) {
    const int D = c_.d, H = c_.heads, dh = D / H;
    const tensor qkv = affine(h, w_qkv, b_qkv, 3 * D);
    auto& K = k_[std::size_t(block)];
    auto& V = v_[std::size_t(block)];
    tensor q(D), k(D), v(D);
    for (int hd = 0; hd < H; ++hd)
      for (int j = 0; j < dh; ++j) {
        q[hd * dh + j] = qkv[hd * 3 * dh + j];
        k[hd * dh + j] = qkv[hd * 3 * dh + dh + j];
        v[hd * dh + j] = qkv[hd * 3 * dh + 2 * dh + j];
      }
    K.push_back(k);
    V.push_back(v);
    tensor ctx(D, 0.0);
    const double scale = 1 / std::sqrt(double(dh));
    for (int hd = 0; hd < H; ++hd) {
      std::vector<double> s(K.size());
      double top = -1e300;
      for (std::size_t u = 0; u < K.size(); ++u) {
        double dot = 0;
        for (int j = 0; j < dh; ++j) dot += q[hd * dh + j] * K[u][hd * dh + j];
        s[u] = dot * scale;
        top = std::max(top, s[u]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - top));
      for (std::size_t u = 0; u < K.size(); ++u)
        for (int j = 0; j < dh; ++j) ctx[hd * dh + j] += s[u] / sum * V[u][hd * dh + j];
    }
    return affine(ctx, w_out, b_out, D);
  }

  config c_;
  parameters p_;
  std::vector<std::vector<tensor>> k_, v_;  // per block, per position
  int pos_ = 0;
};

// Mean next-byte loss (nats) of the model over one window of text (seq + 1 bytes).
inline double window_loss(const config& c, const parameters& p, const unsigned char* bytes) {
  model m(c, p);
  double loss = 0;
  for (int t = 0; t < c.seq; ++t) {
    const std::vector<double> z = m.next(bytes[t]);
    double top = z[0];
    for (double e : z) top = std::max(top, e);
    double sum = 0;
    for (double e : z) sum += std::exp(e - top);
    loss += top + std::log(sum) - z[bytes[t + 1]];
  }
  return loss / c.seq;
}

}  // namespace gpt_reference
