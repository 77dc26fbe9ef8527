#pragma once
// strata host backend: float convolutions on oneDNN (Debian libdnnl-dev), compiled in when
// the strata::dnnl component defines STRATA_WITH_DNNL; host/convolution.hpp's conv2d_*
// call it. Why: oneDNN's JIT convolutions on NHWC images beat im2col + GEMM about 1.3-2×
// on ResNet-50's shapes (bench/results/resnet50_*). oneDNN has no float64 convolution, so
// double (the tests' reference) and bf16 keep the im2col path.
//
// Layouts: images stay NHWC (strata's); oneDNN picks its own blocked layout for the filters
// (`any`: a plain OHWI = KRSC filter selects its reference implementation, 100-500× slower),
// so each call reorders the filters into it, and the backward's filter gradient back, summed
// into the KRSC gradient (strata accumulates gradients over micro-batches). Both live in a
// per-thread workspace with oneDNN's scratchpad (user mode): the largest filter in oneDNN's
// layout plus a scratchpad, outside the plan's buffers, grown on demand and kept (and, on
// the calling thread, one filter gradient per part).
//
// Threads: with at least as many images as threads, the images are split over the queue's
// threads, each running oneDNN on its part with one OpenMP thread (the filter gradient: a
// part each, summed in part order). Left to its OpenMP pool instead, oneDNN's worker spins
// for milliseconds after every call against strata's own threads running the next kernel
// (libgomp's default wait policy): a ResNet-50 step 10-15% slower on 2 cores. With fewer
// images than threads: one call on the caller's thread with the queue's threads as its
// OpenMP team. oneDNN fixes a primitive's thread count when it is made, so the count is part
// of the cache key. Results depend on oneDNN's summation order (per ISA) and on the thread
// count, not on which thread runs which part (host/launch.hpp's stronger guarantee holds for
// the im2col path). STRATA_WITH_DNNL must be the same in every translation unit of a program
// (it changes inline definitions); CMake's strata::dnnl target sets it per target.
#if defined(STRATA_WITH_DNNL)
#include <dlfcn.h>

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "strata/backend/dispatch.hpp"
#include "strata/backend/host/host.hpp"
#include "strata/core/conv_math.hpp"

namespace strata::backend::host::detail::dnnl_conv {

using dnnl::memory;
using format = memory::format_tag;

// omp_set_num_threads of the libgomp libdnnl loads: looked up rather than linked, so the
// component adds no OpenMP flags to its users; in libgomp itself, not the first definition
// in the process (an application's `clang -fopenmp` brings LLVM's libomp, which oneDNN
// does not read).
inline void set_threads(unsigned n) {
  using setter = void (*)(int);
  static const setter set = [] {
    void* gomp = ::dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return reinterpret_cast<setter>(::dlsym(gomp ? gomp : RTLD_DEFAULT, "omp_set_num_threads"));
  }();
  if (set) set(static_cast<int>(n));
}

enum class pass : int { forward, backward_data, backward_weights };

// A convolution problem: the cache key of its primitives.
struct problem {
  pass kind;
  unsigned threads;  // OpenMP threads: fixed in a primitive when it is made
  long long samples, H, W, C, O, KH, KW, stride, pad, OH, OW;
  bool bias;
  auto operator<=>(const problem&) const = default;
};

struct primitives {
  dnnl::primitive conv;
  memory::desc filters;  // the filters (or their gradient) in the layout the convolution chose
  memory::desc conv_scratch;
  bool reorder = false;  // that layout is not KRSC
  dnnl::primitive reorder_prim;  // KRSC → filters (forward, backward data); filters +→ KRSC (backward weights)
  memory::desc reorder_scratch;
  std::size_t filter_bytes = 0, scratch_bytes = 0;
};

class runner {
 public:
  static runner& of_this_thread() {
    thread_local runner r;
    return r;
  }

  void forward(unsigned threads, std::size_t samples, const conv_geometry& g, std::size_t out_c, const float* x,
               const float* w, const float* bias, float* y) {
    run("conv2d_forward", [&] {
      const auto [p, k, ws] = begin(pass::forward, threads, samples, g, out_c, bias != nullptr);
      memory wk = user_filters(p, w), wc = conv_filters(k, wk, ws);
      memory src(images(p), eng_, const_cast<float*>(x)), dst(outputs(p), eng_, y);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wc}, {DNNL_ARG_DST, dst},
                                           {DNNL_ARG_SCRATCHPAD, scratch(k.conv_scratch, ws, k)}};
      if (bias) args.emplace(DNNL_ARG_BIAS, memory(biases(p), eng_, const_cast<float*>(bias)));
      k.conv.execute(stream_, args);
      stream_.wait();
    });
  }

  void backward_data(unsigned threads, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                     const float* dy, const float* w, float* dx) {
    run("conv2d_backward_data", [&] {
      const auto [p, k, ws] = begin(pass::backward_data, threads, samples, g, out_c, false);
      memory wk = user_filters(p, w), wc = conv_filters(k, wk, ws);
      memory ddst(outputs(p), eng_, const_cast<float*>(dy)), dsrc(images(p), eng_, dx);
      k.conv.execute(stream_, {{DNNL_ARG_DIFF_DST, ddst},
                               {DNNL_ARG_WEIGHTS, wc},
                               {DNNL_ARG_DIFF_SRC, dsrc},
                               {DNNL_ARG_SCRATCHPAD, scratch(k.conv_scratch, ws, k)}});
      stream_.wait();
    });
  }

  // dw (KRSC) += the filter gradient
  void backward_weights(unsigned threads, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                        const float* x, const float* dy, float* dw) {
    run("conv2d_backward_weights", [&] {
      const auto [p, k, ws] = begin(pass::backward_weights, threads, samples, g, out_c, false);
      memory src(images(p), eng_, const_cast<float*>(x)), ddst(outputs(p), eng_, const_cast<float*>(dy));
      memory grad(k.filters, eng_, ws), user = user_filters(p, dw);
      k.conv.execute(stream_, {{DNNL_ARG_SRC, src},
                               {DNNL_ARG_DIFF_DST, ddst},
                               {DNNL_ARG_DIFF_WEIGHTS, grad},
                               {DNNL_ARG_SCRATCHPAD, scratch(k.conv_scratch, ws, k)}});
      k.reorder_prim.execute(stream_, {{DNNL_ARG_FROM, grad},
                                       {DNNL_ARG_TO, user},
                                       {DNNL_ARG_SCRATCHPAD, scratch(k.reorder_scratch, ws, k)}});
      stream_.wait();
    });
  }

  // Bytes of the workspace held now (for the docs' memory statement and the tests).
  std::size_t workspace_bytes() const noexcept { return capacity_ + partials_.size() * sizeof(float); }

  // The filter gradients of the parts (backward_weights split over threads), zeroed.
  float* partials(std::size_t values) {
    if (partials_.size() < values) partials_.resize(values);
    std::fill_n(partials_.data(), values, 0.0f);
    return partials_.data();
  }

 private:
  template <class F>
  static void run(const char* kernel, F&& f) {
    try {
      f();
    } catch (const dnnl::error& e) {
      backend::detail::fail(kernel, std::string("oneDNN: ") + e.what());
    }
  }

  // One call's problem, its primitives (made on first use) and the workspace they run in.
  struct call {
    problem p;
    const primitives& k;
    std::byte* ws;
  };
  call begin(pass kind, unsigned threads, std::size_t samples, const conv_geometry& g, std::size_t out_c, bool bias) {
    set_threads(threads);  // before get(): a new primitive takes the count in force
    const problem p{kind,  threads, static_cast<long long>(samples), g.H, g.W, g.C, static_cast<long long>(out_c),
                    g.KH,  g.KW,    g.stride, g.pad, g.OH, g.OW, bias};
    const primitives& k = get(p);
    return {p, k, workspace(k)};
  }

  // Logical dims in oneDNN's order (N, C, H, W / O, I, KH, KW), laid out as strata's.
  static memory::desc images(const problem& p) {
    return {{p.samples, p.C, p.H, p.W}, memory::data_type::f32, format::nhwc};
  }
  static memory::desc outputs(const problem& p) {
    return {{p.samples, p.O, p.OH, p.OW}, memory::data_type::f32, format::nhwc};
  }
  static memory::desc biases(const problem& p) { return {{p.O}, memory::data_type::f32, format::x}; }
  static memory::desc filters(const problem& p, format f = format::ohwi) {  // ohwi = KRSC
    return {{p.O, p.C, p.KH, p.KW}, memory::data_type::f32, f};
  }

  memory user_filters(const problem& p, const float* w) { return memory(filters(p), eng_, const_cast<float*>(w)); }

  // The filters in the convolution's layout: reordered into the workspace's front when it is not KRSC.
  memory conv_filters(const primitives& k, memory& user, std::byte* ws) {
    if (!k.reorder) return user;
    memory wc(k.filters, eng_, ws);
    k.reorder_prim.execute(stream_, {{DNNL_ARG_FROM, user},
                                     {DNNL_ARG_TO, wc},
                                     {DNNL_ARG_SCRATCHPAD, scratch(k.reorder_scratch, ws, k)}});
    return wc;
  }

  memory scratch(const memory::desc& d, std::byte* ws, const primitives& k) {
    return memory(d, eng_, ws + k.filter_bytes);
  }

  static std::size_t round_up(std::size_t b) { return (b + 63) / 64 * 64; }

  const primitives& get(const problem& p) {
    auto it = cache_.find(p);
    if (it == cache_.end()) it = cache_.emplace(p, make(p)).first;
    return it->second;
  }

  primitives make(const problem& p) const {
    using namespace dnnl;
    primitive_attr attr;
    attr.set_scratchpad_mode(scratchpad_mode::user);
    const memory::dims strides{p.stride, p.stride}, pads{p.pad, p.pad};
    const memory::desc x = images(p), y = outputs(p), w_any = filters(p, format::any), krsc = filters(p);
    // the forward problem: the backward passes' hint
    const convolution_forward::primitive_desc fwd(
        p.bias ? convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, x, w_any,
                                           biases(p), y, strides, pads, pads)
               : convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, x, w_any, y,
                                           strides, pads, pads),
        attr, eng_);
    primitives k;
    if (p.kind == pass::forward) {
      k.conv = convolution_forward(fwd);
      k.filters = fwd.weights_desc();
      k.conv_scratch = fwd.scratchpad_desc();
    } else if (p.kind == pass::backward_data) {
      const convolution_backward_data::primitive_desc bwd(
          convolution_backward_data::desc(algorithm::convolution_direct, x, w_any, y, strides, pads, pads), attr, eng_,
          fwd);
      k.conv = convolution_backward_data(bwd);
      k.filters = bwd.weights_desc();
      k.conv_scratch = bwd.scratchpad_desc();
    } else {
      const convolution_backward_weights::primitive_desc bwd(
          convolution_backward_weights::desc(algorithm::convolution_direct, x, w_any, y, strides, pads, pads), attr,
          eng_, fwd);
      k.conv = convolution_backward_weights(bwd);
      k.filters = bwd.diff_weights_desc();
      k.conv_scratch = bwd.scratchpad_desc();
    }
    primitive_attr rattr;
    rattr.set_scratchpad_mode(scratchpad_mode::user);
    if (p.kind == pass::backward_weights) {
      // always through the workspace: the convolution overwrites, strata accumulates
      post_ops sum;
      sum.append_sum(1.0f);
      rattr.set_post_ops(sum);
      const reorder::primitive_desc r(eng_, k.filters, eng_, krsc, rattr);
      k.reorder_prim = reorder(r);
      k.reorder_scratch = r.scratchpad_desc();
      k.reorder = true;
    } else if (k.filters != krsc) {
      const reorder::primitive_desc r(eng_, krsc, eng_, k.filters, rattr);
      k.reorder_prim = reorder(r);
      k.reorder_scratch = r.scratchpad_desc();
      k.reorder = true;
    }
    k.filter_bytes = k.reorder ? round_up(k.filters.get_size()) : 0;
    k.scratch_bytes = std::max(k.conv_scratch.get_size(), k.reorder ? k.reorder_scratch.get_size() : std::size_t(0));
    return k;
  }

  std::byte* workspace(const primitives& k) {
    const std::size_t need = k.filter_bytes + round_up(k.scratch_bytes) + 64;
    if (need > capacity_) {
      buffer_.reset(static_cast<std::byte*>(::operator new(need, std::align_val_t(64))));
      capacity_ = need;
    }
    return buffer_.get();
  }

  struct aligned_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t(64)); }
  };

  dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{eng_};
  std::map<problem, primitives> cache_;
  std::unique_ptr<std::byte, aligned_delete> buffer_;
  std::size_t capacity_ = 0;
  std::vector<float> partials_;
};

// The entries host/convolution.hpp calls: the images split into parts over q's threads.
// f(first image, images, OpenMP threads, part) runs one part.
inline std::size_t parts_of(const queue& q, std::size_t samples) { return samples >= q.threads() ? q.threads() : 1; }

template <class F>
void over_parts(queue& q, std::size_t samples, F&& f) {
  const std::size_t parts = parts_of(q, samples);
  if (parts <= 1) return f(std::size_t(0), samples, q.threads(), std::size_t(0));
  q.parallel_for(parts, [&](std::size_t p) {
    const std::size_t lo = samples * p / parts, hi = samples * (p + 1) / parts;
    f(lo, hi - lo, 1u, p);
  });
}

inline void forward(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c, const float* x,
                    const float* w, const float* bias, float* y) {
  const std::size_t in = g.in_pixels() * std::size_t(g.C), out = g.out_pixels() * out_c;
  over_parts(q, samples, [&](std::size_t s, std::size_t n, unsigned threads, std::size_t) {
    runner::of_this_thread().forward(threads, n, g, out_c, x + s * in, w, bias, y + s * out);
  });
}

inline void backward_data(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                          const float* dy, const float* w, float* dx) {
  const std::size_t in = g.in_pixels() * std::size_t(g.C), out = g.out_pixels() * out_c;
  over_parts(q, samples, [&](std::size_t s, std::size_t n, unsigned threads, std::size_t) {
    runner::of_this_thread().backward_data(threads, n, g, out_c, dy + s * out, w, dx + s * in);
  });
}

inline void backward_weights(queue& q, std::size_t samples, const conv_geometry& g, std::size_t out_c,
                             const float* x, const float* dy, float* dw) {
  const std::size_t in = g.in_pixels() * std::size_t(g.C), out = g.out_pixels() * out_c;
  const std::size_t parts = parts_of(q, samples), filter = out_c * g.patch();
  if (parts <= 1) return runner::of_this_thread().backward_weights(q.threads(), samples, g, out_c, x, dy, dw);
  float* partial = runner::of_this_thread().partials(parts * filter);
  over_parts(q, samples, [&](std::size_t s, std::size_t n, unsigned threads, std::size_t p) {
    runner::of_this_thread().backward_weights(threads, n, g, out_c, x + s * in, dy + s * out, partial + p * filter);
  });
  // dw += the parts' sum, in part order (deterministic for a thread count)
  const std::size_t block = 4096, blocks = (filter + block - 1) / block;
  q.parallel_for(blocks, [&](std::size_t b) {
    const std::size_t lo = b * block, hi = std::min(filter, lo + block);
    for (std::size_t p = 0; p < parts; ++p) {
      const float* part = partial + p * filter;
      for (std::size_t i = lo; i < hi; ++i) dw[i] += part[i];
    }
  });
}

}  // namespace strata::backend::host::detail::dnnl_conv
#endif
