#pragma once
// Human-readable plan table and a Chrome-trace / Perfetto timeline of the schedule.
#include <cstdio>
#include <string>
#include <string_view>

#include "strata/plan/plan.hpp"
#include "strata/plan/print.hpp"

namespace strata {

namespace detail {
inline void appendf(std::string& out, const char* fmt, auto... args) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  if (n > 0) out.append(buf, static_cast<std::size_t>(n < static_cast<int>(sizeof buf) ? n : static_cast<int>(sizeof buf) - 1));
}
inline std::string shape_str(const shape_t& s) {
  std::string r = "[";
  for (int i = 0; i < s.rank; ++i) {
    if (i) r += ",";
    r += std::to_string(s.dim[static_cast<std::size_t>(i)]);
  }
  return r + "]";
}
inline std::string bytes_str(long long b) {
  char buf[64];
  if (b >= (1LL << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1LL << 30));
  else if (b >= (1LL << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1LL << 20));
  else if (b >= (1LL << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(b) / (1LL << 10));
  else std::snprintf(buf, sizeof buf, "%lld B", b);
  return buf;
}
inline const char* sv(std::string_view s) {
  // string_views in this library all point at string literals (NUL-terminated)
  return s.data();
}
constexpr std::string_view mode_name(tensor_mode m) {
  switch (m) {
    case tensor_mode::d1: return "1D";
    case tensor_mode::d2: return "2D";
    case tensor_mode::d2p5: return "2.5D";
    case tensor_mode::d3: return "3D";
  }
  return "?";
}
}  // namespace detail

// The plan as a table. `world` = 0 uses World<N> if given, else one replica.
template <class P>
std::string report(int world = 0) {
  using detail::appendf;
  using detail::sv;
  if (world <= 0) world = P::fixed_world > 0 ? P::fixed_world : P::devices_per_replica;
  std::string o;
  appendf(o, "strata plan: %d layers in %d TaskGraphs, %d pipeline parts on %d stages x %d devices = %d devices per replica\n",
          P::num_layers, P::num_taskgraphs, P::num_parts, P::stages, P::part_devices, P::devices_per_replica);
  appendf(o, "world %d -> data parallel %d; global batch = %d x micro-batch %d x %d micro-batches = %d\n", world,
          P::data_parallel(world), P::data_parallel(world), P::micro_batch, P::num_micro_batch, P::global_batch(world));
  // a user schedule's name need not end in NUL
  appendf(o, "schedule %.*s, %d chunk(s) per stage, bubble %lld/%lld = %.4f, deadlock-free: %s; tensor mode %s\n",
          static_cast<int>(P::schedule_name.size()), P::schedule_name.data(), P::chunks, P::bubble.num, P::bubble.den,
          P::bubble_fraction, P::deadlock_free ? "proven" : "NO", sv(detail::mode_name(P::mode)));
  appendf(o, "gradient reduction: %s over the %s group, %d bucket(s) per parameter group\n",
          P::gradient_reduce == reduce_method::mean ? "mean" : "sum", sv(to_string(P::shard_axis)), P::buckets);
  appendf(o, "sequence parallel: %s; activation recomputation: %d region(s) (%s)\n", P::sequence_parallel ? "yes" : "no",
          P::recompute_regions,
          P::recompute == checkpoint_mode::collection  ? "Checkpoint<...> regions"
          : P::recompute == checkpoint_mode::automatic ? "every residual block"
                                                       : "every TaskGraph");

  // Context<N>: each rank's context index (its pieces) and tensor index (its shards)
  constexpr bool cp = P::context > 1;
  o += cp ? "\nranks\n  rank  data  stage  index  context  tensor\n" : "\nranks\n  rank  data  stage  index  row  col  depth\n";
  for (int r = 0; r < world && r < 64; ++r) {
    const rank_coord c = P::coord(r);
    if (cp) appendf(o, "  %4d  %4d  %5d  %5d  %7d  %6d\n", r, c.data, c.stage, c.index, c.cp, c.tp);
    else appendf(o, "  %4d  %4d  %5d  %5d  %3d  %3d  %5d\n", r, c.data, c.stage, c.index, c.row, c.col, c.depth);
  }
  if (world > 64) appendf(o, "  ... %d more\n", world - 64);

  o += "\nTaskGraphs\n  tg  strategy       devices  part  stage  chunk  layers\n";
  for (int t = 0; t < P::num_taskgraphs; ++t) {
    const auto& tg = P::taskgraphs[static_cast<std::size_t>(t)];
    const char* kind = tg.context && tg.tensor > 1         ? "Context/Split"
                       : tg.context                           ? "Context"
                       : tg.kind == strategy_kind::replicate ? "Replicate"
                                                              : "Split";
    appendf(o, "  %2d  %-13s  %7d  %4d  %5d  %5d  %d..%d%s\n", t, kind, tg.devices, tg.part, P::stage_of_part(tg.part),
            P::chunk_of_part(tg.part), tg.first_layer, tg.first_layer + tg.num_layers - 1,
            tg.is_default ? "  (default strategy)" : "");
  }

  o += "\nlayers (per-sample shapes; layouts: B broadcast, S(0) rows split, S(-1) features split, P partial sum)\n";
  o += "   #  layer                tg  part  in -> out              layout in->out  signature                 params/device\n";
  for (int i = 0; i < P::num_layers; ++i) {
    const auto& lp = P::layer_plans[static_cast<std::size_t>(i)];
    const std::string io = detail::shape_str(lp.in) + " -> " + detail::shape_str(lp.out);
    const std::string lay = std::string(to_string(lp.arrives)) + ">" + std::string(to_string(lp.in_layout)) + "->" +
                            std::string(to_string(lp.out_layout));
    appendf(o, "  %2d  %-19s  %2d  %4d  %-21s  %-14s  %-24s  %lld\n", i, sv(lp.desc.name), lp.taskgraph, lp.part,
            io.c_str(), lay.c_str(), sv(to_string(lp.sig)), lp.local_param_elems);
    for (int k = 0; k < lp.num_comms; ++k) {
      const comm_desc& c = lp.comms[static_cast<std::size_t>(k)];
      appendf(o, "        %s %s over %s: %lld elements x %d per micro-batch\n",
              c.when == pass::forward ? "fwd" : "bwd", sv(to_string(c.kind)), sv(to_string(c.group)), c.elems, c.calls);
    }
  }

  o += "\nmemory per device\n  stage  params       grads        adam state   activations  in-flight  total\n";
  for (int s = 0; s < P::stages; ++s)
    appendf(o, "  %5d  %-11s  %-11s  %-11s  %-11s  %9d  %s\n", s, detail::bytes_str(P::parameter_bytes(s)).c_str(),
            detail::bytes_str(P::gradient_bytes(s)).c_str(), detail::bytes_str(P::adam_state_bytes(s, P::data_parallel(world))).c_str(),
            detail::bytes_str(P::activation_arena_bytes(s)).c_str(), P::peak_in_flight(s),
            detail::bytes_str(P::peak_memory_bytes(s, P::data_parallel(world))).c_str());

  if (P::offload != offload_level::none)
    for (int s = 0; s < P::stages; ++s)
      appendf(o, "  stage %d offloaded to host memory: %s; the update's device buffers: %s (ApplyGroups<%d>)\n", s,
              detail::bytes_str(P::host_bytes(s, P::data_parallel(world))).c_str(),
              detail::bytes_str(P::update_buffer_bytes(s, P::data_parallel(world))).c_str(), P::apply_groups);

  o += "\ncommunication per device per step\n  stage  collective      group        pass  layer  calls  bytes\n";
  for (int s = 0; s < P::stages; ++s) {
    const auto t = P::communication(s, P::data_parallel(world));
    for (int i = 0; i < t.size; ++i) {
      const comm_total& c = t.rows[static_cast<std::size_t>(i)];
      appendf(o, "  %5d  %-14s  %-11s  %-4s  %5d  %5d  %s\n", s, sv(to_string(c.kind)), sv(to_string(c.group)),
              c.when == pass::forward ? "fwd" : "bwd", c.layer, c.calls, detail::bytes_str(c.bytes).c_str());
    }
  }
  o += "\nlowered program (what each device runs: F3 s1 = forward of micro-batch 3 in stash slot 1; "
       "\"+\" joins messages posted as one group)\n";
  for (int s = 0; s < P::stages; ++s) o += "  stage " + std::to_string(s) + ": " + program_text<P>(s) + "\n";
  for (int p = 0; p < P::num_parts; ++p) {
    o += "  part " + std::to_string(p) + " forward: " + part_text<P>(p, true) + "\n";
    o += "  part " + std::to_string(p) + " backward: " + part_text<P>(p, false) + "\n";
    if (P::split_backward) o += "  part " + std::to_string(p) + " W: " + part_text<P>(p, false, true) + "\n";
  }
  o += "activation buffers per device (the lowered buffer plan, allocated once)\n";
  for (int s = 0; s < P::stages; ++s)
    appendf(o, "  stage %d: %s (stash %s)\n", s, detail::bytes_str(P::activation_arena_bytes(s)).c_str(),
            detail::bytes_str(P::peak_activation_bytes(s)).c_str());
  appendf(o, "\nFLOPs per replica per step: %.4g; per step at world %d: %.4g\n",
          static_cast<double>(P::flops_per_replica_step()), world, static_cast<double>(P::flops_per_step(world)));
  return o;
}

// The schedule as a Chrome trace (chrome://tracing, ui.perfetto.dev): one track per
// stage, forward = 1 unit and backward = 2 units per chunk (zero-bubble: B 1 and W 1),
// communication as instants.
template <class P>
std::string chrome_trace(long long unit_us = 1000) {
  using detail::appendf;
  auto times = new sched::timeline<P::program.stages, P::program.capacity>{};
  sched::simulate_costs(P::program, sched::unit_costs(P::program), times);
  std::string o = "{\"traceEvents\":[\n";
  bool first = true;
  for (int s = 0; s < P::stages; ++s) {
    appendf(o, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"stage %d\"}}",
            first ? "" : ",\n", s, s);
    first = false;
    for (int i = 0; i < P::program.length[static_cast<std::size_t>(s)]; ++i) {
      const auto& x = P::program.at(s, i);
      const long long t0 = times->start[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] * unit_us;
      const long long t1 = times->end[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] * unit_us;
      if (sched::is_compute(x.kind))
        appendf(o, ",\n{\"name\":\"%s%d.%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%lld,\"dur\":%lld,"
                   "\"args\":{\"micro_batch\":%d,\"chunk\":%d,\"part\":%d}}",
                detail::sv(sched::to_string(x.kind)), x.mb, x.chunk,
                x.kind == sched::op::forward ? "forward" : x.kind == sched::op::weight ? "weight" : "backward", s, t0,
                t1 - t0, x.mb, x.chunk,
                P::part_of(s, x.chunk));
      else if (sched::is_p2p(x.kind))
        appendf(o, ",\n{\"name\":\"%s mb%d c%d %s stage %d\",\"cat\":\"p2p\",\"ph\":\"i\",\"s\":\"t\",\"pid\":0,"
                   "\"tid\":%d,\"ts\":%lld}",
                detail::sv(sched::to_string(x.kind)), x.mb, x.chunk, sched::is_send(x.kind) ? "to" : "from", x.peer, s,
                t1);
    }
  }
  o += "\n],\"displayTimeUnit\":\"ms\"}\n";
  delete times;
  return o;
}

}  // namespace strata
