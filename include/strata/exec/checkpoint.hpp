#pragma once
// Checkpoints: a directory with one safetensors file per rank and an index.
//
//   <dir>/rank-00003-of-00008.safetensors   this rank's pieces: parameters (master
//                                           precision) and optimizer state
//   <dir>/index.json                        {"metadata": {...}, "files": {file: bytes},
//                                            "weight_map": {piece: file}}
//
// Names are the model's, whatever the plan: "layers.7.Linear.weight" for a tensor a device
// holds whole, "layers.7.Linear.weight.shard1of2" for the second of two blocks a Split<2>
// cuts it into (on every axis the plan cuts, as exec::logical_index numbers them), and
// "optimizer.exp_avg.<piece>" (Adam/AdamW: exp_avg, exp_avg_sq; SGD with momentum:
// momentum_buffer) for the state, in PyTorch's names. Data-parallel replicas hold the same
// values, so replica 0 writes them; ZeRO's partitioned state is gathered first. A file
// therefore does not depend on ZeRO, and a reader of another plan assembles each tensor
// it needs from the pieces it finds: resharding.
//
// Writing is atomic: the files go to <dir>.tmp, each written to a temporary name, fsynced
// and renamed (io/file.hpp); rank 0 writes the index last, then replaces <dir> by the new
// directory. Every file is bound to its save: each rank file carries the step, its rank and
// the world, the index records each file's header CRC (a digest of the file: the header
// holds every tensor's CRC), and a reader refuses a directory whose files come from two
// saves. Every file is checksummed (CRC-32 per tensor and of the header). Reading
// checks the index, the model, the optimizer, each file's size and every checksum on every
// rank, stages everything in host memory, and the ranks agree before anything is stored:
// a truncated, corrupt or mismatched checkpoint is the same agreed_error on every rank, and
// the trainer is left as it was.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "strata/core/agreed_error.hpp"
#include "strata/core/communicator.hpp"
#include "strata/core/precision.hpp"
#include "strata/exec/checkpoint_format.hpp"
#include "strata/exec/init.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/store.hpp"
#include "strata/exec/zero.hpp"
#include "strata/io/json.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/plan/plan.hpp"

namespace strata {

namespace exec {

// Saves and loads one device's share of a trainer's state; collective over the world.
template <class P, class T, class Backend, class Comm>
class checkpointer {
  using M = master_t<T>;
  using store_t = param_store<P, Backend, T>;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }

 public:
  checkpointer(typename Backend::queue& q, Comm& world, store_t& store, rank_coord me, std::array<Comm*, 2> groups)
      : q_(q), world_(world), store_(store), me_(me), groups_(groups) {}

  void save(const std::string& dir, long long step, const optimizer& opt,
            const std::map<std::string, std::string>& user, const std::map<std::string, std::string>& trainer) {
    const int W = world_.size(), r = world_.rank();
    const std::string tmp = dir + ".tmp";
    std::string problem;
    if (r == 0) problem = attempt(dir, [&] {
        std::filesystem::remove_all(tmp);
        std::filesystem::create_directories(tmp);
      });
    agree(problem);
    const std::vector<std::string> states = ckpt::state_names(opt);
    // every moment of both groups, whole (ZeRO's partitions gathered): collective
    std::array<std::array<std::vector<M>, 2>, 2> flat;
    for (std::size_t s = 0; s < states.size(); ++s)
      for (int g = 0; g < 2; ++g) flat[s][idx(g)] = flat_state(static_cast<int>(s), g);
    store_.gather_whole(*groups_[0], *groups_[1]);  // Zero<3>: the masters, whole
    problem = attempt(dir, [&] {
      io::writer w;
      std::vector<M> host;
      for (int i = 0; i < P::num_layers; ++i) {
        if (!store_.owns(i)) continue;
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) {
          const int n = ckpt::blocks<P>(i, k);
          if (!writes(i, k)) continue;
          const std::string piece = ckpt::piece_name(ckpt::tensor_name<P>(i, k), P::param_block(i, k, me_.index), n);
          const auto shape = ckpt::dims(P::layer_plans[idx(i)].local_params[idx(k)]);
          const lower::tensor_place& pl = store_t::place(i, k);
          host.resize(uz(pl.size));
          store_.read_master(i, k, host.data());
          w.add(piece, shape, host);
          for (std::size_t s = 0; s < states.size(); ++s) {
            const M* src = flat[s][idx(pl.group)].data() + pl.offset;
            w.add("optimizer." + states[s] + "." + piece, shape, std::vector<M>(src, src + pl.size));
          }
        }
      }
      w.set_metadata("checkpoint.step", std::to_string(step));
      w.set_metadata("checkpoint.rank", std::to_string(r));
      w.set_metadata("checkpoint.world", std::to_string(W));
      w.write(tmp + "/" + ckpt::rank_file(r, W));
    });
    store_.drop_whole();
    agree(problem);
    if (r == 0) problem = attempt(dir, [&] {
        write_index(tmp, step, opt, user, trainer);
        commit(tmp, dir);
      });
    agree(problem);
  }

  // Reads a checkpoint of the same model (written by any plan); stores nothing unless
  // every rank read all it needs. Returns the step and the saver's entries.
  checkpoint_info load(const std::string& dir, const optimizer& opt) {
    return load_checked(dir, opt, nullptr);
  }
  // As load, and the checkpoint must have been written by plan From: each tensor in the
  // blocks From cuts it into (the reading map below is From's, computed at compile time).
  template <class From>
  checkpoint_info load_from(const std::string& dir, const optimizer& opt) {
    static constexpr auto map = [] {
      std::array<std::array<int, max_layer_params>, idx(P::num_layers)> b{};
      for (int i = 0; i < P::num_layers; ++i)
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) b[idx(i)][idx(k)] = ckpt::blocks<From>(i, k);
      return b;
    }();
    return load_checked(dir, opt, &map);
  }

 private:
  using block_map = std::array<std::array<int, max_layer_params>, idx(P::num_layers)>;

  // The problem f ran into, or nothing; io's errors name their file already.
  template <class F>
  static std::string attempt(const std::string& dir, F&& f) {
    try {
      f();
      return {};
    } catch (const io::checkpoint_error& e) {
      return e.what();
    } catch (const std::exception& e) {
      return "checkpoint " + dir + ": " + e.what();
    }
  }
  // The same verdict on every rank: the first failing rank's message.
  void agree(const std::string& problem) {
    try {
      world_.agree(problem.empty(), problem);
    } catch (const comm::comm_error& e) {
      throw agreed_error(std::string("strata: ") + e.what());
    }
  }
  // Replica 0 writes a piece; of a tensor the part's devices hold whole, device 0.
  // Replica 0 writes each block once: the first device of the part that holds it.
  // A tied tensor is stored once: its owner's pieces (plan/sharding.hpp's tie_info).
  bool writes(int layer, int k) const {
    return me_.data == 0 && P::param_holder(layer, k, me_.index) == me_.index && !P::tie.is_user(layer, k);
  }

  // One moment of group g in the group's flat layout, whole (ZeRO's partitions gathered).
  std::vector<M> flat_state(int which, int g) { return store_.gather_flat(which, g, *groups_[idx(g)]); }

  void write_index(const std::string& tmp, long long step, const optimizer& opt,
                   const std::map<std::string, std::string>& user,
                   const std::map<std::string, std::string>& trainer) const {
    const int W = world_.size();
    nlohmann::ordered_json j;  // in this order, for a reader's eyes
    auto& meta = j["metadata"];
    meta["format"] = ckpt::format;
    meta["step"] = std::to_string(step);
    meta["world"] = std::to_string(W);
    meta["optimizer"] = ckpt::optimizer_name(opt);
    meta["model"] = ckpt::joined(ckpt::model_entries<P>());
    meta["trainer"] = trainer;
    meta["user"] = user;
    // (built apart: a reference into j would not survive adding the next key)
    nlohmann::ordered_json files = nlohmann::ordered_json::object(), digests = nlohmann::ordered_json::object();
    for (int r = 0; r < W; ++r) {
      const std::string f = ckpt::rank_file(r, W);
      files[f] = std::filesystem::file_size(tmp + "/" + f);
      digests[f] = io::header_crc_of(tmp + "/" + f);  // binds each file to this save
    }
    j["files"] = std::move(files);
    j["file_crc32"] = std::move(digests);
    auto& map = j["weight_map"] = nlohmann::ordered_json::object();
    // every rank's pieces, from the plan: no message needed
    for (int r = 0; r < W; ++r) {
      const rank_coord c = P::coord(r);
      if (c.data != 0) continue;
      for (int i = 0; i < P::num_layers; ++i) {
        if (P::stage_of_part(P::layer_plans[idx(i)].part) != c.stage) continue;
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) {
          const int n = ckpt::blocks<P>(i, k);
          if ((n == 1 && c.index != 0) || P::tie.is_user(i, k)) continue;
          const std::string piece = ckpt::piece_name(ckpt::tensor_name<P>(i, k), c.index, n);
          const std::string file = ckpt::rank_file(r, W);
          map[piece] = file;
          for (const std::string& s : ckpt::state_names(opt)) map["optimizer." + s + "." + piece] = file;
        }
      }
    }
    const std::string text = io::json::dump(j, 2) + "\n";  // std::invalid_argument for a non-UTF-8 entry
    io::write_atomic(tmp + "/" + ckpt::index_name,
                     [&](io::atomic_file_sink& sink) { sink.write(text.data(), text.size()); });
  }

  // <dir> becomes the new checkpoint: the old one (if any) is moved aside, then removed;
  // the renames are made durable by syncing the parent directory.
  static void commit(const std::string& tmp, const std::string& dir) {
    const std::string old = dir + ".old";
    std::filesystem::remove_all(old);
    if (std::filesystem::exists(dir)) std::filesystem::rename(dir, old);
    std::filesystem::rename(tmp, dir);
    std::filesystem::remove_all(old);
    const std::string parent = io::detail::directory_of(dir);
    io::detail::fd_guard d{::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (d.fd < 0 || ::fsync(d.fd) != 0)
      throw io::checkpoint_error(dir, "written, but fsync of its directory " + parent + " failed");
  }

  checkpoint_info load_checked(const std::string& dir, const optimizer& opt, const block_map* from) {
    checkpoint_info info;
    std::vector<std::vector<M>> params;  // staged, per owned tensor in (layer, k) order
    const std::vector<std::string> states = ckpt::state_names(opt);
    std::array<std::array<std::vector<M>, 2>, 2> flat;
    const std::string problem = attempt(dir, [&] { stage(dir, opt, from, info, params, flat); });
    agree(problem);
    // every rank has everything: store it
    std::size_t t = 0;
    for (int i = 0; i < P::num_layers; ++i) {
      if (!store_.owns(i)) continue;
      for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) store_.set_master(i, k, params[t++].data());
    }
    for (std::size_t s = 0; s < states.size(); ++s)
      for (int g = 0; g < 2; ++g) {
        const std::vector<M>& f = flat[s][idx(g)];
        std::vector<M> mine(uz(store_.state_elems(g)));
        for (const zero::segment& sg : store_.segments(g))
          std::copy_n(f.data() + sg.offset, uz(sg.count), mine.data() + sg.state);
        store_.write_state(static_cast<int>(s), g, mine.data());
      }
    store_.refresh();
    return info;
  }

  void stage(const std::string& dir, const optimizer& opt, const block_map* from, checkpoint_info& info,
             std::vector<std::vector<M>>& params, std::array<std::array<std::vector<M>, 2>, 2>& flat) {
    const std::string index_path = dir + "/" + ckpt::index_name;
    const std::vector<std::byte> bytes = io::read_file(index_path);
    const io::json::value root = [&] {
      try {
        return io::json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
      } catch (const io::json::parse_error& e) {
        throw io::checkpoint_error(index_path, std::string("not a valid index: malformed JSON, ") + e.what());
      }
    }();
    auto bad = [&](const std::string& what) { throw io::checkpoint_error(index_path, what); };
    auto object = [&](const io::json::value& in, const char* key) -> const io::json::value* {
      const auto it = in.find(key);
      return it != in.end() && it->is_object() ? &*it : nullptr;
    };
    const io::json::value* meta = root.is_object() ? object(root, "metadata") : nullptr;
    const io::json::value* files = root.is_object() ? object(root, "files") : nullptr;
    const io::json::value* map = root.is_object() ? object(root, "weight_map") : nullptr;
    if (!meta || !files || !map) bad("the index lacks its metadata, files or weight_map object");
    auto text = [&](const char* key) {
      const auto v = meta->find(key);
      if (v == meta->end() || !v->is_string()) bad(std::string("the index's metadata has no \"") + key + "\"");
      return v->get<std::string>();
    };
    // a file the index names: a plain name inside dir, never a path out of it
    auto file_name = [&](const std::string& f, const std::string& what) {
      if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\0') != std::string::npos)
        bad(what + " \"" + f + "\" is not a file name in the checkpoint's directory");
      return f;
    };
    if (text("format") != ckpt::format) bad("format \"" + text("format") + "\", expected \"" + ckpt::format + "\"");
    // the model: the first tensor that differs, by name and shape
    const std::vector<std::string> mine = ckpt::model_entries<P>();
    std::vector<std::string> theirs;
    for (std::size_t a = 0, b; a <= text("model").size(); a = b + 1) {
      b = text("model").find(';', a);
      if (b == std::string::npos) b = text("model").size();
      if (b > a) theirs.push_back(text("model").substr(a, b - a));
    }
    for (std::size_t e = 0; e < std::max(mine.size(), theirs.size()); ++e)
      if (e >= mine.size() || e >= theirs.size() || mine[e] != theirs[e])
        bad("it holds another model: tensor " + std::to_string(e) + " is " +
            (e < theirs.size() ? theirs[e] : "absent") + " in the checkpoint, " + (e < mine.size() ? mine[e] : "absent") +
            " in this plan");
    if (text("optimizer") != ckpt::optimizer_name(opt))
      bad("written with " + text("optimizer") + "'s state; this trainer runs " + ckpt::optimizer_name(opt));
    // every number read is range-checked before use
    const std::string step = text("step"), world = text("world");
    const std::optional<long long> step_n = ckpt::whole_number(step, 0, ckpt::max_count);
    if (!step_n) bad("step \"" + step + "\" is not a step number (a whole number from 0 to 2^53)");
    info.step = *step_n;
    const std::optional<long long> world_n = ckpt::whole_number(world, 1, 1 << 24);
    if (!world_n) bad("world \"" + world + "\" is not a number of processes");
    // each file's digest (an index written before digests has none: step and world still bind)
    const io::json::value* digests = object(root, "file_crc32");
    for (auto [key, out] : {std::pair{"user", &info.user}, std::pair{"trainer", &info.trainer}})
      if (const io::json::value* u = object(*meta, key))
        for (const auto& e : u->items())
          if (e.value().is_string()) (*out)[e.key()] = e.value().get<std::string>();
    // the trainer's own entries, read by the trainer after every rank agreed
    for (const auto& [key, lo, hi] : {std::tuple{"updates", 0LL, info.step}, std::tuple{"loss_scale.clean_steps", 0LL,
                                                                                        ckpt::max_count}})
      if (const auto e = info.trainer.find(key); e != info.trainer.end() && !ckpt::whole_number(e->second, lo, hi))
        bad(std::string("trainer entry ") + key + " \"" + e->second + "\" is not a count from " + std::to_string(lo) +
            " to " + std::to_string(hi));
    if (const auto e = info.trainer.find("loss_scale"); e != info.trainer.end()) {
      double v = 0;
      const auto [end, ec] = std::from_chars(e->second.data(), e->second.data() + e->second.size(), v);
      if (ec != std::errc{} || end != e->second.data() + e->second.size() || !(v > 0) || !std::isfinite(v))
        bad("trainer entry loss_scale \"" + e->second + "\" is not a positive finite number");
    }
    // every file listed, at its recorded size (a truncated file fails here, by name)
    for (const auto& e : files->items()) {
      const io::json::value& recorded = e.value();
      const std::string path = dir + "/" + file_name(e.key(), "the files entry");
      std::error_code ec;
      const auto size = std::filesystem::file_size(path, ec);
      if (ec) throw io::checkpoint_error(path, "missing: " + ec.message());
      if (io::json::natural(recorded) != std::optional<std::uint64_t>(size))
        throw io::checkpoint_error(path, "holds " + std::to_string(size) + " bytes, the index says " +
                                             recorded.dump() + ": truncated or replaced");
    }
    std::map<std::string, std::string, std::less<>> where;
    for (const auto& e : map->items()) {
      const std::string& piece = e.key();
      if (!e.value().is_string())
        bad("weight_map entry " + piece + " is " + io::json::described(e.value()) + ", not a file name");
      where[piece] = file_name(e.value().get<std::string>(), "weight_map entry " + piece + ": file");
    }
    std::map<std::string, std::unique_ptr<io::reader>> open;
    // each file opened must belong to the index's save: its step, world, rank and digest
    auto reader_of = [&](const std::string& file) -> const io::reader& {
      auto& r = open[file];
      if (r) return *r;
      r = std::make_unique<io::reader>(dir + "/" + file);
      auto meta_of = [&](std::string_view key) { return r->metadata(key).value_or("none"); };
      const std::string digest = meta_of(io::header_crc_key);
      std::string recorded = digest;
      if (digests) {
        const auto d = digests->find(file);
        recorded = d != digests->end() && d->is_string() ? d->get<std::string>() : "none";
      }
      int rank = -1, of = -1;
      const bool named = std::sscanf(file.c_str(), "rank-%d-of-%d.safetensors", &rank, &of) == 2;
      if (meta_of("checkpoint.step") != step || meta_of("checkpoint.world") != world || digest != recorded ||
          (named && meta_of("checkpoint.rank") != std::to_string(rank)))
        throw io::checkpoint_error(
            r->path(), "belongs to another save: it was written after step " + meta_of("checkpoint.step") + " by rank " +
                           meta_of("checkpoint.rank") + " of " + meta_of("checkpoint.world") + " (header CRC " +
                           digest + "), the index is of step " + step + ", world " + world +
                           " and records header CRC " + recorded + " for it: the checkpoint mixes two saves");
      return *r;
    };
    // the blocks a tensor was saved in: From's (compile time) or what the index lists
    auto saved_blocks = [&](int i, int k, const std::string& name) {
      if (from) return (*from)[idx(i)][idx(k)];
      if (where.count(name)) return 1;
      const std::string first = name + ".shard0of";
      const auto it = where.lower_bound(first);
      if (it == where.end() || it->first.compare(0, first.size(), first) != 0)
        bad("tensor " + name + " is not in the checkpoint");
      // n from the file: a whole number of blocks, at most one element each
      const std::string_view count = std::string_view(it->first).substr(first.size());
      const std::optional<long long> n =
          ckpt::whole_number(count, 1, P::layer_plans[idx(i)].desc.params[idx(k)].shape.numel());
      if (!n) bad("piece " + it->first + ": \"" + std::string(count) + "\" is not a block count of " + name);
      return static_cast<int>(*n);
    };
    // a tensor's logical values, assembled from its pieces
    auto assemble = [&](int i, int k, const std::string& prefix) {
      const layer_plan& lp = P::layer_plans[idx(i)];
      const shape_t whole = lp.desc.params[idx(k)].shape;
      const std::string name = ckpt::tensor_name<P>(i, k);
      const int n = saved_blocks(i, k, name);
      std::vector<double> full(uz(whole.numel()));
      for (int b = 0; b < n; ++b) {
        const std::string piece = prefix + ckpt::piece_name(name, b, n);
        const auto at = where.find(piece);
        if (at == where.end())
          bad("piece " + piece + " is missing (" +
              (from ? "the plan named as the writer cuts " + name + " into " + std::to_string(n) +
                          " blocks: was the checkpoint written by another plan?)"
                    : "the index lists " + name + " in " + std::to_string(n) + " blocks)"));
        const io::reader& r = reader_of(at->second);
        if (!r.has(piece)) throw io::checkpoint_error(r.path(), "tensor " + piece + " is missing");
        // its shape: the logical one with every cut axis divided by n
        const std::vector<std::uint64_t> got = r.info(piece).shape;
        shape_t local = whole;
        bool ok = got.size() == std::size_t(whole.rank);
        for (int a = 0; ok && a < whole.rank; ++a) {
          const auto d = static_cast<std::uint64_t>(whole.dim[idx(a)]);
          ok = got[idx(a)] > 0 && d % got[idx(a)] == 0;  // 2D/2.5D/3D cut two axes
          local.dim[idx(a)] = static_cast<int>(got[idx(a)]);
        }
        if (!ok || local.numel() * n != whole.numel())
          throw io::checkpoint_error(r.path(), "tensor " + piece + " has shape " + ckpt::dims_text(got) +
                                                   ", not one of " + std::to_string(n) + " blocks of " +
                                                   ckpt::dims_text(ckpt::dims(whole)));
        const std::vector<double> v = ckpt::values(r, piece);
        for (std::size_t e = 0; e < v.size(); ++e) full[logical_index(whole, local, b, e)] = v[e];
      }
      return full;
    };
    const std::vector<std::string> states = ckpt::state_names(opt);
    for (std::size_t s = 0; s < states.size(); ++s)
      for (int g = 0; g < 2; ++g) flat[s][idx(g)].assign(uz(store_.elems(g)), M(0));
    for (int i = 0; i < P::num_layers; ++i) {
      if (!store_.owns(i)) continue;
      const layer_plan& lp = P::layer_plans[idx(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const shape_t whole = lp.desc.params[idx(k)].shape, local = lp.local_params[idx(k)];
        const lower::tensor_place& pl = store_t::place(i, k);
        auto mine_of = [&](const std::vector<double>& full, M* out) {
          for (long long e = 0; e < pl.size; ++e)
            out[e] = static_cast<M>(full[logical_index(whole, local, P::param_block(i, k, me_.index), static_cast<std::uint64_t>(e))]);
        };
        // a tied tensor's second copy is read from its owner's pieces
        const int si = P::tie.is_user(i, k) ? P::tie.owner : i, sk = P::tie.is_user(i, k) ? P::tie.owner_param : k;
        params.emplace_back(uz(pl.size));
        mine_of(assemble(si, sk, ""), params.back().data());
        for (std::size_t s = 0; s < states.size(); ++s)
          mine_of(assemble(si, sk, "optimizer." + states[s] + "."), flat[s][idx(pl.group)].data() + pl.offset);
      }
    }
  }

  typename Backend::queue& q_;
  Comm& world_;
  store_t& store_;
  rank_coord me_;
  std::array<Comm*, 2> groups_;
};

}  // namespace exec
}  // namespace strata
