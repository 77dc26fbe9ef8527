#pragma once
// Kernel suite, rotary positions (rotary_embedding) against float64 rotations, and flash
// attention (flash_attention_forward / flash_attention_backward)
// against a naive float64 attention that forms every score matrix: odd lengths and head
// sizes that cross the tiles, causal and not, query and key blocks at global positions
// (q0, k0) as context parallelism passes them, groups of query items sharing a key/value
// item (grouped-query attention: dk and dv summed over the group); the backward against
// finite differences. Attention dropout (flash_shape::drop) against the same naive attention
// with each probability's mask written again from core/random.hpp at its coordinates.
// attention_merge: two key blocks' attentions merged against the attention over both.
#include "kernel_suite_common.hpp"
#include "strata/core/random.hpp"

namespace kernel_suite {

struct flash_case {
  std::size_t items, q_len, k_len, dh;
  long long q0, k0;
  bool causal;
  std::size_t group = 1;  // query items per key/value item
  std::string name() const {
    return std::to_string(items) + "x" + std::to_string(q_len) + "x" + std::to_string(k_len) + "x" +
           std::to_string(dh) + " at " + std::to_string(q0) + "/" + std::to_string(k0) + (causal ? " causal" : "") +
           (group > 1 ? " group " + std::to_string(group) : "");
  }
  strata::backend::flash_shape shape() const {
    return {.items = items, .group = group, .q_len = q_len, .k_len = k_len, .dh = dh, .q0 = q0, .k0 = k0,
            .scale = 1.0 / std::sqrt(double(dh)), .causal = causal};
  }
  std::size_t kv_items() const { return items / group; }
  // query item b reads key/value item b mod kv_items (flash_shape's rule, written again)
  std::size_t kv_of(std::size_t b) const { return b % kv_items(); }
  bool sees(std::size_t i, std::size_t j) const { return !causal || k0 + (long long)j <= q0 + (long long)i; }
};
inline const std::vector<flash_case> kFlashCases = {
    {1, 1, 1, 1, 0, 0, false},     {1, 1, 1, 1, 0, 0, true},      {3, 37, 37, 16, 0, 0, false},
    {3, 37, 37, 16, 0, 0, true},   {2, 70, 70, 24, 0, 0, true},   {1, 130, 130, 64, 0, 0, true},
    {2, 97, 97, 80, 0, 0, false},  {2, 33, 97, 8, 64, 0, true},   {2, 40, 40, 12, 40, 0, true},
    {2, 40, 40, 12, 40, 40, true}, {2, 65, 129, 32, 128, 64, true},
    // grouped-query (6 query items on 2 kv items, ...) and multi-query (every item on one)
    {6, 37, 37, 16, 0, 0, false, 3}, {4, 70, 70, 24, 0, 0, true, 2},  {4, 33, 97, 8, 64, 0, true, 4},
    {8, 65, 129, 32, 128, 64, true, 4}, {3, 130, 130, 64, 0, 0, true, 3},
    // the head sizes the CUDA backend runs on the tensor cores in 16 bits (64, 128): tiles
    // cut mid-way, key blocks at offsets, groups
    {4, 129, 129, 64, 0, 0, false, 2},  {2, 97, 161, 128, 128, 64, true, 2}, {1, 200, 200, 128, 0, 0, true},
    {2, 77, 77, 64, 30, 0, true}};

// A 16-bit output of flash attention. The CUDA backend's tensor-core kernels round the
// probabilities (and the score gradients) to T before their products, as FlashAttention
// does, so an element may be a few of T's roundings u off rather than one: norm-wise
// within 3u, element-wise within 16u of the output's rms. Other types: check_act.
inline double rms_of(const std::vector<double>& v) {
  double ss = 0;
  for (double x : v) ss += x * x;
  return std::sqrt(ss / double(std::max<std::size_t>(v.size(), 1)));
}
template <class T>
void check_flash(const std::vector<T>& got, const std::vector<double>& ref, double floor, const std::string& what) {
  if constexpr (is_half<T>) {
    constexpr double u = std::is_same_v<T, bf16> ? 0x1p-8 : 0x1p-11;
    const double rms = rms_of(ref);
    check_close(got, ref, 3 * u, what + " (norm-wise)");
    check_near(got, ref, 0, 16 * u * rms + floor, what + " (element-wise)");
  } else {
    check_act(got, ref, floor, what);
  }
}

// Attention dropout's coordinates for a case: the call's first sample, first head, kv heads
// per sequence, features per head (>= k0 + k_len); rate 1/5, so 1/(1 − rate) = 1.25 exactly.
constexpr std::uint64_t kDropSeed = 0xd12, kDropStep = 4;
inline strata::backend::flash_dropout drop_of(const flash_case& c, const std::uint64_t* key) {
  return {.key = key, .site = 9, .sample0 = 3, .head0 = 5, .heads = c.kv_items() % 2 == 0 ? 2u : 1u,
          .stride = std::uint64_t(c.k0) + c.k_len + 7, .threshold = strata::dropout_threshold(1, 5), .scale = 1.25};
}
// The mask of query i, key j of item b, written again: item b is group member b / kv_items
// of kv item k = b mod kv_items, which is kv head k mod heads of sequence k / heads, so its
// query head is head0 + (k mod heads)·group + member; 1/(1 − rate) where kept, else 0.
inline double ref_drop(const flash_case& c, const strata::backend::flash_dropout& d, std::size_t b, std::size_t i,
                       std::size_t j) {
  const std::size_t k = c.kv_of(b), member = b / c.kv_items();
  const std::uint64_t head = d.head0 + (k % d.heads) * c.group + member;
  const bool keep = strata::dropout_keep(kDropSeed, kDropStep, d.site, d.sample0 + k / d.heads,
                                         std::uint64_t(c.q0) + i, head * d.stride + std::uint64_t(c.k0) + j,
                                         d.threshold);
  return keep ? d.scale : 0.0;
}
using drop_mask = std::function<double(std::size_t, std::size_t, std::size_t)>;  // (item, i, j); empty: none

// o[i] = Σ_j m_ij softmax_j(scale q_i·k_j) v_j over the keys i sees (m = 1 without
// dropout); lse[i] = log Σ_j exp(…), undropped.
struct flash_ref {
  std::vector<double> o, lse;
};
inline flash_ref ref_flash_forward(const flash_case& c, const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const drop_mask& mask = {}) {
  const double scale = c.shape().scale;
  flash_ref r{std::vector<double>(c.items * c.q_len * c.dh), std::vector<double>(c.items * c.q_len)};
  for (std::size_t b = 0; b < c.items; ++b)
    for (std::size_t i = 0, kb = c.kv_of(b); i < c.q_len; ++i) {
      std::vector<double> s(c.k_len, -INFINITY);
      double m = -INFINITY;
      for (std::size_t j = 0; j < c.k_len; ++j)
        if (c.sees(i, j)) {
          double d = 0;
          for (std::size_t x = 0; x < c.dh; ++x)
            d += q[(b * c.q_len + i) * c.dh + x] * k[(kb * c.k_len + j) * c.dh + x];
          s[j] = scale * d;
          m = std::max(m, s[j]);
        }
      double sum = 0;
      for (std::size_t j = 0; j < c.k_len; ++j) sum += c.sees(i, j) ? std::exp(s[j] - m) : 0.0;
      r.lse[b * c.q_len + i] = m + std::log(sum);
      for (std::size_t j = 0; j < c.k_len; ++j)
        if (c.sees(i, j)) {
          const double z = (mask ? mask(b, i, j) : 1.0) * std::exp(s[j] - m) / sum;
          for (std::size_t x = 0; x < c.dh; ++x)
            r.o[(b * c.q_len + i) * c.dh + x] += z * v[(kb * c.k_len + j) * c.dh + x];
        }
    }
  return r;
}

// The gradients with the forward's o (as the kernel has it) and lse; with dropout
// dv += m p g and ds = p (m dp − δ).
struct flash_grads {
  std::vector<double> dq, dk, dv;
};
inline flash_grads ref_flash_backward(const flash_case& c, const std::vector<double>& q, const std::vector<double>& k,
                                      const std::vector<double>& v, const std::vector<double>& o,
                                      const std::vector<double>& lse, const std::vector<double>& g,
                                      const drop_mask& mask = {}) {
  const double scale = c.shape().scale;
  flash_grads r{std::vector<double>(q.size()), std::vector<double>(k.size()), std::vector<double>(v.size())};
  for (std::size_t b = 0; b < c.items; ++b)
    for (std::size_t i = 0, kb = c.kv_of(b); i < c.q_len; ++i) {
      const double* qi = &q[(b * c.q_len + i) * c.dh];
      const double* gi = &g[(b * c.q_len + i) * c.dh];
      double delta = 0;
      for (std::size_t x = 0; x < c.dh; ++x) delta += gi[x] * o[(b * c.q_len + i) * c.dh + x];
      for (std::size_t j = 0; j < c.k_len; ++j) {
        if (!c.sees(i, j)) continue;
        const double* kj = &k[(kb * c.k_len + j) * c.dh];
        const double* vj = &v[(kb * c.k_len + j) * c.dh];
        double s = 0, dp = 0;
        for (std::size_t x = 0; x < c.dh; ++x) s += qi[x] * kj[x], dp += gi[x] * vj[x];
        const double m = mask ? mask(b, i, j) : 1.0;
        const double p = std::exp(scale * s - lse[b * c.q_len + i]), ds = p * (m * dp - delta);
        for (std::size_t x = 0; x < c.dh; ++x) {
          r.dv[(kb * c.k_len + j) * c.dh + x] += m * p * gi[x];  // summed over the group
          r.dq[(b * c.q_len + i) * c.dh + x] += scale * ds * kj[x];
          r.dk[(kb * c.k_len + j) * c.dh + x] += scale * ds * qi[x];
        }
      }
    }
  return r;
}

TEST_CASE_TEMPLATE("kernels: flash_attention_forward against naive float64 attention", T, float, double, bf16, f16) {
  using L = strata::stat_t<T>;
  queue_t q;
  rng g(740);
  for (const flash_case& c : kFlashCases) {
    const auto qv = g.uniform<T>(c.items * c.q_len * c.dh, -2, 2);
    const auto kv = g.uniform<T>(c.kv_items() * c.k_len * c.dh, -2, 2);
    const auto vv = g.uniform<T>(c.kv_items() * c.k_len * c.dh);
    const flash_ref ref = ref_flash_forward(c, widen(qv), widen(kv), widen(vv));
    auto dq = to_dev(q, qv), dk = to_dev(q, kv), dv = to_dev(q, vv);
    auto o = poisoned<T>(q, ref.o.size());
    auto lse = poisoned<L>(q, ref.lse.size());
    flash_attention_forward(q, c.shape(), static_cast<const T*>(dq.data()), static_cast<const T*>(dk.data()),
                            static_cast<const T*>(dv.data()), o.data(), lse.data());
    check_flash(to_host(q, o.data(), ref.o.size()), ref.o, 1e-5, "o " + c.name());
    check_stat<T>(to_host(q, lse.data(), ref.lse.size()), ref.lse, 1e-5, "lse " + c.name());
  }
}

TEST_CASE_TEMPLATE("kernels: flash_attention_backward against naive float64 attention", T, float, double, bf16, f16) {
  using L = strata::stat_t<T>;
  queue_t q;
  rng g(750);
  for (const flash_case& c : kFlashCases) {
    const auto qv = g.uniform<T>(c.items * c.q_len * c.dh, -2, 2);
    const auto kv = g.uniform<T>(c.kv_items() * c.k_len * c.dh, -2, 2);
    const auto vv = g.uniform<T>(c.kv_items() * c.k_len * c.dh);
    const auto gv = g.uniform<T>(c.items * c.q_len * c.dh);
    auto dq = to_dev(q, qv), dk = to_dev(q, kv), dv = to_dev(q, vv), dg = to_dev(q, gv);
    auto o = poisoned<T>(q, qv.size());
    auto lse = poisoned<L>(q, c.items * c.q_len);
    flash_attention_forward(q, c.shape(), static_cast<const T*>(dq.data()), static_cast<const T*>(dk.data()),
                            static_cast<const T*>(dv.data()), o.data(), lse.data());
    // the reference takes the forward's o and lse as the kernel does (rounded to T and L)
    const auto oh = widen(to_host(q, o.data(), qv.size()));
    const auto lh = widen(to_host(q, lse.data(), c.items * c.q_len));
    const flash_grads ref = ref_flash_backward(c, widen(qv), widen(kv), widen(vv), oh, lh, widen(gv));
    auto gq = poisoned<T>(q, qv.size()), gk = poisoned<T>(q, kv.size()), gvv = poisoned<T>(q, vv.size());
    flash_attention_backward(q, c.shape(), static_cast<const T*>(dq.data()), static_cast<const T*>(dk.data()),
                             static_cast<const T*>(dv.data()), static_cast<const T*>(o.data()),
                             static_cast<const T*>(dg.data()), static_cast<const L*>(lse.data()), gq.data(), gk.data(),
                             gvv.data());
    // 16-bit: ds = p (dp − δ) cancels in float; the floor covers its rounding
    check_flash(to_host(q, gq.data(), qv.size()), ref.dq, 1e-4, "dq " + c.name());
    check_flash(to_host(q, gk.data(), kv.size()), ref.dk, 1e-4, "dk " + c.name());
    check_flash(to_host(q, gvv.data(), vv.size()), ref.dv, 1e-4, "dv " + c.name());
  }
}

TEST_CASE_TEMPLATE("kernels: flash attention with dropout against naive float64 attention with the same mask", T,
                   float, double, bf16, f16) {
  using L = strata::stat_t<T>;
  queue_t q;
  rng g(755);
  const auto key = to_dev(q, std::vector<std::uint64_t>{strata::dropout_step_key(kDropSeed, kDropStep)});
  std::size_t dropped = 0, seen = 0;
  for (const flash_case& c : kFlashCases) {
    strata::backend::flash_shape f = c.shape();
    f.drop = drop_of(c, key.data());
    const drop_mask mask = [&](std::size_t b, std::size_t i, std::size_t j) { return ref_drop(c, f.drop, b, i, j); };
    for (std::size_t b = 0; b < c.items; ++b)
      for (std::size_t i = 0; i < c.q_len; ++i)
        for (std::size_t j = 0; j < c.k_len; ++j) seen += c.sees(i, j), dropped += c.sees(i, j) && mask(b, i, j) == 0;
    const auto qv = g.uniform<T>(c.items * c.q_len * c.dh, -2, 2);
    const auto kv = g.uniform<T>(c.kv_items() * c.k_len * c.dh, -2, 2);
    const auto vv = g.uniform<T>(c.kv_items() * c.k_len * c.dh);
    const auto gv = g.uniform<T>(c.items * c.q_len * c.dh);
    const flash_ref ref = ref_flash_forward(c, widen(qv), widen(kv), widen(vv), mask);
    auto dq = to_dev(q, qv), dk = to_dev(q, kv), dv = to_dev(q, vv), dg = to_dev(q, gv);
    auto o = poisoned<T>(q, ref.o.size());
    auto lse = poisoned<L>(q, ref.lse.size());
    flash_attention_forward(q, f, static_cast<const T*>(dq.data()), static_cast<const T*>(dk.data()),
                            static_cast<const T*>(dv.data()), o.data(), lse.data());
    const auto oh = to_host(q, o.data(), ref.o.size());
    check_flash(oh, ref.o, 1e-5, "dropped o " + c.name());
    check_stat<T>(to_host(q, lse.data(), ref.lse.size()), ref.lse, 1e-5, "undropped lse " + c.name());
    // the mask matters: o is not the undropped attention's
    CHECK(rel_err(widen(oh), ref_flash_forward(c, widen(qv), widen(kv), widen(vv)).o) > 1e-2);

    const flash_grads grad = ref_flash_backward(c, widen(qv), widen(kv), widen(vv), widen(oh),
                                                widen(to_host(q, lse.data(), ref.lse.size())), widen(gv), mask);
    auto gq = poisoned<T>(q, qv.size()), gk = poisoned<T>(q, kv.size()), gvv = poisoned<T>(q, vv.size());
    flash_attention_backward(q, f, static_cast<const T*>(dq.data()), static_cast<const T*>(dk.data()),
                             static_cast<const T*>(dv.data()), static_cast<const T*>(o.data()),
                             static_cast<const T*>(dg.data()), static_cast<const L*>(lse.data()), gq.data(), gk.data(),
                             gvv.data());
    // one key: ds = p (m do·v − do·o) is 0, dq and dk the rounding of that cancellation
    if (c.k_len > 1) {
      check_flash(to_host(q, gq.data(), qv.size()), grad.dq, 1e-4, "dropped dq " + c.name());
      check_flash(to_host(q, gk.data(), kv.size()), grad.dk, 1e-4, "dropped dk " + c.name());
    }
    check_flash(to_host(q, gvv.data(), vv.size()), grad.dv, 1e-4, "dropped dv " + c.name());
  }
  // the mask drops about a fifth of the probabilities the queries see
  INFO("dropped " << dropped << " of " << seen);
  CHECK(std::abs(double(dropped) / double(seen) - 0.2) < 0.02);
}

// attention_merge: a key sequence cut in two blocks (keys [0, cut) and [cut, k_len), the second
// at k0 + cut), each block's flash attention alone, merged, against the naive attention over
// every key — what a ring of context-parallel attention computes step by step.
template <class T>
std::vector<T> key_rows(const std::vector<T>& x, const flash_case& c, std::size_t from, std::size_t to) {
  std::vector<T> out;
  for (std::size_t k = 0; k < c.kv_items(); ++k)
    out.insert(out.end(), x.begin() + long((k * c.k_len + from) * c.dh), x.begin() + long((k * c.k_len + to) * c.dh));
  return out;
}
TEST_CASE_TEMPLATE("kernels: attention_merge of two key blocks equals attention over both (naive float64)", T, float,
                   double, bf16, f16) {
  using L = strata::stat_t<T>;
  queue_t q;
  rng g(760);
  int merged = 0;
  for (const flash_case& c : kFlashCases) {
    // a causal query block must see a key of each block: the second starts at or before q0
    if (c.k_len < 2 || (c.causal && c.q0 <= c.k0)) continue;
    const std::size_t cut = c.causal ? std::min<std::size_t>(std::size_t(c.q0 - c.k0), c.k_len - 1) : c.k_len / 2;
    const auto qv = g.uniform<T>(c.items * c.q_len * c.dh, -2, 2);
    const auto kv = g.uniform<T>(c.kv_items() * c.k_len * c.dh, -2, 2);
    const auto vv = g.uniform<T>(c.kv_items() * c.k_len * c.dh);
    const flash_ref ref = ref_flash_forward(c, widen(qv), widen(kv), widen(vv));
    flash_case a = c, b = c;
    a.k_len = cut;
    b.k_len = c.k_len - cut;
    b.k0 = c.k0 + static_cast<long long>(cut);
    auto dq = to_dev(q, qv);
    auto ka = to_dev(q, key_rows(kv, c, 0, cut)), va = to_dev(q, key_rows(vv, c, 0, cut));
    auto kb = to_dev(q, key_rows(kv, c, cut, c.k_len)), vb = to_dev(q, key_rows(vv, c, cut, c.k_len));
    auto o = poisoned<T>(q, ref.o.size()), ob = poisoned<T>(q, ref.o.size());
    auto lse = poisoned<L>(q, ref.lse.size()), lseb = poisoned<L>(q, ref.lse.size());
    flash_attention_forward(q, a.shape(), static_cast<const T*>(dq.data()), static_cast<const T*>(ka.data()),
                            static_cast<const T*>(va.data()), o.data(), lse.data());
    flash_attention_forward(q, b.shape(), static_cast<const T*>(dq.data()), static_cast<const T*>(kb.data()),
                            static_cast<const T*>(vb.data()), ob.data(), lseb.data());
    const auto oa_h = widen(to_host(q, o.data(), ref.o.size())), ob_h = widen(to_host(q, ob.data(), ref.o.size()));
    attention_merge(q, c.items * c.q_len, c.dh, o.data(), lse.data(), static_cast<const T*>(ob.data()),
                    static_cast<const L*>(lseb.data()));
    if constexpr (sizeof(T) == 2) {
      // 16-bit partials are rounded to T before the merge: each element within two roundings
      // of each partial (weights <= 1) and of the result (u = 2^-8 bf16, 2^-11 f16), plus the
      // partials' own error (check_flash's element-wise bound)
      const double u = std::is_same_v<T, bf16> ? 0x1p-8 : 0x1p-11;
      const double rms = rms_of(ref.o);
      check_each(
          to_host(q, o.data(), ref.o.size()), ref.o,
          [&](std::size_t i, double got, double r) {
            return std::abs(got - r) <= 2 * u * (std::abs(oa_h[i]) + std::abs(ob_h[i]) + std::abs(r)) +
                                            16 * u * rms + 1e-4;
          },
          "merged o " + c.name());
    } else {
      check_act(to_host(q, o.data(), ref.o.size()), ref.o, 1e-5, "merged o " + c.name());
    }
    check_stat<T>(to_host(q, lse.data(), ref.lse.size()), ref.lse, 1e-5, "merged lse " + c.name());
    ++merged;
  }
  CHECK(merged >= 8);
  // a row that has seen no key yet (lse −inf, o 0) takes the other side exactly
  const std::size_t rows = 3, dh = 5;
  const auto other = g.uniform<T>(rows * dh, -2, 2);
  auto o = to_dev(q, std::vector<T>(rows * dh, T(0.0f))), ob = to_dev(q, other);
  auto lse = to_dev(q, std::vector<L>(rows, -std::numeric_limits<L>::infinity()));
  auto lseb = to_dev(q, std::vector<L>{L(0.5), L(-3), L(12)});
  attention_merge(q, rows, dh, o.data(), lse.data(), static_cast<const T*>(ob.data()),
                  static_cast<const L*>(lseb.data()));
  CHECK(widen(to_host(q, o.data(), rows * dh)) == widen(other));
  CHECK(widen(to_host(q, lse.data(), rows)) == std::vector<double>{0.5, -3, 12});
}

TEST_CASE("kernels: flash attention's backward matches finite differences (double), with and without dropout") {
  queue_t q;
  rng g(760);
  const auto key = to_dev(q, std::vector<std::uint64_t>{strata::dropout_step_key(kDropSeed, kDropStep)});
  for (const flash_case& c : {flash_case{2, 9, 9, 3, 0, 0, false}, flash_case{2, 9, 9, 3, 0, 0, true},
                              flash_case{1, 5, 11, 4, 6, 0, true}, flash_case{4, 9, 9, 3, 0, 0, true, 2},
                              flash_case{3, 5, 11, 4, 6, 0, false, 3}})
    for (const bool drop : {false, true}) {
      CAPTURE(c.name());
      CAPTURE(drop);
      strata::backend::flash_shape f = c.shape();
      if (drop) f.drop = drop_of(c, key.data());  // a fixed mask: the forward is smooth in q, k, v
      std::vector<double> qv = g.uniform<double>(c.items * c.q_len * c.dh, -2, 2);
      std::vector<double> kv = g.uniform<double>(c.kv_items() * c.k_len * c.dh, -2, 2);
      std::vector<double> vv = g.uniform<double>(c.kv_items() * c.k_len * c.dh);
      const std::vector<double> G = g.uniform<double>(qv.size());
      auto forward = [&](std::vector<double>* lse_out = nullptr) {
        auto dq = to_dev(q, qv), dk = to_dev(q, kv), dv = to_dev(q, vv);
        auto o = poisoned<double>(q, qv.size());
        auto lse = poisoned<double>(q, c.items * c.q_len);
        flash_attention_forward(q, f, static_cast<const double*>(dq.data()), static_cast<const double*>(dk.data()),
                                static_cast<const double*>(dv.data()), o.data(), lse.data());
        if (lse_out) *lse_out = to_host(q, lse.data(), c.items * c.q_len);
        return to_host(q, o.data(), qv.size());
      };
      auto loss = [&] { return dot(G, forward()); };
      std::vector<double> lse;
      const auto o = forward(&lse);
      auto dq = to_dev(q, qv), dk = to_dev(q, kv), dv = to_dev(q, vv), dG = to_dev(q, G), dO = to_dev(q, o),
           dL = to_dev(q, lse);
      auto gq = poisoned<double>(q, qv.size()), gk = poisoned<double>(q, kv.size()),
           gv = poisoned<double>(q, vv.size());
      flash_attention_backward(q, f, static_cast<const double*>(dq.data()), static_cast<const double*>(dk.data()),
                               static_cast<const double*>(dv.data()), static_cast<const double*>(dO.data()),
                               static_cast<const double*>(dG.data()), static_cast<const double*>(dL.data()), gq.data(),
                               gk.data(), gv.data());
      check_close(to_host(q, gq.data(), qv.size()), fd_grad(qv, loss), 1e-6, "dq");
      check_close(to_host(q, gk.data(), kv.size()), fd_grad(kv, loss), 1e-6, "dk");
      check_close(to_host(q, gv.data(), vv.size()), fd_grad(vv, loss), 1e-6, "dv");
    }
}

// x [items, seq, dh] rotated pair by pair: (x_i, x_{i+h}) by θ = (pos0 + t) · base^(−2i/dh).
inline std::vector<double> ref_rotary(std::size_t items, std::size_t seq, std::size_t dh, long long pos0, double base,
                                      double sign, std::vector<double> x) {
  const std::size_t h = dh / 2;
  for (std::size_t r = 0; r < items * seq; ++r)
    for (std::size_t i = 0; i < h; ++i) {
      const double th = sign * double(pos0 + static_cast<long long>(r % seq)) * std::pow(base, -2.0 * double(i) / double(dh));
      const double a = x[r * dh + i], b = x[r * dh + i + h];
      x[r * dh + i] = a * std::cos(th) - b * std::sin(th);
      x[r * dh + i + h] = b * std::cos(th) + a * std::sin(th);
    }
  return x;
}

TEST_CASE_TEMPLATE("kernels: rotary_embedding against float64 rotations, and its inverse", T, float, double, bf16,
                   f16) {
  queue_t q;
  rng g(770);
  struct shape {
    std::size_t items, seq, dh;
    long long pos0;
    double base;
  };
  for (const shape& sh : {shape{1, 1, 2, 0, 10000.0}, shape{3, 17, 8, 0, 10000.0}, shape{2, 9, 64, 1000, 500000.0},
                          shape{4, 33, 6, 5, 10.0}}) {
    const std::size_t n = sh.items * sh.seq * sh.dh;
    const std::string what = std::to_string(sh.items) + "x" + std::to_string(sh.seq) + "x" + std::to_string(sh.dh) +
                             " at " + std::to_string(sh.pos0);
    const auto x = g.uniform<T>(n, -2, 2);
    auto d = to_dev(q, x);
    rotary_embedding(q, sh.items, sh.seq, sh.dh, sh.pos0, sh.base, false, d.data());
    const auto got = to_host(q, d.data(), n);
    check_act(got, ref_rotary(sh.items, sh.seq, sh.dh, sh.pos0, sh.base, 1.0, widen(x)), 1e-6, "rotated " + what);
    // the inverse is the transpose: back to x (up to the rounding of the rotated values)
    rotary_embedding(q, sh.items, sh.seq, sh.dh, sh.pos0, sh.base, true, d.data());
    check_act(to_host(q, d.data(), n), ref_rotary(sh.items, sh.seq, sh.dh, sh.pos0, sh.base, -1.0, widen(got)), 1e-6,
              "inverse " + what);
  }
  auto d = to_dev(q, g.uniform<T>(6));
  CHECK_THROWS(rotary_embedding(q, 1, 2, 3, 0, 10000.0, false, d.data()));  // dh odd
}

TEST_CASE("kernels: flash attention is stable for huge scores and refuses a causal query block before its keys, "
          "and a group that does not divide the items") {
  queue_t q;
  // one item, 2 queries, 2 keys, dh 1: scores of ±3000 (scale 1)
  strata::backend::flash_shape f{.items = 1, .q_len = 2, .k_len = 2, .dh = 1, .scale = 1.0, .causal = false};
  const std::vector<float> qv = {60.f, -60.f}, kv = {50.f, 49.9f}, vv = {1.f, 3.f};
  auto dq = to_dev(q, qv), dk = to_dev(q, kv), dv = to_dev(q, vv);
  auto o = poisoned<float>(q, 2);
  auto lse = poisoned<float>(q, 2);
  flash_attention_forward(q, f, static_cast<const float*>(dq.data()), static_cast<const float*>(dk.data()),
                          static_cast<const float*>(dv.data()), o.data(), lse.data());
  const double w0 = 1 / (1 + std::exp(60.0 * (49.9 - 50.0))), w1 = 1 / (1 + std::exp(-60.0 * (49.9 - 50.0)));
  check_close(to_host(q, o.data(), 2), {w0 * 1 + (1 - w0) * 3, w1 * 1 + (1 - w1) * 3}, 1e-5, "huge scores");
  f.causal = true;
  f.q0 = 0;
  f.k0 = 1;
  CHECK_THROWS(flash_attention_forward(q, f, static_cast<const float*>(dq.data()), static_cast<const float*>(dk.data()),
                                       static_cast<const float*>(dv.data()), o.data(), lse.data()));
  f = {.items = 3, .group = 2, .q_len = 2, .k_len = 2, .dh = 1};  // a group must divide the items
  CHECK_THROWS(flash_attention_forward(q, f, static_cast<const float*>(dq.data()), static_cast<const float*>(dk.data()),
                                       static_cast<const float*>(dv.data()), o.data(), lse.data()));
}

}  // namespace kernel_suite
