#pragma once
// strata-header: host-only
// Import of a Hugging Face transformers folder (config.json and model.safetensors, or
// model.safetensors.index.json and its shards, as save_pretrained writes them) into any plan
// of the same model (hf/family.hpp):
//
//   hf::import_folder(world, trainer, dir)   collective: every rank reads the folder, the
//                                            ranks agree, each keeps its shards (TP, PP, ZeRO...)
//   hf::read_folder<P>(dir)                  one process: the whole parameters, as
//                                            gather_parameters() gives them
//
// The config is checked against the plan first (hf/config.hpp): sizes, heads, eps, rope
// base, activation. Then each tensor: present (a tied lm_head is the embedding), of the
// shape the config implies, F64, F32, BF16 or F16, finite; a tensor the plan has no place
// for is refused (but for the buffers older transformers saved: attn.bias, attn.masked_bias,
// rotary_emb.inv_freq), and so is a nonzero bias where strata's layer has none. Every
// problem is a checkpoint_error naming the file (an agreed_error on every rank for
// import_folder); the trainer is left as it was. Optimizer state is left as it is.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/agreed_error.hpp"
#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"
#include "strata/exec/world.hpp"
#include "strata/hf/config.hpp"
#include "strata/hf/family.hpp"
#include "strata/hf/tensors.hpp"
#include "strata/io/file.hpp"
#include "strata/io/json.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/io/safetensors_index.hpp"

namespace strata {
template <class P, class T, class Backend, class Comm>
class trainer;
}

namespace strata::hf {

namespace detail {

// A transformers tensor's values as doubles (F64, F32, BF16 or F16).
inline std::vector<double> doubles(const io::reader& r, const std::string& name) {
  const io::dtype t = r.info(name).type;
  if (t == io::dtype::F64) return r.read<double>(name);
  if (t == io::dtype::F32) {
    const std::vector<float> f = r.read<float>(name);
    return std::vector<double>(f.begin(), f.end());
  }
  if (t != io::dtype::BF16 && t != io::dtype::F16)
    throw io::checkpoint_error(r.path(), "tensor '" + name + "' is " + std::string(io::name_of(t)) +
                                             ": model weights are F64, F32, BF16 or F16");
  const std::vector<std::uint16_t> h = r.read<std::uint16_t>(name, t);
  std::vector<double> v(h.size());
  for (std::size_t e = 0; e < h.size(); ++e)
    v[e] = t == io::dtype::BF16 ? strata::detail::bf16_bits_to_float(h[e]) : strata::detail::f16_bits_to_float(h[e]);
  return v;
}

// Buffers older transformers versions saved with the weights: not parameters.
inline bool buffer(std::string_view name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name.ends_with("rotary_emb.inv_freq");
}

}  // namespace detail

// One process: plan P's parameters, whole ([layer][tensor], as gather_parameters() gives
// them), from the transformers folder `dir`; throws checkpoint_error.
template <class P>
parameters read_folder(const std::string& dir) {
  const model_spec s = recognise<P>();
  // the config, against the plan
  const std::string config = dir + "/config.json";
  const std::vector<std::byte> bytes = io::read_file(config);
  io::json::value c;
  try {
    c = io::json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const io::json::parse_error& e) {
    throw io::checkpoint_error(config, std::string("not valid JSON: ") + e.what());
  }
  const config_facts facts = check_config(s, c, config);
  // where each tensor is: the index's map, or the one file
  std::map<std::string, std::string, std::less<>> where;
  const std::string index = dir + "/model.safetensors.index.json", single = dir + "/model.safetensors";
  if (std::filesystem::exists(index)) {
    for (const auto& [tensor, file] : io::read_index(index).weight_map) {
      if (file.find('/') != std::string::npos || file == "." || file == "..")
        throw io::checkpoint_error(index, "weight_map entry '" + tensor + "': \"" + file +
                                              "\" is not a file name in the folder");
      where[tensor] = file;
    }
  } else if (std::filesystem::exists(single)) {
    const io::reader r(single);
    for (const std::string& name : r.names()) where[name] = "model.safetensors";
  } else {
    throw io::checkpoint_error(dir, "holds neither model.safetensors nor model.safetensors.index.json (a folder "
                                    "save_pretrained wrote with safetensors; pytorch_model.bin is not read)");
  }
  const std::vector<tensor_map> maps =
      tensor_maps(s, s.fam == family::llama ? std::optional<bool>(facts.attention_bias) : std::nullopt);
  // each map's tensor in the files (a tied lm_head: the embedding), grouped by file
  std::vector<std::string> name_of(maps.size());
  std::map<std::string, std::vector<std::size_t>> by_file;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    name_of[i] = maps[i].name;
    if (!where.count(name_of[i]) && !maps[i].tied.empty() && facts.tied) name_of[i] = maps[i].tied;
    const auto at = where.find(name_of[i]);
    if (at == where.end())
      throw io::checkpoint_error(std::filesystem::exists(index) ? index : single,
                                 "tensor '" + maps[i].name + "' of " + std::string(architecture(s.fam)) +
                                     " is missing" +
                                     (maps[i].tied.empty() ? "" : " (config.json: tie_word_embeddings false)"));
    by_file[at->second].push_back(i);
  }
  // the plan's tensors, and how many times each element was set
  parameters p(static_cast<std::size_t>(P::num_layers));
  std::vector<std::vector<std::vector<unsigned char>>> set(p.size());
  for (int i = 0; i < P::num_layers; ++i)
    for (int k = 0; k < P::layer_plans[std::size_t(i)].desc.num_params; ++k) {
      const auto n = static_cast<std::size_t>(P::layer_plans[std::size_t(i)].desc.params[std::size_t(k)].shape.numel());
      p[std::size_t(i)].emplace_back(n, 0.0);
      set[std::size_t(i)].emplace_back(n, 0);
    }
  std::set<std::string> used;
  for (const auto& [file, list] : by_file) {
    const io::reader r(dir + "/" + file);
    for (std::size_t i : list) {
      tensor_map m = maps[i];
      const std::string& name = name_of[i];
      used.insert(name);
      std::vector<std::uint64_t> got = r.info(name).shape;
      if (m.how == layout::rows && got.size() == 2 && got[0] == std::uint64_t(facts.positions) && got[1] == m.shape[1])
        m.shape = got;  // GPT-2's wpe of n_positions rows: strata takes the first Seq
      if (got != m.shape)
        throw io::checkpoint_error(r.path(), "tensor '" + name + "' has shape " + io::detail::shape_text(got) + ", " +
                                                 std::string(architecture(s.fam)) + " of the plan's sizes needs " +
                                                 io::detail::shape_text(m.shape));
      const std::vector<double> v = detail::doubles(r, name);
      for (std::size_t e = 0; e < v.size(); ++e) {
        if (!std::isfinite(v[e]))
          throw io::checkpoint_error(r.path(), "tensor '" + name + "' holds " + std::to_string(v[e]) + " at element " +
                                                   std::to_string(e));
        if (m.how == layout::zeros) {
          if (v[e] != 0)
            throw io::checkpoint_error(r.path(), "tensor '" + name + "' is not zero (element " + std::to_string(e) +
                                                     " is " + std::to_string(v[e]) +
                                                     "), and the plan's layer has no such parameter (a bias)");
          continue;
        }
        const std::uint64_t to = source(s, m, e);
        if (to == none) continue;
        p[std::size_t(m.layer)][std::size_t(m.k)][std::size_t(to)] = v[e];
        ++set[std::size_t(m.layer)][std::size_t(m.k)][std::size_t(to)];
      }
    }
  }
  // every element of every tensor a map names set exactly once (a map that names none of a
  // tensor: a bias transformers' config leaves out, zero)
  for (const tensor_map& m : maps) {
    if (m.how == layout::zeros) continue;
    const auto& count = set[std::size_t(m.layer)][std::size_t(m.k)];
    if (std::any_of(count.begin(), count.end(), [](unsigned char n) { return n != 1; }))
      throw io::checkpoint_error(dir, "strata::hf: the tensors of " + std::string(architecture(s.fam)) +
                                          " do not cover layer " + std::to_string(m.layer) + "'s tensor " +
                                          std::to_string(m.k) + " exactly once (an internal error)");
  }
  // a TiedHead holds the embedding's values (its place in set_parameters must agree)
  if (s.tied_head) {
    if (!facts.tied)
      throw io::checkpoint_error(dir + "/config.json", "tie_word_embeddings is false: its lm_head is a tensor of its "
                                                       "own, but the plan's head is a TiedHead (tied to the embedding)");
    p[std::size_t(s.head)][0] = p[std::size_t(s.embed)][0];
  }
  std::vector<std::string> extra;
  for (const auto& [name, file] : where)
    if (!used.count(name) && !detail::buffer(name)) extra.push_back(name);
  if (!extra.empty())
    throw io::checkpoint_error(dir + "/" + where.find(extra.front())->second,
                               "holds " + std::to_string(extra.size()) + " tensor(s) that a " +
                                   std::string(architecture(s.fam)) + " of the plan's sizes does not have, '" +
                                   extra.front() + "' the first");
  return p;
}

// Collective: every rank reads the folder and keeps its shards of it; a problem is the
// same agreed_error on every rank, and the trainer is left as it was.
template <class P, class T, class Backend, class Comm>
void import_folder(world<Backend, Comm>& w, trainer<P, T, Backend, Comm>& t, const std::string& dir) {
  recognise<P>();  // the same verdict on every rank
  parameters p;
  std::string problem;
  try {
    p = read_folder<P>(dir);
  } catch (const io::checkpoint_error& e) {
    problem = std::string("strata::hf: ") + e.what();
  } catch (const std::exception& e) {
    problem = "strata::hf: import of " + dir + ": " + e.what();
  }
  try {
    w.comm().agree(problem.empty(), problem);
  } catch (const comm::agreement_error& e) {  // a failed communication stays a comm_error
    throw agreed_error(e.what());
  }
  t.set_parameters(p);
}

}  // namespace strata::hf
