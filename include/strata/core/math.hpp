#pragma once
// Per-element formulas, written once for host and device code: every backend's
// elementwise and optimizer kernels call these, so the CPU reference and the GPU run
// the same arithmetic (up to the device's libm for sqrtf/expf: they differ by an ulp or two).
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <math.h>

#include "strata/core/hd.hpp"
#include "strata/core/kernel_args.hpp"

namespace strata::math {

// e^x − 1 in float for x <= 0 without libm, so that loops over it vectorise (glibc's
// tanhf is a scalar call and made GeLU the largest cost of a transformer step on CPUs):
// Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2; e^r − 1 = r + r² P(r) with
// Cephes' expf coefficients; then 2^n (e^r − 1) + (2^n − 1), exact in its last step for
// small n, so tiny x keeps its relative accuracy.
STRATA_HD_INLINE float expm1_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;  // 2^n stays a normal number
  const float n = static_cast<float>(static_cast<int>(x * 1.44269504088896341f - 0.5f));  // round(x / ln2), x <= 0
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float q = p * r * r + r;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;  // 2^n
#if defined(__CUDA_ARCH__)
  const float scale = __int_as_float(bits);
#else
  const float scale = std::bit_cast<float>(bits);
#endif
  return scale * q + (scale - 1.0f);
}

// tanh in float: −m / (2 + m) with m = e^(−2|x|) − 1, and the sign of x; within 2.5 ulp
// of tanh on [−20, 20]. double keeps libm's tanh.
STRATA_HD_INLINE float tanh_of(float x) {
  const float m = expm1_nonpositive(x < 0.0f ? 2.0f * x : -2.0f * x);
  const float t = -m / (2.0f + m);
  return x < 0.0f ? -t : x > 0.0f ? t : x;  // ±0 and NaN pass through
}
STRATA_HD inline double tanh_of(double x) { return ::tanh(x); }
STRATA_HD inline float sqrt_of(float x) { return ::sqrtf(x); }
STRATA_HD inline double sqrt_of(double x) { return ::sqrt(x); }
STRATA_HD inline float exp_of(float x) { return ::expf(x); }
STRATA_HD inline double exp_of(double x) { return ::exp(x); }
STRATA_HD inline float log_of(float x) { return ::logf(x); }
STRATA_HD inline double log_of(double x) { return ::log(x); }

// Two softmax partials of one query row over disjoint key sets, merged (a ring's steps of
// context-parallel attention): with log-sum-exps a and b, lse = log(e^a + e^b) and the merged
// output is wa·o_a + wb·o_b with wa = e^(a − lse), wb = e^(b − lse). A side that saw no key
// (−inf) weighs 0; if neither did, lse stays −inf and both weigh 0. A NaN propagates.
template <class C>
STRATA_HD inline C lse_merge(C a, C b, C& wa, C& wb) {
  if (a == -C(INFINITY) && b == -C(INFINITY)) {
    wa = wb = C(0);
    return a;
  }
  const C m = a > b ? a : b;
  const C ea = exp_of(a - m), eb = exp_of(b - m), sum = ea + eb;
  wa = ea / sum;
  wb = eb / sum;
  return m + log_of(sum);
}

// Dropout's element (forward and backward alike): kept ones scaled by 1/(1 − rate), dropped
// ones zero (a select, not a multiply by the mask: a dropped Inf or NaN is no gradient).
template <class C>
STRATA_HD inline C dropout_value(C x, bool keep, C scale) {
  return keep ? x * scale : C(0);
}

// SwiGLU (Shazeer 2020; Llama's MLP): h = silu(g)·u with silu(g) = g·σ(g), and its
// gradients dg = dh·u·σ(g)(1 + g(1 − σ(g))), du = dh·silu(g), in the compute type C.
template <class C>
STRATA_HD inline C sigmoid_of(C x) {
  return C(1) / (C(1) + exp_of(-x));  // exp overflows to +inf for x << 0: σ = 0
}
struct swiglu_forward_op {
  template <class C>
  STRATA_HD C operator()(C g, C u) const {
    return g * sigmoid_of(g) * u;
  }
};
struct swiglu_gate_grad_op {
  template <class C>
  STRATA_HD C operator()(C g, C u, C dh) const {
    const C s = sigmoid_of(g);
    return dh * u * s * (C(1) + g * (C(1) - s));
  }
};
struct swiglu_up_grad_op {
  template <class C>
  STRATA_HD C operator()(C g, C dh) const {
    return dh * g * sigmoid_of(g);
  }
};

// Rotary position embedding (Su et al., RoFormer; transformers' Llama convention): the
// pair (a, b) = (x_i, x_{i+dh/2}) of a row at position pos is rotated by
// θ = pos · base^(−2i/dh), or by −θ (inverse: the rotation's transpose, for the backward).
// In double: the angle of a far position keeps its digits.
// rope_angle is θ; rope_apply turns the pair by an angle whose cosine and sine are given
// (a kernel may tabulate them per position once and reuse them for every head).
STRATA_HD inline double rope_angle(long long pos, std::size_t i, std::size_t dh, double base) {
  return double(pos) * ::pow(base, -2.0 * double(i) / double(dh));
}
STRATA_HD inline void rope_apply(double& a, double& b, double c, double s, bool inverse) {
  if (inverse) s = -s;
  const double x = a, y = b;
  a = x * c - y * s;
  b = y * c + x * s;
}
STRATA_HD inline void rope_rotate(double& a, double& b, long long pos, std::size_t i, std::size_t dh, double base,
                                  bool inverse) {
  const double theta = rope_angle(pos, i, dh, base);
  rope_apply(a, b, ::cos(theta), ::sin(theta), inverse);
}

// act(x) in the compute type C. relu lets NaN through (a NaN check then sees it); gelu is
// the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class C>
STRATA_HD_INLINE C act_forward(backend::activation a, C x) {
  switch (a) {
    case backend::activation::relu:
      return x < C(0) ? C(0) : x;
    case backend::activation::gelu: {
      const C c = C(0.7978845608028653558798921198687637);  // sqrt(2/pi)
      const C k = C(0.044715);
      return C(0.5) * x * (C(1) + tanh_of(c * (x + k * x * x * x)));
    }
    default:
      return x;
  }
}

// d act / dx at x (relu: 0 at x == 0, as PyTorch).
template <class C>
STRATA_HD_INLINE C act_derivative(backend::activation a, C x) {
  switch (a) {
    case backend::activation::relu:
      return x > C(0) ? C(1) : C(0);
    case backend::activation::gelu: {
      const C c = C(0.7978845608028653558798921198687637);
      const C k = C(0.044715);
      const C t = tanh_of(c * (x + k * x * x * x));
      return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * c * (C(1) + C(3) * k * x * x);
    }
    default:
      return C(1);
  }
}

// ---- optimizers: PyTorch's semantics and operation order --------------------------------

// torch.optim.SGD (dampening 0, no Nesterov): g = grad + wd·p; v = μ·v + g; g = v; p −= lr·g.
template <class T>
struct sgd_scalars {
  T neg_lr, mu, wd;
  bool use_wd, use_mom;
  static sgd_scalars make(double lr, double momentum, double weight_decay) {
    return {T(-lr), T(momentum), T(weight_decay), weight_decay != 0.0, momentum != 0.0};
  }
};
template <class T>
STRATA_HD inline void sgd_update(T& p, T g, T* velocity, const sgd_scalars<T>& s) {
  if (s.use_wd) g = g + s.wd * p;
  if (s.use_mom) {
    *velocity = *velocity * s.mu + g;
    g = *velocity;
  }
  p = p + s.neg_lr * g;
}

// torch.optim.Adam (decoupled = false) / AdamW (decoupled = true), `step` counting updates
// from 1: Adam g += wd·p, AdamW p *= 1 − lr·wd; m = lerp(m, g, 1 − β1);
// v = β2·v + (1 − β2)·g²; p −= (lr / (1 − β1^step)) · m / (√v / √(1 − β2^step) + ε).
// The bias corrections are computed in double on the host, as PyTorch does.
template <class T>
struct adam_scalars {
  T neg_step_size, bc2_sqrt, w1, b2, w2, eps, wd, decay;
  bool use_wd, decoupled, lerp_low;
  static adam_scalars make(double lr, double beta1, double beta2, double eps, double weight_decay,
                           std::int64_t step, bool decoupled) {
    const double bc1 = 1.0 - std::pow(beta1, double(step));
    const double bc2 = 1.0 - std::pow(beta2, double(step));
    return {T(-(lr / bc1)), T(std::sqrt(bc2)), T(1.0 - beta1), T(beta2), T(1.0 - beta2), T(eps), T(weight_decay),
            T(1.0 - lr * weight_decay), weight_decay != 0.0, decoupled,
            (1.0 - beta1) < 0.5};  // torch.lerp picks its formula by the weight
  }
};
template <class T>
STRATA_HD inline void adam_update(T& p, T g, T& m, T& v, const adam_scalars<T>& s) {
  if (s.use_wd) {
    if (s.decoupled)
      p = p * s.decay;
    else
      g = g + s.wd * p;
  }
  const T mi = m;
  const T mn = s.lerp_low ? mi + s.w1 * (g - mi) : g - (g - mi) * (T(1) - s.w1);
  const T vn = v * s.b2 + s.w2 * g * g;
  const T denom = sqrt_of(vn) / s.bc2_sqrt + s.eps;
  m = mn;
  v = vn;
  p = p + s.neg_step_size * (mn / denom);
}

// LayerNorm with a row's features spread over devices (2D/2.5D/3D tensor parallelism),
// one row of D local features, values read through C (the compute type) into double:
// the row's moments Σx and Σx² (one pass, so that one all-reduce carries both); the mean
// and 1/σ from the moments summed over all `total` features; the normalised row; the
// gradient sums Σg and Σg·x̂ (g = dy·γ); and the input gradient from their means.
template <class C, class T>
STRATA_HD inline void layernorm_row_moments(const T* x, std::size_t D, double& s, double& ss) {
  s = ss = 0;
  for (std::size_t j = 0; j < D; ++j) {
    const double v = double(C(x[j]));
    s += v;
    ss += v * v;
  }
}
STRATA_HD inline void layernorm_moments_to_stats(double sum, double sumsq, double total, double eps, double& mean,
                                                 double& rstd) {
  mean = sum / total;
  const double var = sumsq / total - mean * mean;
  rstd = 1.0 / sqrt_of((var > 0.0 ? var : 0.0) + eps);
}
template <class C, class T>
STRATA_HD inline void layernorm_row_normalize(const T* x, const T* gamma, const T* beta, std::size_t D, double mean,
                                              double rstd, T* y) {
  for (std::size_t j = 0; j < D; ++j) {
    double v = (double(C(x[j])) - mean) * rstd;
    if (gamma) v *= double(C(gamma[j]));
    if (beta) v += double(C(beta[j]));
    y[j] = T(C(v));
  }
}
template <class C, class T>
STRATA_HD inline void layernorm_row_grad_sums(const T* x, const T* gamma, const T* dy, std::size_t D, double mean,
                                              double rstd, double& sg, double& sgx) {
  sg = sgx = 0;
  for (std::size_t j = 0; j < D; ++j) {
    const double g = double(C(dy[j])) * (gamma ? double(C(gamma[j])) : 1.0);
    sg += g;
    sgx += g * (double(C(x[j])) - mean) * rstd;
  }
}
template <class C, class T>
STRATA_HD inline void layernorm_row_dx(const T* x, const T* gamma, const T* dy, std::size_t D, double mean, double rstd,
                                       double mean_g, double mean_gx, T* dx) {
  for (std::size_t j = 0; j < D; ++j) {
    const double g = double(C(dy[j])) * (gamma ? double(C(gamma[j])) : 1.0);
    const double xhat = (double(C(x[j])) - mean) * rstd;
    dx[j] = T(C(rstd * (g - mean_g - xhat * mean_gx)));
  }
}

namespace batchnorm {

// Batch normalisation of one channel over `count` values (all pixels of all samples of
// the micro-batch): x̂ = (x − mean)·rstd, y = γ·x̂ + β, rstd = 1/√(var + eps), biased
// variance (PyTorch's training mode). Backward, from the channel's Σdy and Σdy·x̂ over
// the same count: dx = γ·rstd·(dy − Σdy/count − x̂·Σdy·x̂/count).
STRATA_HD inline double rstd_of(double centered_square_sum, double count, double eps) {
  return 1.0 / sqrt(centered_square_sum / count + eps);
}
// A running statistic moved towards a step's value (PyTorch's momentum rule).
STRATA_HD inline double running(double kept, double value, double momentum) {
  return (1.0 - momentum) * kept + momentum * value;
}
STRATA_HD inline double forward(double x, double mean, double rstd, double gamma, double beta) {
  return (x - mean) * rstd * gamma + beta;
}
STRATA_HD inline double input_grad(double x, double dy, double mean, double rstd, double gamma, double sum_dy,
                                   double sum_dy_xhat, double count) {
  const double xhat = (x - mean) * rstd;
  return gamma * rstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count);
}

}  // namespace batchnorm

}  // namespace strata::math
