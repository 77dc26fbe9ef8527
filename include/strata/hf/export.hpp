#pragma once
// strata-header: host-only
// Export to a Hugging Face transformers folder, which AutoModelForCausalLM.from_pretrained
// loads as it is, from any plan (hf/family.hpp says which models):
//
//   <dir>/config.json                       the architecture and its sizes (hf/config.hpp)
//   <dir>/model.safetensors                 every tensor in transformers' names and layouts
//                                           (hf/tensors.hpp), whole
// or, above export_options::max_shard_bytes of tensor data (transformers' 5 GB by default),
//   <dir>/model-00001-of-00003.safetensors  the tensors in order, each file under the limit
//   <dir>/model.safetensors.index.json      {"metadata": {"total_size": bytes},
//                                            "weight_map": {tensor: file}}
//
//   hf::export_folder(world, trainer, dir)         collective: gathers the whole tensors of
//                                                   any plan (Split, Pipeline, ZeRO...), rank
//                                                   0 writes, every rank gets the verdict
//   hf::export_checkpoint<P>(checkpoint, dir)      one process: from a strata checkpoint
//                                                   directory written by any plan of P's model
//   hf::write_folder<P>(parameters, dir)           one process: from gather_parameters()'s values
//
// Each file is written atomically (io/file.hpp); model files of an earlier export in <dir>
// are removed first. The tensors are stored as export_options::dtype: F32 (default), F64,
// BF16 or F16 (rounded to nearest even from the float value).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/core/agreed_error.hpp"
#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"
#include "strata/exec/checkpoint_read.hpp"
#include "strata/exec/world.hpp"
#include "strata/hf/config.hpp"
#include "strata/hf/family.hpp"
#include "strata/hf/tensors.hpp"
#include "strata/io/file.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/io/safetensors_index.hpp"

namespace strata {
template <class P, class T, class Backend, class Comm>
class trainer;
}

namespace strata::hf {

struct export_options {
  io::dtype dtype = io::dtype::F32;                   // F32, F64, BF16 or F16
  std::uint64_t max_shard_bytes = 5'000'000'000ULL;  // transformers' default max_shard_size
};

namespace detail {

inline void add_as(io::writer& w, const std::string& name, const std::vector<std::uint64_t>& shape,
                   const std::vector<double>& v, io::dtype t) {
  if (t == io::dtype::F64) return w.add(name, shape, v);
  if (t == io::dtype::F32) return w.add(name, shape, std::vector<float>(v.begin(), v.end()));
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t e = 0; e < v.size(); ++e)
    h[e] = t == io::dtype::BF16 ? strata::detail::float_to_bf16_bits(static_cast<float>(v[e]))
                                : strata::detail::float_to_f16_bits(static_cast<float>(v[e]));
  w.add(name, shape, h, t);
}

// The values of transformers tensor m from strata's whole parameters.
inline std::vector<double> values_of(const model_spec& s, const tensor_map& m, const parameters& p) {
  std::uint64_t n = 1;
  for (auto d : m.shape) n *= d;
  std::vector<double> v(static_cast<std::size_t>(n), 0.0);
  if (m.how == layout::zeros) return v;
  const std::vector<double>& from = p[static_cast<std::size_t>(m.layer)][static_cast<std::size_t>(m.k)];
  for (std::uint64_t e = 0; e < n; ++e)
    v[static_cast<std::size_t>(e)] = from[static_cast<std::size_t>(source(s, m, e))];
  return v;
}

// model.safetensors, model-NNNNN-of-NNNNN.safetensors and the index: what an export writes.
inline bool model_file(const std::string& f) {
  auto digits = [&](std::size_t at) { return f.find_first_not_of("0123456789", at) == at + 5; };
  return f == "model.safetensors" || f == "model.safetensors.index.json" ||
         (f.size() == 32 && f.starts_with("model-") && digits(6) && f.compare(11, 4, "-of-") == 0 && digits(15) &&
          f.ends_with(".safetensors"));
}

}  // namespace detail

// Writes the model `s` describes with parameters `p` (whole, [layer][tensor]) into `dir`.
inline void write_folder(const model_spec& s, const parameters& p, const std::string& dir,
                         const export_options& o = {}) {
  if (o.dtype != io::dtype::F32 && o.dtype != io::dtype::F64 && o.dtype != io::dtype::BF16 && o.dtype != io::dtype::F16)
    throw std::invalid_argument("strata::hf: export dtype " + std::string(io::name_of(o.dtype)) +
                                ": transformers' weights are F32, F64, BF16 or F16");
  const std::vector<tensor_map> maps = tensor_maps(s);
  for (const tensor_map& m : maps)  // the values given are the plan's whole tensors
    if (m.how != layout::zeros &&
        (std::size_t(m.layer) >= p.size() || std::size_t(m.k) >= p[std::size_t(m.layer)].size()))
      throw std::invalid_argument("strata::hf: the parameters given lack layer " + std::to_string(m.layer) +
                                  "'s tensor " + std::to_string(m.k));
  // the shards, in order: a new file where the next tensor would pass the limit
  std::vector<std::vector<std::size_t>> shards(1);
  std::uint64_t in_shard = 0, total = 0;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    std::uint64_t bytes = io::bits_of(o.dtype) / 8;
    for (auto d : maps[i].shape) bytes *= d;
    if (!shards.back().empty() && in_shard + bytes > o.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
    total += bytes;
  }
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && detail::model_file(e.path().filename().string())) std::filesystem::remove(e.path());
  io::safetensors_index index;
  index.total_size = total;
  for (std::size_t f = 0; f < shards.size(); ++f) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", f + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    io::writer w;
    w.set_metadata("format", "pt");  // transformers loads safetensors files that say so
    for (std::size_t i : shards[f]) {
      detail::add_as(w, maps[i].name, maps[i].shape, detail::values_of(s, maps[i], p), o.dtype);
      index.weight_map[maps[i].name] = file;
    }
    w.write(dir + "/" + file);
  }
  if (shards.size() > 1) io::write_index(dir + "/model.safetensors.index.json", index);
  const std::string config = config_text(s, o.dtype);
  io::write_atomic(dir + "/config.json", [&](io::atomic_file_sink& out) { out.write(config.data(), config.size()); });
}

// One process: plan P's model with parameters `p` as gather_parameters() gives them.
template <class P>
void write_folder(const parameters& p, const std::string& dir, const export_options& o = {}) {
  write_folder(recognise<P>(), p, dir, o);
}

// One process: the model of a strata checkpoint directory written by any plan of P's model.
template <class P>
void export_checkpoint(const std::string& checkpoint, const std::string& dir, const export_options& o = {}) {
  const model_spec s = recognise<P>();  // before reading anything
  write_folder(s, read_checkpoint_parameters<P>(checkpoint), dir, o);
}

// Collective: the trainer's model, gathered whole from every rank; rank 0 writes. A problem
// (a model of no known family, a file that cannot be written) is the same agreed_error on
// every rank.
template <class P, class T, class Backend, class Comm>
void export_folder(world<Backend, Comm>& w, trainer<P, T, Backend, Comm>& t, const std::string& dir,
                   const export_options& o = {}) {
  const model_spec s = recognise<P>();  // the same verdict on every rank, before any collective
  const parameters p = t.gather_parameters();
  std::string problem;
  if (w.rank() == 0) {
    try {
      write_folder(s, p, dir, o);
    } catch (const io::checkpoint_error& e) {
      problem = std::string("strata::hf: ") + e.what();
    } catch (const std::exception& e) {
      problem = "strata::hf: export to " + dir + ": " + e.what();
    }
  }
  try {
    w.comm().agree(problem.empty(), problem);
  } catch (const comm::agreement_error& e) {  // a failed communication stays a comm_error
    throw agreed_error(e.what());
  }
}

}  // namespace strata::hf
