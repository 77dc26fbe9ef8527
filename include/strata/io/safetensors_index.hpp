#pragma once
// strata-header: host-only
// The index of a checkpoint sharded over several safetensors files, in the Hugging Face
// layout (model.safetensors.index.json), so that transformers-style loaders find the shards:
//
//   {"metadata": {"total_size": 123456, "<key>": "<value>"},
//    "weight_map": {"<tensor name>": "<shard file name>", ...}}
//
// Shard names are relative to the index's directory. Written atomically (io/file.hpp),
// read strictly (io/json.hpp); every failure to read is a checkpoint_error.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "strata/io/file.hpp"
#include "strata/io/json.hpp"

namespace strata::io {

struct safetensors_index {
  std::map<std::string, std::string> metadata;    // besides total_size; on read, a value that
                                                  // is not a string is kept as its JSON text
  std::optional<std::uint64_t> total_size;        // bytes of tensor data over all shards
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
};

// The index as JSON text, keys sorted and indented as Hugging Face writes it
// (json.dumps(index, indent=2, sort_keys=True)).
inline std::string to_json(const safetensors_index& index) {
  if (index.metadata.count("total_size"))
    throw std::invalid_argument("safetensors index: put total_size in the total_size field, not in metadata");
  json::value meta = json::value::object();
  if (index.total_size) meta["total_size"] = *index.total_size;
  for (const auto& [k, v] : index.metadata) meta[k] = v;
  const json::value doc = {{"metadata", std::move(meta)}, {"weight_map", index.weight_map}};
  return json::dump(doc, 2) + "\n";  // std::invalid_argument for a name that is not UTF-8
}

inline void write_index(const std::string& path, const safetensors_index& index) {
  const std::string text = to_json(index);
  write_atomic(path, [&](atomic_file_sink& sink) { sink.write(text.data(), text.size()); });
}

// Parses index JSON; `name` stands for the file in messages.
inline safetensors_index parse_index(std::string_view text, const std::string& name) {
  json::value root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw checkpoint_error(name, "the index JSON is malformed" +
                                     (e.offset ? " at byte " + std::to_string(*e.offset) : std::string()) + ": " +
                                     e.problem);
  }
  if (!root.is_object()) throw checkpoint_error(name, "the index is not a JSON object");
  safetensors_index index;
  if (const auto meta = root.find("metadata"); meta != root.end()) {
    if (!meta->is_object()) throw checkpoint_error(name, "\"metadata\" is not an object");
    for (const auto& [k, v] : meta->items()) {
      if (k == "total_size") {
        index.total_size = json::natural(v);
        if (!index.total_size) throw checkpoint_error(name, "metadata.total_size is not a non-negative integer");
      } else {
        index.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      }
    }
  }
  const auto map = root.find("weight_map");
  if (map == root.end()) throw checkpoint_error(name, "the index has no \"weight_map\"");
  if (!map->is_object()) throw checkpoint_error(name, "\"weight_map\" is not an object");
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string() || file.get_ref<const std::string&>().empty())
      throw checkpoint_error(name, "weight_map entry '" + tensor + "' is not a file name");
    index.weight_map[tensor] = file.get<std::string>();
  }
  return index;  // other top-level keys are ignored, as Hugging Face's loaders do
}

inline safetensors_index read_index(const std::string& path) {
  const auto bytes = read_file(path);
  return parse_index(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace strata::io
