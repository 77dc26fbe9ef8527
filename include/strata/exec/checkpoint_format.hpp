#pragma once
// The checkpoint format: what a checkpoint carries besides the model (checkpoint_info),
// the names of its files, tensors and pieces and the box of the tensor each piece holds
// (exec/checkpoint_index.hpp writes and reads the index, exec/checkpoint_read.hpp the
// tensors, exec/checkpoint.hpp saves and loads a trainer's state).
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <variant>
#include <vector>

#include "strata/exec/optimizer.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/plan/plan.hpp"

namespace strata {

// What a checkpoint carries besides the model: the step it was written after (the
// learning-rate schedule's position) and the caller's own entries (e.g. the data loader's
// position).
struct checkpoint_info {
  long long step = 0;
  std::map<std::string, std::string> user;
  std::map<std::string, std::string> trainer;  // the trainer's own: updates applied, the loss scale
};

namespace exec::ckpt {

// 2: each piece's box in plain fields of the index, the optimizer state in its own map;
// 1 (named blocks "name.shardKofN" and a "name[d0,d1];..." model string) is refused.
inline constexpr const char* format = "strata-checkpoint-2";
inline constexpr const char* index_name = "index.json";
// The largest step or count a checkpoint may hold (2^53: exact in a double).
inline constexpr long long max_count = 1LL << 53;

// A whole number in [lo, hi] written as decimal text, or nothing.
inline std::optional<long long> whole_number(std::string_view s, long long lo, long long hi) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

inline std::string rank_file(int rank, int world) {
  char b[64];
  std::snprintf(b, sizeof b, "rank-%05d-of-%05d.safetensors", rank, world);
  return b;
}

template <class P>
std::string tensor_name(int layer, int k) {
  const layer_desc& d = P::layer_plans[static_cast<std::size_t>(layer)].desc;
  return "layers." + std::to_string(layer) + "." + std::string(d.name) + "." +
         std::string(d.params[static_cast<std::size_t>(k)].name);
}
// Kept statistic k of `layer` (BatchNorm2d's running_mean, running_var): a whole tensor.
template <class P>
std::string state_name(int layer, int k) {
  const layer_desc& d = P::layer_plans[static_cast<std::size_t>(layer)].desc;
  return "layers." + std::to_string(layer) + "." + std::string(d.name) + "." +
         std::string(d.state[static_cast<std::size_t>(k)].name);
}
// Blocks plan P cuts tensor k of `layer` into (1: every device of the part holds it whole).
template <class P>
constexpr int blocks(int layer, int k) {
  const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(layer)];
  return static_cast<int>(lp.desc.params[static_cast<std::size_t>(k)].shape.numel() /
                          lp.local_params[static_cast<std::size_t>(k)].numel());
}
inline std::string piece_name(const std::string& tensor, int block, int n) {
  return n == 1 ? tensor : tensor + ".shard" + std::to_string(block) + "of" + std::to_string(n);
}
inline std::vector<std::uint64_t> dims(const shape_t& s) {
  std::vector<std::uint64_t> d;
  for (int a = 0; a < s.rank; ++a) d.push_back(static_cast<std::uint64_t>(s.dim[static_cast<std::size_t>(a)]));
  return d;
}
inline std::string dims_text(const std::vector<std::uint64_t>& d) {
  std::string t = "[";
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (i) t += ',';
    t += std::to_string(d[i]);
  }
  t += ']';
  return t;
}
// The box [start, stop) of the whole tensor that block `block` of local shape `local` covers
// (exec::logical_index's numbering: row-major over the axes the plan cuts).
struct box {
  std::vector<std::uint64_t> start, stop;
  bool operator==(const box&) const = default;
};
inline box box_of(const shape_t& whole, const shape_t& local, int block) {
  box b;
  b.start.assign(static_cast<std::size_t>(whole.rank), 0);
  b.stop.assign(static_cast<std::size_t>(whole.rank), 0);
  auto at = static_cast<std::uint64_t>(block);
  for (int a = whole.rank - 1; a >= 0; --a) {
    const auto w = static_cast<std::uint64_t>(whole.dim[static_cast<std::size_t>(a)]);
    const auto l = static_cast<std::uint64_t>(local.dim[static_cast<std::size_t>(a)]);
    b.start[static_cast<std::size_t>(a)] = at % (w / l) * l;
    b.stop[static_cast<std::size_t>(a)] = b.start[static_cast<std::size_t>(a)] + l;
    at /= w / l;
  }
  return b;
}

inline std::string optimizer_name(const optimizer& o) {
  return std::visit([](const auto& x) { return std::string(x.name); }, o);
}
// The state tensors an optimizer keeps, in the store's order (state 0, state 1).
inline std::vector<std::string> state_names(const optimizer& o) {
  return std::visit(
      [](const auto& x) {
        std::vector<std::string> names;
        for (int s = 0; s < x.states(); ++s) names.emplace_back(x.state_names[static_cast<std::size_t>(s)]);
        return names;
      },
      o);
}

// Two plans hold the same model: the same tensors, names and shapes, in the same order.
template <class A, class B>
constexpr bool same_model() {
  if (A::num_layers != B::num_layers) return false;
  for (int i = 0; i < A::num_layers; ++i) {
    const layer_desc &a = A::layer_plans[static_cast<std::size_t>(i)].desc,
                     &b = B::layer_plans[static_cast<std::size_t>(i)].desc;
    if (a.num_params != b.num_params || a.name != b.name) return false;
    for (int k = 0; k < a.num_params; ++k)
      if (!(a.params[static_cast<std::size_t>(k)].shape == b.params[static_cast<std::size_t>(k)].shape) ||
          a.params[static_cast<std::size_t>(k)].name != b.params[static_cast<std::size_t>(k)].name)
        return false;
  }
  return true;
}
template <class A, class B>
constexpr int first_model_difference() {
  const int n = A::num_layers < B::num_layers ? A::num_layers : B::num_layers;
  for (int i = 0; i < n; ++i) {
    const layer_desc &a = A::layer_plans[static_cast<std::size_t>(i)].desc,
                     &b = B::layer_plans[static_cast<std::size_t>(i)].desc;
    if (a.num_params != b.num_params || a.name != b.name) return i;
    for (int k = 0; k < a.num_params; ++k)
      if (!(a.params[static_cast<std::size_t>(k)].shape == b.params[static_cast<std::size_t>(k)].shape)) return i;
  }
  return n;
}

// A checkpoint tensor's values as doubles (F64 or F32: a float run's checkpoint loads
// into a double run and back).
inline std::vector<double> values(const io::reader& r, const std::string& name) {
  const io::tensor_info& t = r.info(name);
  if (t.type == io::dtype::F64) return r.read<double>(name);
  if (t.type != io::dtype::F32)
    throw io::checkpoint_error(r.path(), "tensor '" + name + "' is " + std::string(io::name_of(t.type)) +
                                             "; a checkpoint holds F32 or F64");
  const std::vector<float> f = r.read<float>(name);
  return std::vector<double>(f.begin(), f.end());
}

}  // namespace exec::ckpt
}  // namespace strata
