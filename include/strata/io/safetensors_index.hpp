#pragma once
// strata-header: host-only
// The index of a checkpoint sharded over several safetensors files, in the Hugging Face
// layout (model.safetensors.index.json), so that transformers-style loaders find the shards:
//
//   {"metadata": {"total_size": 123456, "<key>": "<value>"},
//    "weight_map": {"<tensor name>": "<shard file name>", ...}}
//
// Shard names are relative to the index's directory. Written atomically (io/file.hpp),
// read with the strict parser of io/json.hpp; every failure is a checkpoint_error.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "strata/io/file.hpp"
#include "strata/io/json.hpp"

namespace strata::io {

struct safetensors_index {
  std::map<std::string, std::string> metadata;    // besides total_size; on read, a value that
                                                  // is not a string is kept as its JSON text
  std::optional<std::uint64_t> total_size;        // bytes of tensor data over all shards
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
};

// The index as JSON text, sorted and indented as Hugging Face writes it.
inline std::string to_json(const safetensors_index& index) {
  if (index.metadata.count("total_size"))
    throw std::invalid_argument("safetensors index: put total_size in the total_size field, not in metadata");
  std::string out = "{\n  \"metadata\": {";
  const char* sep = "\n";
  if (index.total_size) {
    out += std::string(sep) + "    \"total_size\": " + std::to_string(*index.total_size);
    sep = ",\n";
  }
  for (const auto& [k, v] : index.metadata) {
    out += std::string(sep) + "    ";
    json::append_quoted(out, k);
    out += ": ";
    json::append_quoted(out, v);
    sep = ",\n";
  }
  out += std::string(*sep == ',' ? "\n  " : "") + "},\n  \"weight_map\": {";
  sep = "\n";
  for (const auto& [name, file] : index.weight_map) {
    out += std::string(sep) + "    ";
    json::append_quoted(out, name);
    out += ": ";
    json::append_quoted(out, file);
    sep = ",\n";
  }
  out += std::string(*sep == ',' ? "\n  " : "") + "}\n}\n";
  return out;
}

inline void write_index(const std::string& path, const safetensors_index& index) {
  const std::string text = to_json(index);
  write_atomic(path, [&](atomic_file_sink& sink) { sink.write(text.data(), text.size()); });
}

// Parses index JSON; `name` stands for the file in messages.
inline safetensors_index parse_index(std::string_view text, const std::string& name) {
  using kind = json::value::kind;
  json::value root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw checkpoint_error(name, "the index JSON is malformed at byte " + std::to_string(e.offset) + ": " + e.problem);
  }
  if (root.type != kind::object) throw checkpoint_error(name, "the index is not a JSON object");
  safetensors_index index;
  if (const json::value* meta = root.find("metadata")) {
    if (meta->type != kind::object) throw checkpoint_error(name, "\"metadata\" is not an object");
    for (const auto& [k, v] : meta->members) {
      if (k == "total_size") {
        if (v.type != kind::integer || v.integer < 0)
          throw checkpoint_error(name, "metadata.total_size is not a non-negative integer");
        index.total_size = static_cast<std::uint64_t>(v.integer);
      } else {
        index.metadata[k] = v.type == kind::string ? v.text : std::string(text.substr(v.begin, v.end - v.begin));
      }
    }
  }
  const json::value* map = root.find("weight_map");
  if (!map) throw checkpoint_error(name, "the index has no \"weight_map\"");
  if (map->type != kind::object) throw checkpoint_error(name, "\"weight_map\" is not an object");
  for (const auto& [tensor, file] : map->members) {
    if (file.type != kind::string || file.text.empty())
      throw checkpoint_error(name, "weight_map entry '" + tensor + "' is not a file name");
    index.weight_map[tensor] = file.text;
  }
  return index;  // other top-level keys are ignored, as Hugging Face's loaders do
}

inline safetensors_index read_index(const std::string& path) {
  const auto bytes = read_file(path);
  return parse_index(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace strata::io
