#pragma once
// A checkpoint's index.json (format strata-checkpoint-2): what the save holds and where.
//
//   {"metadata": {"format": "strata-checkpoint-2", "step": "3", "world": "4",
//                 "optimizer": "AdamW", "trainer": {...}, "user": {...}},
//    "model": [{"tensor": "layers.0.Embedding.table", "shape": [32, 16]}, ...],
//    "files": {"rank-00000-of-00004.safetensors": 12345, ...},
//    "file_crc32": {"rank-00000-of-00004.safetensors": "89abcdef", ...},
//    "weight_map": {"<piece>": "<file>", ...},                 the parameters
//    "optimizer_map": {"optimizer.exp_avg.<piece>": "<file>", ...},
//    "pieces": {"<piece>": {"tensor": "layers.0.Embedding.table",
//                           "start": [0, 0], "stop": [16, 16]}, ...}}
//
// A piece is the box [start, stop) (one entry per axis) of a whole tensor; the pieces of a
// tensor tile it. The optimizer's state piece "optimizer.<state>.<piece>" has <piece>'s box.
// Piece names ("layers.7.Linear.weight.shard1of2") are only names: a reader takes the box
// from the fields. Numbers are JSON integers; the step and the world are strings, as the
// trainer's and the user's entries are.
//
// read_index checks everything in the index before anything else is read: the format, every
// number (range-checked before use), every file name (a plain name inside the directory), each
// file's size on disk, that the pieces of each tensor tile it exactly and that every map
// names a listed file. Each problem is a checkpoint_error naming index.json.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "strata/core/communicator.hpp"
#include "strata/exec/checkpoint_format.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/io/file.hpp"
#include "strata/io/json.hpp"
#include "strata/plan/plan.hpp"

namespace strata::exec::ckpt {

struct tensor_entry {
  std::string name;
  std::vector<std::uint64_t> shape;
};
struct piece {
  std::string name, file;
  box where;
};

// The index as read and checked.
struct index {
  std::string path;  // of index.json, for messages
  std::string step_text, world_text, optimizer;
  long long step = 0;
  std::map<std::string, std::string> user, trainer;
  std::vector<tensor_entry> model;
  std::map<std::string, std::uint64_t> files;
  std::optional<std::map<std::string, std::string>> digests;  // file -> header CRC
  std::map<std::string, std::vector<piece>, std::less<>> pieces;  // by tensor; they tile it
  std::map<std::string, std::string, std::less<>> optimizer_map;  // state piece -> file
  [[noreturn]] void fail(const std::string& what) const { throw io::checkpoint_error(path, what); }
};

inline std::uint64_t volume(const box& b) {
  std::uint64_t v = 1;
  for (std::size_t a = 0; a < b.start.size(); ++a) v *= b.stop[a] - b.start[a];
  return v;
}
inline bool overlap(const box& a, const box& b) {
  for (std::size_t x = 0; x < a.start.size(); ++x)
    if (a.stop[x] <= b.start[x] || b.stop[x] <= a.start[x]) return false;
  return true;
}
inline std::string box_text(const box& b) {
  std::string t = "[";
  for (std::size_t a = 0; a < b.start.size(); ++a)
    t += (a ? ", " : "") + std::to_string(b.start[a]) + ":" + std::to_string(b.stop[a]);
  return t + "]";
}

// The model's tensors in the index's order: every parameter (a tied one once, as its owner's),
// then every kept statistic (BatchNorm2d's running_mean, running_var).
template <class P>
std::vector<tensor_entry> model_tensors() {
  std::vector<tensor_entry> m;
  for (int i = 0; i < P::num_layers; ++i) {
    const layer_desc& d = P::layer_plans[static_cast<std::size_t>(i)].desc;
    for (int k = 0; k < d.num_params; ++k)
      if (!P::tie.is_user(i, k)) m.push_back({tensor_name<P>(i, k), dims(d.params[static_cast<std::size_t>(k)].shape)});
  }
  for (int i = 0; i < P::num_layers; ++i) {
    const layer_desc& d = P::layer_plans[static_cast<std::size_t>(i)].desc;
    for (int k = 0; k < d.num_state; ++k) m.push_back({state_name<P>(i, k), dims(d.state[static_cast<std::size_t>(k)].shape)});
  }
  return m;
}

// The index of a save of plan P on W ranks: every rank's pieces come from the plan, so rank
// 0 writes it without messages. `files` and `digests`: each rank file's size and header CRC.
template <class P>
std::string index_text(long long step, int W, const optimizer& opt, const std::map<std::string, std::string>& user,
                       const std::map<std::string, std::string>& trainer,
                       const std::map<std::string, std::uint64_t>& files,
                       const std::map<std::string, std::string>& digests) {
  using json = nlohmann::ordered_json;  // in this order, for a reader's eyes
  json j;
  auto& meta = j["metadata"];
  meta["format"] = format;
  meta["step"] = std::to_string(step);
  meta["world"] = std::to_string(W);
  meta["optimizer"] = optimizer_name(opt);
  meta["trainer"] = trainer;
  meta["user"] = user;
  // (each built apart: a reference into j would not survive adding the next key)
  json model = json::array(), weights = json::object(), states = json::object(), pieces = json::object();
  // a tied tensor is stored once, as its owner's (plan/sharding.hpp's tie_info)
  for (const tensor_entry& e : model_tensors<P>()) model.push_back({{"tensor", e.name}, {"shape", e.shape}});
  for (int r = 0; r < W; ++r) {
    const rank_coord c = P::coord(r);
    if (c.data != 0) continue;  // replica 0 writes
    for (int i = 0; i < P::num_layers; ++i) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      if (P::stage_of_part(lp.part) != c.stage) continue;
      for (int k = 0; k < lp.desc.num_params; ++k) {
        if (P::param_holder(i, k, c.index) != c.index) continue;  // another device writes this block
        if (P::tie.is_user(i, k)) continue;                        // stored as its owner
        const int b = P::param_block(i, k, c.index), n = blocks<P>(i, k);
        const std::string name = tensor_name<P>(i, k), p = piece_name(name, b, n), file = rank_file(r, W);
        const box where =
            box_of(lp.desc.params[static_cast<std::size_t>(k)].shape, lp.local_params[static_cast<std::size_t>(k)], b);
        weights[p] = file;
        for (const std::string& s : state_names(opt)) states["optimizer." + s + "." + p] = file;
        pieces[p] = {{"tensor", name}, {"start", where.start}, {"stop", where.stop}};
      }
      // kept statistics (the same on every device of the part): whole, from its first device
      for (int k = 0; k < lp.desc.num_state && c.index == 0; ++k) {
        const std::string name = state_name<P>(i, k);
        const auto shape = dims(lp.desc.state[static_cast<std::size_t>(k)].shape);
        weights[name] = rank_file(r, W);
        pieces[name] = {{"tensor", name}, {"start", std::vector<std::uint64_t>(shape.size(), 0)}, {"stop", shape}};
      }
    }
  }
  j["model"] = std::move(model);
  j["files"] = files;
  j["file_crc32"] = digests;
  j["weight_map"] = std::move(weights);
  j["optimizer_map"] = std::move(states);
  j["pieces"] = std::move(pieces);
  return io::json::dump(j, 2) + "\n";  // std::invalid_argument for a non-UTF-8 entry
}

namespace detail {

// A file the index names: a plain name inside the directory, never a path out of it.
inline bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos && f.find('\0') == std::string::npos;
}

// The numbers of an array of non-negative integers, each at most `most`, or nothing.
inline std::optional<std::vector<std::uint64_t>> naturals(const io::json::value& v, std::uint64_t most) {
  if (!v.is_array() || v.size() > 4) return std::nullopt;  // shape_t's rank
  std::vector<std::uint64_t> out;
  for (const auto& e : v) {
    const auto n = io::json::natural(e);
    if (!n || *n > most) return std::nullopt;
    out.push_back(*n);
  }
  return out;
}

}  // namespace detail

// Reads and checks <dir>/index.json (see the top); every problem is a checkpoint_error.
inline index read_index(const std::string& dir) {
  index ix;
  ix.path = dir + "/" + index_name;
  const std::vector<std::byte> bytes = io::read_file(ix.path);
  const io::json::value root = [&] {
    try {
      return io::json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    } catch (const io::json::parse_error& e) {
      ix.fail(std::string("not a valid index: malformed JSON, ") + e.what());
    }
  }();
  auto member = [&](const io::json::value& in, const char* key, bool (io::json::value::*is)() const noexcept) {
    const auto it = in.find(key);
    return it != in.end() && ((*it).*is)() ? &*it : nullptr;
  };
  using V = io::json::value;
  const V* meta = root.is_object() ? member(root, "metadata", &V::is_object) : nullptr;
  const V* files = root.is_object() ? member(root, "files", &V::is_object) : nullptr;
  const V* weights = root.is_object() ? member(root, "weight_map", &V::is_object) : nullptr;
  if (!meta || !files || !weights) ix.fail("the index lacks its metadata, files or weight_map object");
  auto text = [&](const char* key) {
    const V* v = member(*meta, key, &V::is_string);
    if (!v) ix.fail(std::string("the index's metadata has no \"") + key + "\"");
    return v->get<std::string>();
  };
  if (text("format") == "strata-checkpoint-1")
    ix.fail("format \"strata-checkpoint-1\" is an older strata's layout (blocks known by their names only), which "
            "this strata does not read: load it with the strata that wrote it and save it again");
  if (text("format") != format) ix.fail("format \"" + text("format") + "\", expected \"" + format + "\"");
  const V* model = member(root, "model", &V::is_array);
  const V* states = member(root, "optimizer_map", &V::is_object);
  const V* pieces = member(root, "pieces", &V::is_object);
  if (!model || !states || !pieces) ix.fail("the index lacks its model array, optimizer_map or pieces object");
  ix.optimizer = text("optimizer");
  // every number read is range-checked before use
  ix.step_text = text("step");
  ix.world_text = text("world");
  const std::optional<long long> step = whole_number(ix.step_text, 0, max_count);
  if (!step) ix.fail("step \"" + ix.step_text + "\" is not a step number (a whole number from 0 to 2^53)");
  ix.step = *step;
  if (!whole_number(ix.world_text, 1, 1 << 24)) ix.fail("world \"" + ix.world_text + "\" is not a number of processes");
  for (auto [key, out] : {std::pair{"user", &ix.user}, std::pair{"trainer", &ix.trainer}})
    if (const V* u = member(*meta, key, &V::is_object))
      for (const auto& e : u->items())
        if (e.value().is_string()) (*out)[e.key()] = e.value().get<std::string>();
  // the trainer's own entries, read by the trainer after every rank agreed
  for (const auto& [key, lo, hi] :
       {std::tuple{"updates", 0LL, ix.step}, std::tuple{"loss_scale.clean_steps", 0LL, max_count}})
    if (const auto e = ix.trainer.find(key); e != ix.trainer.end() && !whole_number(e->second, lo, hi))
      ix.fail(std::string("trainer entry ") + key + " \"" + e->second + "\" is not a count from " + std::to_string(lo) +
              " to " + std::to_string(hi));
  if (const auto e = ix.trainer.find("loss_scale"); e != ix.trainer.end()) {
    double v = 0;
    const auto [end, ec] = std::from_chars(e->second.data(), e->second.data() + e->second.size(), v);
    if (ec != std::errc{} || end != e->second.data() + e->second.size() || !(v > 0) || !std::isfinite(v))
      ix.fail("trainer entry loss_scale \"" + e->second + "\" is not a positive finite number");
  }
  // the model: names and shapes, each small enough that its element count is exact
  std::map<std::string, std::size_t, std::less<>> tensor_at;
  for (const V& t : *model) {
    const V* name = t.is_object() ? member(t, "tensor", &V::is_string) : nullptr;
    const auto shape = t.is_object() && t.contains("shape") ? detail::naturals(t["shape"], 1ULL << 53)
                                                            : std::optional<std::vector<std::uint64_t>>();
    if (!name || !shape) ix.fail("model entry " + io::json::dump(t) + " is not {\"tensor\": name, \"shape\": [sizes]}");
    long double n = 1;
    for (auto d : *shape) n *= static_cast<long double>(d);
    if (n > static_cast<long double>(max_count))
      ix.fail("tensor " + name->get<std::string>() + " has shape " + dims_text(*shape) + ": over 2^53 elements");
    if (!tensor_at.emplace(name->get<std::string>(), ix.model.size()).second)
      ix.fail("tensor " + name->get<std::string>() + " is listed twice in the model");
    ix.model.push_back({name->get<std::string>(), *shape});
  }
  // every file listed, at its recorded size (a truncated file fails here, by name)
  for (const auto& e : files->items()) {
    if (!detail::plain_file_name(e.key()))
      ix.fail("the files entry \"" + e.key() + "\" is not a file name in the checkpoint's directory");
    const std::string path = dir + "/" + e.key();
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) throw io::checkpoint_error(path, "missing: " + ec.message());
    if (io::json::natural(e.value()) != std::optional<std::uint64_t>(size))
      throw io::checkpoint_error(path, "holds " + std::to_string(size) + " bytes, the index says " +
                                           e.value().dump() + ": truncated or replaced");
    ix.files[e.key()] = size;
  }
  // each file's digest (an index written before digests has none: step and world still bind)
  if (const V* d = member(root, "file_crc32", &V::is_object)) {
    ix.digests.emplace();
    for (const auto& e : d->items())
      if (e.value().is_string()) (*ix.digests)[e.key()] = e.value().get<std::string>();
  }
  auto file_of = [&](const std::string& entry, const V& v) {
    if (!v.is_string()) ix.fail(entry + " is " + io::json::described(v) + ", not a file name");
    const std::string f = v.get<std::string>();
    if (!detail::plain_file_name(f))
      ix.fail(entry + ": file \"" + f + "\" is not a file name in the checkpoint's directory");
    if (!ix.files.count(f)) ix.fail(entry + ": file \"" + f + "\" is not among the index's files");
    return f;
  };
  // the pieces: each a box of its tensor, in a listed file
  for (const auto& e : pieces->items()) {
    const std::string who = "piece " + e.key();
    const V& p = e.value();
    const V* tensor = p.is_object() ? member(p, "tensor", &V::is_string) : nullptr;
    if (!tensor) ix.fail(who + " is not {\"tensor\": name, \"start\": [...], \"stop\": [...]}");
    const auto t = tensor_at.find(tensor->get<std::string>());
    if (t == tensor_at.end()) ix.fail(who + ": tensor " + tensor->get<std::string>() + " is not in the model");
    const std::vector<std::uint64_t>& shape = ix.model[t->second].shape;
    const auto start = p.contains("start") ? detail::naturals(p["start"], 1ULL << 53) : std::nullopt;
    const auto stop = p.contains("stop") ? detail::naturals(p["stop"], 1ULL << 53) : std::nullopt;
    bool ok = start && stop && start->size() == shape.size() && stop->size() == shape.size();
    for (std::size_t a = 0; ok && a < shape.size(); ++a) ok = (*start)[a] < (*stop)[a] && (*stop)[a] <= shape[a];
    if (!ok)
      ix.fail(who + ": start " + (start ? dims_text(*start) : "?") + " and stop " + (stop ? dims_text(*stop) : "?") +
              " are not a box of " + t->first + " " + dims_text(shape));
    const auto w = weights->find(e.key());
    if (w == weights->end()) ix.fail(who + " is not in the weight_map");
    ix.pieces[t->first].push_back({e.key(), file_of("weight_map entry " + e.key(), *w), {*start, *stop}});
  }
  for (const auto& e : weights->items())
    if (!pieces->contains(e.key())) ix.fail("weight_map entry " + e.key() + " has no box in \"pieces\"");
  // each tensor tiled by its pieces: no overlap, every element covered
  for (const tensor_entry& t : ix.model) {
    const auto ps = ix.pieces.find(t.name);
    if (ps == ix.pieces.end()) ix.fail("tensor " + t.name + " has no pieces");
    std::uint64_t covered = 0, all = 1;
    for (auto d : t.shape) all *= d;
    for (std::size_t a = 0; a < ps->second.size(); ++a) {
      covered += volume(ps->second[a].where);
      for (std::size_t b = 0; b < a; ++b)
        if (overlap(ps->second[a].where, ps->second[b].where))
          ix.fail("pieces " + ps->second[b].name + " " + box_text(ps->second[b].where) + " and " + ps->second[a].name +
                  " " + box_text(ps->second[a].where) + " of " + t.name + " overlap");
    }
    if (covered != all)
      ix.fail("the pieces of " + t.name + " " + dims_text(t.shape) + " cover " + std::to_string(covered) + " of its " +
              std::to_string(all) + " elements");
  }
  for (const auto& e : states->items())
    ix.optimizer_map[e.key()] = file_of("optimizer_map entry " + e.key(), e.value());
  return ix;
}

// The first tensor where the index's model and plan P's differ, as a refusal.
template <class P>
void check_model(const index& ix) {
  const std::vector<tensor_entry> mine = model_tensors<P>();
  auto shown = [](const std::vector<tensor_entry>& m, std::size_t e) {
    return e < m.size() ? m[e].name + dims_text(m[e].shape) : std::string("absent");
  };
  for (std::size_t e = 0; e < std::max(mine.size(), ix.model.size()); ++e)
    if (e >= mine.size() || e >= ix.model.size() || mine[e].name != ix.model[e].name ||
        mine[e].shape != ix.model[e].shape)
      ix.fail("it holds another model: tensor " + std::to_string(e) + " is " + shown(ix.model, e) +
              " in the checkpoint, " + shown(mine, e) + " in this plan");
}

}  // namespace strata::exec::ckpt
