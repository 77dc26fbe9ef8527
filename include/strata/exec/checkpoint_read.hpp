#pragma once
// Whole tensors out of a checkpoint directory, whatever plan wrote it: each assembled from
// the boxes its pieces cover (exec/checkpoint_index.hpp). The checkpointer loads a trainer
// with it (exec/checkpoint.hpp); read_checkpoint_parameters<P>(dir) gives every parameter
// of plan P's model whole, in one process, as trainer::gather_parameters() does (an export
// from a saved checkpoint, e.g. hf/export.hpp).
//
// Every file opened must belong to the index's save: its step, world, rank and header CRC
// (the reader checks every tensor's CRC on open); each piece must have its box's shape.
// Each problem is a checkpoint_error naming the file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/exec/checkpoint_format.hpp"
#include "strata/exec/checkpoint_index.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/plan/plan.hpp"

namespace strata {
namespace exec::ckpt {

class tensor_source {
 public:
  explicit tensor_source(const std::string& dir) : dir_(dir), index_(read_index(dir)) {}
  const index& entries() const { return index_; }

  // The pieces of `tensor` (the index checked that they tile it).
  const std::vector<piece>& pieces(const std::string& tensor) const {
    const auto it = index_.pieces.find(tensor);
    if (it == index_.pieces.end()) index_.fail("tensor " + tensor + " is not in the checkpoint");
    return it->second;
  }

  // Tensor `tensor` whole (row-major, `shape`), or with `state` ("exp_avg", ...) that
  // optimizer state of it.
  std::vector<double> whole(const std::string& tensor, const std::vector<std::uint64_t>& shape,
                            const std::string& state = "") {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<double> full(static_cast<std::size_t>(n));
    for (const piece& p : pieces(tensor)) {
      std::string name = p.name, file = p.file;
      if (!state.empty()) {
        name = "optimizer." + state + "." + p.name;
        const auto at = index_.optimizer_map.find(name);
        if (at == index_.optimizer_map.end())
          index_.fail("piece " + name + " is missing (the optimizer_map lists no " + state + " state of " + p.name +
                      ")");
        file = at->second;
      }
      const io::reader& r = reader_of(file);
      if (!r.has(name)) throw io::checkpoint_error(r.path(), "tensor " + name + " is missing");
      std::vector<std::uint64_t> local(p.where.start.size());
      for (std::size_t a = 0; a < local.size(); ++a) local[a] = p.where.stop[a] - p.where.start[a];
      if (r.info(name).shape != local)
        throw io::checkpoint_error(r.path(), "tensor " + name + " has shape " + dims_text(r.info(name).shape) +
                                                 ", the index gives it the box " + box_text(p.where) + " of " +
                                                 tensor + " " + dims_text(shape));
      const std::vector<double> v = values(r, name);
      std::vector<std::uint64_t> at(local.size(), 0);  // the element's position in the piece
      for (std::size_t e = 0; e < v.size(); ++e) {
        std::uint64_t g = 0;
        for (std::size_t a = 0; a < local.size(); ++a) g = g * shape[a] + p.where.start[a] + at[a];
        full[static_cast<std::size_t>(g)] = v[e];
        for (std::size_t a = local.size(); a-- > 0;) {
          if (++at[a] < local[a]) break;
          at[a] = 0;
        }
      }
    }
    return full;
  }

 private:
  // Opened once; it must belong to the index's save.
  const io::reader& reader_of(const std::string& file) {
    auto& r = open_[file];
    if (r) return *r;
    r = std::make_unique<io::reader>(dir_ + "/" + file);
    auto meta_of = [&](std::string_view key) { return r->metadata(key).value_or("none"); };
    const std::string digest = meta_of(io::header_crc_key);
    std::string recorded = digest;
    if (index_.digests) {
      const auto d = index_.digests->find(file);
      recorded = d != index_.digests->end() ? d->second : "none";
    }
    int rank = -1, of = -1;
    const bool named = std::sscanf(file.c_str(), "rank-%d-of-%d.safetensors", &rank, &of) == 2;
    if (meta_of("checkpoint.step") != index_.step_text || meta_of("checkpoint.world") != index_.world_text ||
        digest != recorded || (named && meta_of("checkpoint.rank") != std::to_string(rank)))
      throw io::checkpoint_error(
          r->path(), "belongs to another save: it was written after step " + meta_of("checkpoint.step") + " by rank " +
                         meta_of("checkpoint.rank") + " of " + meta_of("checkpoint.world") + " (header CRC " + digest +
                         "), the index is of step " + index_.step_text + ", world " + index_.world_text +
                         " and records header CRC " + recorded + " for it: the checkpoint mixes two saves");
    return *r;
  }

  std::string dir_;
  index index_;
  std::map<std::string, std::unique_ptr<io::reader>> open_;
};

}  // namespace exec::ckpt

// Every parameter of plan P's model, whole, from the checkpoint in `dir` (written by any
// plan of the same model): result[layer][tensor], row-major, as trainer::gather_parameters.
// One process; a checkpoint_error names the file and the problem.
template <class P>
std::vector<std::vector<std::vector<double>>> read_checkpoint_parameters(const std::string& dir) {
  exec::ckpt::tensor_source src(dir);
  exec::ckpt::check_model<P>(src.entries());
  std::vector<std::vector<std::vector<double>>> out(static_cast<std::size_t>(P::num_layers));
  for (int i = 0; i < P::num_layers; ++i) {
    const layer_desc& d = P::layer_plans[static_cast<std::size_t>(i)].desc;
    for (int k = 0; k < d.num_params; ++k) {
      // a tied tensor's second place holds its owner's values
      const bool user = P::tie.is_user(i, k);
      const std::string name = user ? exec::ckpt::tensor_name<P>(P::tie.owner, P::tie.owner_param)
                                    : exec::ckpt::tensor_name<P>(i, k);
      out[static_cast<std::size_t>(i)].push_back(src.whole(name, exec::ckpt::dims(d.params[static_cast<std::size_t>(k)].shape)));
    }
  }
  return out;
}

}  // namespace strata
