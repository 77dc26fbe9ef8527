#pragma once
// Checkpoints: a directory with one safetensors file per rank and an index.
//
//   <dir>/rank-00003-of-00008.safetensors   this rank's pieces: parameters (master
//                                           precision) and optimizer state
//   <dir>/index.json                        the model, the files, and each piece's file and
//                                           box (exec/checkpoint_index.hpp)
//
// Names are the model's, whatever the plan: "layers.7.Linear.weight" for a tensor a device
// holds whole, "layers.7.Linear.weight.shard1of2" for the second of two blocks a Split<2>
// cuts it into (on every axis the plan cuts, as exec::logical_index numbers them; the index
// gives each piece's box [start, stop) of the whole tensor in plain fields), and
// "optimizer.exp_avg.<piece>" (Adam/AdamW: exp_avg, exp_avg_sq; SGD with momentum:
// momentum_buffer) for the state, in PyTorch's names, listed apart from the weights in the
// index's optimizer_map. Data-parallel replicas hold the same values, so replica 0 writes
// them; ZeRO's partitioned state is gathered first. A file therefore does not depend on ZeRO,
// and a reader of another plan assembles each tensor it needs from the boxes it finds
// (exec/checkpoint_read.hpp): resharding.
//
// Writing is atomic: the files go to <dir>.tmp, each written to a temporary name, fsynced
// and renamed (io/file.hpp); rank 0 writes the index last, then replaces <dir> by the new
// directory. A save is a snapshot (collective: host copies), a write (each rank alone) and
// a commit (collective), so that the write can run in the background (checkpoint_async.hpp). Every file is bound to its save: each rank file carries the step, its rank and
// the world, the index records each file's header CRC (a digest of the file: the header
// holds every tensor's CRC), and a reader refuses a directory whose files come from two
// saves. Every file is checksummed (CRC-32 per tensor and of the header). Reading
// checks the index, the model, the optimizer, each file's size and every checksum on every
// rank, stages everything in host memory, and the ranks agree before anything is stored:
// a truncated, corrupt or mismatched checkpoint is the same agreed_error on every rank, and
// the trainer is left as it was.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "strata/core/agreed_error.hpp"
#include "strata/core/communicator.hpp"
#include "strata/core/precision.hpp"
#include "strata/exec/checkpoint_async.hpp"
#include "strata/exec/checkpoint_format.hpp"
#include "strata/exec/checkpoint_index.hpp"
#include "strata/exec/checkpoint_read.hpp"
#include "strata/exec/init.hpp"
#include "strata/exec/layer_state.hpp"
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
  using states_t = layer_states<P, Backend, stat_t<T>>;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }

 public:
  checkpointer(typename Backend::queue& q, Comm& world, store_t& store, states_t& states, rank_coord me,
               std::array<Comm*, 2> groups)
      : q_(q), world_(world), store_(store), states_(states), me_(me), groups_(groups) {}

  void save(const std::string& dir, long long step, const optimizer& opt,
            const std::map<std::string, std::string>& user, const std::map<std::string, std::string>& trainer) {
    const checkpoint_snapshot s = snapshot(dir, step, opt, user, trainer);
    commit(world_, s, write(s));
  }

  // A save in three parts (exec/checkpoint_async.hpp runs the write on a thread).
  // Collective: the temp directory, then everything this rank writes, copied to host memory.
  checkpoint_snapshot snapshot(const std::string& dir, long long step, const optimizer& opt,
                               const std::map<std::string, std::string>& user,
                               const std::map<std::string, std::string>& trainer) {
    const int W = world_.size(), r = world_.rank();
    checkpoint_snapshot out{.dir = dir,
                            .tmp = dir + ".tmp",
                            .file = dir + ".tmp/" + ckpt::rank_file(r, W),
                            .step = step,
                            .opt = opt,
                            .user = user,
                            .trainer = trainer,
                            .tensors = {}};
    std::string problem;
    if (r == 0) problem = attempt(dir, [&] {
        std::filesystem::remove_all(out.tmp);
        std::filesystem::create_directories(out.tmp);
      });
    agree(world_, problem);
    const std::vector<std::string> states = ckpt::state_names(opt);
    // every moment of both groups, whole (ZeRO's partitions gathered): collective
    std::array<std::array<std::vector<M>, 2>, 2> flat;
    for (std::size_t s = 0; s < states.size(); ++s)
      for (int g = 0; g < 2; ++g) flat[s][idx(g)] = flat_state(static_cast<int>(s), g);
    store_.gather_whole(*groups_[0], *groups_[1]);  // Zero<3>: the masters, whole
    problem = attempt(dir, [&] {
      io::writer& w = out.tensors;
      std::vector<M> host;
      for (int i = 0; i < P::num_layers; ++i) {
        if (!store_.owns(i)) continue;
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) {
          if (!writes(i, k)) continue;
          const std::string piece =
              ckpt::piece_name(ckpt::tensor_name<P>(i, k), P::param_block(i, k, me_.index), ckpt::blocks<P>(i, k));
          const auto shape = ckpt::dims(P::layer_plans[idx(i)].local_params[idx(k)]);
          const lower::tensor_place& pl = store_t::place(i, k);
          host.resize(uz(pl.size));
          store_.read_master(i, k, host.data());  // on a GPU: device to host
          w.add(piece, shape, host);              // add copies
          for (std::size_t s = 0; s < states.size(); ++s) {
            const M* src = flat[s][idx(pl.group)].data() + pl.offset;
            w.add("optimizer." + states[s] + "." + piece, shape, std::span<const M>(src, uz(pl.size)));
          }
        }
      }
      // kept statistics, the same on every device of the part: replica 0's first device
      for (int i = 0; i < P::num_layers && me_.data == 0 && me_.index == 0; ++i) {
        if (!states_.of(i)) continue;
        const std::vector<double> kept = states_.kept(q_, i);
        std::size_t at = 0;
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_state; ++k) {
          const shape_t sh = P::layer_plans[idx(i)].desc.state[idx(k)].shape;
          std::vector<M> v(kept.begin() + std::ptrdiff_t(at), kept.begin() + std::ptrdiff_t(at + uz(sh.numel())));
          w.add(ckpt::state_name<P>(i, k), ckpt::dims(sh), v);
          at += uz(sh.numel());
        }
      }
      w.set_metadata("checkpoint.step", std::to_string(step));
      w.set_metadata("checkpoint.rank", std::to_string(r));
      w.set_metadata("checkpoint.world", std::to_string(W));
    });
    store_.drop_whole();
    agree(world_, problem);
    return out;
  }
  // This rank's file; no communication (a background thread may run it). The problem, or nothing.
  static std::string write(const checkpoint_snapshot& s) {
    return attempt(s.dir, [&] { s.tensors.write(s.file); });
  }
  // Collective: the same verdict on every rank's write; then rank 0 writes the index and
  // replaces <dir>. Static: it needs only the world (the commit of a background save).
  static void commit(Comm& world, const checkpoint_snapshot& s, const std::string& written) {
    agree(world, written);
    std::string problem;
    if (world.rank() == 0) problem = attempt(s.dir, [&] {
        write_index(world.size(), s);
        replace(s.tmp, s.dir);
      });
    agree(world, problem);
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
      std::array<std::array<shape_t, max_layer_params>, idx(P::num_layers)> b{};
      for (int i = 0; i < P::num_layers; ++i)
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k)
          b[idx(i)][idx(k)] = From::layer_plans[idx(i)].local_params[idx(k)];
      return b;
    }();
    return load_checked(dir, opt, &map);
  }

 private:
  // the writer's local shape of each tensor (load_from), or null: any plan
  using block_map = std::array<std::array<shape_t, max_layer_params>, idx(P::num_layers)>;

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
  void agree(const std::string& problem) { agree(world_, problem); }
  static void agree(Comm& world, const std::string& problem) {
    try {
      world.agree(problem.empty(), problem);
    } catch (const comm::agreement_error& e) {  // a failed communication stays a comm_error
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

  static void write_index(int W, const checkpoint_snapshot& s) {
    std::map<std::string, std::uint64_t> files;
    std::map<std::string, std::string> digests;
    for (int r = 0; r < W; ++r) {
      const std::string f = ckpt::rank_file(r, W);
      files[f] = static_cast<std::uint64_t>(std::filesystem::file_size(s.tmp + "/" + f));
      digests[f] = io::header_crc_of(s.tmp + "/" + f);  // binds each file to this save
    }
    const std::string text = ckpt::index_text<P>(s.step, W, s.opt, s.user, s.trainer, files, digests);
    io::write_atomic(s.tmp + "/" + ckpt::index_name,
                     [&](io::atomic_file_sink& sink) { sink.write(text.data(), text.size()); });
  }

  // <dir> becomes the new checkpoint: the old one (if any) is moved aside, then removed;
  // the renames are made durable by syncing the parent directory.
  static void replace(const std::string& tmp, const std::string& dir) {
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
    std::vector<std::vector<double>> kept(idx(P::num_layers));  // each layer's kept statistics here
    const std::string problem = attempt(dir, [&] {
      stage(dir, opt, from, info, params, flat);
      ckpt::tensor_source src(dir);
      for (int i = 0; i < P::num_layers; ++i) {
        if (!states_.of(i)) continue;
        for (int k = 0; k < P::layer_plans[idx(i)].desc.num_state; ++k) {
          const std::vector<double> v =
              src.whole(ckpt::state_name<P>(i, k), ckpt::dims(P::layer_plans[idx(i)].desc.state[idx(k)].shape));
          kept[idx(i)].insert(kept[idx(i)].end(), v.begin(), v.end());
        }
      }
    });
    agree(problem);
    for (int i = 0; i < P::num_layers; ++i)
      if (states_.of(i)) states_.set_kept(q_, i, kept[idx(i)]);
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
    ckpt::tensor_source src(dir);  // the index, checked whole
    const ckpt::index& ix = src.entries();
    ckpt::check_model<P>(ix);
    if (ix.optimizer != ckpt::optimizer_name(opt))
      ix.fail("written with " + ix.optimizer + "'s state; this trainer runs " + ckpt::optimizer_name(opt));
    info.step = ix.step;
    info.user = ix.user;
    info.trainer = ix.trainer;
    const std::vector<std::string> states = ckpt::state_names(opt);
    for (std::size_t s = 0; s < states.size(); ++s)
      for (int g = 0; g < 2; ++g) flat[s][idx(g)].assign(uz(store_.elems(g)), M(0));
    for (int i = 0; i < P::num_layers; ++i) {
      if (!store_.owns(i)) continue;
      const layer_plan& lp = P::layer_plans[idx(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const shape_t whole = lp.desc.params[idx(k)].shape, local = lp.local_params[idx(k)];
        const std::string name = ckpt::tensor_name<P>(i, k);
        if (from && !P::tie.is_user(i, k)) writer_blocks(ix, name, whole, (*from)[idx(i)][idx(k)], src.pieces(name));
        const lower::tensor_place& pl = store_t::place(i, k);
        auto mine_of = [&](const std::vector<double>& full, M* out) {
          for (long long e = 0; e < pl.size; ++e)
            out[e] = static_cast<M>(
                full[logical_index(whole, local, P::param_block(i, k, me_.index), static_cast<std::uint64_t>(e))]);
        };
        // a tied tensor's second copy is read from its owner's pieces
        const int si = P::tie.is_user(i, k) ? P::tie.owner : i, sk = P::tie.is_user(i, k) ? P::tie.owner_param : k;
        params.emplace_back(uz(pl.size));
        const std::string source = ckpt::tensor_name<P>(si, sk);
        mine_of(src.whole(source, ckpt::dims(whole)), params.back().data());
        for (std::size_t s = 0; s < states.size(); ++s)
          mine_of(src.whole(source, ckpt::dims(whole), states[s]), flat[s][idx(pl.group)].data() + pl.offset);
      }
    }
  }
  // load_from<From>: the checkpoint holds `name` in exactly the blocks From cuts it into.
  static void writer_blocks(const ckpt::index& ix, const std::string& name, const shape_t& whole, const shape_t& local,
                            const std::vector<ckpt::piece>& pieces) {
    std::vector<ckpt::box> want, have;
    for (int b = 0; b < static_cast<int>(whole.numel() / local.numel()); ++b)
      want.push_back(ckpt::box_of(whole, local, b));
    for (const ckpt::piece& p : pieces) have.push_back(p.where);
    auto order = [](const ckpt::box& a, const ckpt::box& b) { return a.start < b.start; };
    std::sort(want.begin(), want.end(), order);
    std::sort(have.begin(), have.end(), order);
    if (want != have)
      ix.fail("tensor " + name + " is in " + std::to_string(have.size()) + " pieces (the first " +
              ckpt::box_text(have.front()) + "), the plan named as the writer cuts it into " +
              std::to_string(want.size()) + (want.size() == 1 ? " block" : " blocks") + " (the first " +
              ckpt::box_text(want.front()) + "): was the checkpoint written by another plan?");
  }

  typename Backend::queue& q_;
  Comm& world_;
  store_t& store_;
  states_t& states_;
  rank_coord me_;
  std::array<Comm*, 2> groups_;
};

}  // namespace exec
}  // namespace strata
