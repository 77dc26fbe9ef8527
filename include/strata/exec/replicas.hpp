#pragma once
// Replica consistency: every copy of a parameter that the plan says is the same — the
// data-parallel replicas of each shard, and every device of a part that holds a whole
// tensor — compared bit for bit across the world. Each rank hashes its copies, the
// hashes are gathered everywhere, and every rank reaches the same verdict, naming the
// first tensor and the two ranks that differ.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "strata/core/communicator.hpp"
#include "strata/plan/plan.hpp"

namespace strata {

struct replica_report {
  bool identical = true;
  long long tensors_compared = 0;  // tensors held by more than one rank
  std::string first_difference;    // empty when identical
};

namespace exec {

// FNV-1a over the bytes of a tensor's values.
template <class M>
std::uint64_t bits_hash(const std::vector<M>& v) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(M); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// `store` is this rank's parameter store; `comm` spans the whole world.
template <class P, class Backend, class Store, class Comm>
replica_report check_replicas(typename Backend::queue& q, Store& store, Comm& comm) {
  using M = typename Store::master_type;
  constexpr int NL = P::num_layers;
  // tensor t of the whole model <-> (layer, k)
  std::vector<int> layer_of, k_of;
  for (int i = 0; i < NL; ++i)
    for (int k = 0; k < P::layer_plans[static_cast<std::size_t>(i)].desc.num_params; ++k) {
      layer_of.push_back(i);
      k_of.push_back(k);
    }
  const std::size_t NT = layer_of.size();
  const int W = comm.size();
  std::vector<std::int64_t> mine(NT, 0);
  std::vector<M> host;
  for (std::size_t t = 0; t < NT; ++t) {
    if (!store.owns(layer_of[t])) continue;
    const lower::tensor_place& pl = Store::place(layer_of[t], k_of[t]);
    host.resize(static_cast<std::size_t>(pl.size));
    store.read_master(layer_of[t], k_of[t], host.data());
    const std::uint64_t h = bits_hash(host);
    std::memcpy(&mine[t], &h, sizeof h);
  }
  // every rank's hashes on every rank, through backend memory (NCCL needs device buffers)
  std::vector<std::int64_t> all(NT * static_cast<std::size_t>(W));
  if (NT > 0) {
    auto send = Backend::template allocate<std::int64_t>(NT);
    auto recv = Backend::template allocate<std::int64_t>(all.size());
    Backend::upload(q, mine.data(), NT, send.data());
    Backend::synchronize(q);
    comm.all_gather(send.data(), recv.data(), NT);
    comm.synchronize();
    Backend::download(q, recv.data(), all.size(), all.data());
    Backend::synchronize(q);
  }
  auto where = [](int r) {
    const rank_coord c = P::coord(r);
    return "rank " + std::to_string(r) + " (replica " + std::to_string(c.data) + ", stage " +
           std::to_string(c.stage) + ", device " + std::to_string(c.index) + ")";
  };
  replica_report rep;
  for (std::size_t t = 0; t < NT; ++t) {
    const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(layer_of[t])];
    const int stage = P::stage_of_part(lp.part);
    const bool whole = lp.local_params[static_cast<std::size_t>(k_of[t])] ==
                       lp.desc.params[static_cast<std::size_t>(k_of[t])].shape;
    bool copies = false;  // a second rank holds this tensor (or this shard of it)
    for (int r = 0; r < W; ++r) {
      const rank_coord c = P::coord(r);
      if (c.stage != stage) continue;
      // the copy this one must equal: replica 0's, of the same shard or of the whole tensor
      const int ref = P::rank_of(0, stage, P::param_holder(layer_of[t], k_of[t], c.index));
      if (ref == r) continue;
      copies = true;
      if (all[static_cast<std::size_t>(r) * NT + t] == all[static_cast<std::size_t>(ref) * NT + t])
        continue;
      if (rep.identical) {
        rep.identical = false;
        rep.first_difference = "layer " + std::to_string(layer_of[t]) + " (" + std::string(lp.desc.name) +
                               ") parameter '" +
                               std::string(lp.desc.params[static_cast<std::size_t>(k_of[t])].name) + "'" +
                               (whole ? "" : " (shard " + std::to_string(P::layout_index(c.index)) + ")") + ": " + where(r) +
                               " holds different bits from " + where(ref);
      }
    }
    if (copies) ++rep.tensors_compared;
  }
  return rep;
}

}  // namespace exec
}  // namespace strata
