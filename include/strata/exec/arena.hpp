#pragma once
// The activation arena of one device: every buffer of the lowered buffer plan
// (plan/lower.hpp) for this device's stage, in three allocations (compute type,
// statistics type, int32 ids) of exactly the planned size, made once. A buffer is
// found from its pool, its part and a slot.
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "strata/core/precision.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

// Which slot of each pool an action uses (lower::slot_set).
using slot_set = lower::slot_set;

template <class P, class Backend, class T>
class activation_arena {
  using L = lower::lowered<P>;
  using S = stat_t<T>;
  static constexpr int NP = P::num_parts;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

 public:
  explicit activation_arena(int stage) : stage_(stage) {
    long long v = 0, s = 0, i = 0;
    for (int p = 0; p < NP; ++p) {
      const lower::part_plan& pp = L::tables.parts[idx(p)];
      if (pp.stage != stage_) continue;
      base& b = bases_[idx(p)];
      b.act_v = v, b.act_s = s, b.act_i = i;
      const long long act = L::slots(sched::pool_kind::act, p);
      v += act * pp.act_values, s += act * pp.act_stats, i += act * pp.act_ids;
      b.exit_v = v;
      v += L::slots(sched::pool_kind::exit, p) * pp.exit_values;
      b.gout_v = v;
      v += L::slots(sched::pool_kind::gout, p) * pp.gout_values;
      b.gin_v = v;
      v += L::slots(sched::pool_kind::gin, p) * pp.gin_values;
    }
    const lower::work_layout& w = L::tables.work[idx(stage_)];
    work_v_ = v, work_s_ = s, work_i_ = i;
    v += w.values(), s += w.stats(), i += w.ids();
    values_ = Backend::template allocate<T>(static_cast<std::size_t>(v > 0 ? v : 1));
    stats_ = Backend::template allocate<S>(static_cast<std::size_t>(s > 0 ? s : 1));
    ids_ = Backend::template allocate<std::int32_t>(static_cast<std::size_t>(i > 0 ? i : 1));
    bytes_ = v * static_cast<long long>(sizeof(T)) + s * static_cast<long long>(sizeof(S)) + i * 4;
  }

  // Exactly P::activation_arena_bytes(stage) for T = the plan's element type.
  long long bytes() const { return bytes_; }

  // The buffer `b` as seen by an instruction of part `p` with slots `s`.
  T* values(const lower::buf& b, int p, const slot_set& s) { return b.empty() ? nullptr : values_.data() + offset(b, p, s); }
  S* stats(const lower::buf& b, int p, const slot_set& s) { return b.empty() ? nullptr : stats_.data() + offset(b, p, s); }
  std::int32_t* ids(const lower::buf& b, int p, const slot_set& s) {
    return b.empty() ? nullptr : ids_.data() + offset(b, p, s);
  }
  // A message buffer of part p at a slot (sends and receives).
  T* message(const lower::buf& b, int p, int slot) { return values(b, p, slot_set{slot, slot, slot}); }

 private:
  struct base {
    long long act_v = 0, act_s = 0, act_i = 0, exit_v = 0, gout_v = 0, gin_v = 0;
  };

  long long offset(const lower::buf& b, int p, const slot_set& s) const {
    if (b.where == lower::pool::work)
      return (b.of == lower::kind::stats ? work_s_ : b.of == lower::kind::ids ? work_i_ : work_v_) + b.off;
    const lower::part_plan& pp = L::tables.parts[idx(b.part)];
    const base& bs = bases_[idx(b.part)];
    const bool own = b.part == p;
    switch (b.where) {
      case lower::pool::act: {
        const long long slot = own ? s.act : s.out;
        if (b.of == lower::kind::stats) return bs.act_s + slot * pp.act_stats + b.off;
        if (b.of == lower::kind::ids) return bs.act_i + slot * pp.act_ids + b.off;
        return bs.act_v + slot * pp.act_values + b.off;
      }
      case lower::pool::exit: return bs.exit_v + s.out * pp.exit_values + b.off;
      case lower::pool::gout: return bs.gout_v + (own ? s.gout : s.out) * pp.gout_values + b.off;
      case lower::pool::gin: return bs.gin_v + s.out * pp.gin_values + b.off;
      default: throw std::logic_error("strata: a buffer outside the plan");
    }
  }

  int stage_;
  std::array<base, idx(NP)> bases_{};
  long long work_v_ = 0, work_s_ = 0, work_i_ = 0, bytes_ = 0;
  typename Backend::template buffer<T> values_;
  typename Backend::template buffer<S> stats_;
  typename Backend::template buffer<std::int32_t> ids_;
};

}  // namespace strata::exec
