#pragma once
// strata-header: host-only
// safetensors writer: collects tensors and metadata, writes one file (io/safetensors.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/io/file.hpp"
#include "strata/io/json.hpp"
#include "strata/io/safetensors_format.hpp"

namespace strata::io {

// Collects tensors and metadata, then writes one file: serialize() or write(path).
class writer {
 public:
  writer() = default;
  writer(const writer&) = delete;  // views into a copied owner would dangle
  writer& operator=(const writer&) = delete;
  writer(writer&&) = default;
  writer& operator=(writer&&) = default;

  // Copies the bytes.
  void add(std::string name, dtype type, std::vector<std::uint64_t> shape, const void* data, std::size_t bytes) {
    auto& e = push(std::move(name), type, std::move(shape), bytes);
    const auto* p = static_cast<const std::byte*>(data);
    e.owned.assign(p, p + bytes);
  }
  // References the bytes, which must stay alive and unchanged until the last write.
  void add_view(std::string name, dtype type, std::vector<std::uint64_t> shape, const void* data, std::size_t bytes) {
    push(std::move(name), type, std::move(shape), bytes).view = {static_cast<const std::byte*>(data), bytes};
  }
  // Typed copy: T is stored as dtype_of<T>, or as `as` (e.g. a 2-byte bf16 type as BF16).
  template <class T>
  void add(std::string name, std::vector<std::uint64_t> shape, std::span<const T> values,
           std::optional<dtype> as = dtype_of<T>) {
    static_assert(std::is_trivially_copyable_v<T>);
    check_type<T>(name, as);
    add(std::move(name), *as, std::move(shape), values.data(), values.size_bytes());
  }
  template <class T>
  void add(std::string name, std::vector<std::uint64_t> shape, const std::vector<T>& values,
           std::optional<dtype> as = dtype_of<T>) {
    add(std::move(name), std::move(shape), std::span<const T>(values), as);
  }

  // Free-form string metadata; the "strata." and "crc32." keys are the writer's own.
  void set_metadata(std::string key, std::string value) {
    if (key.starts_with("strata.") || key.starts_with(tensor_crc_prefix))
      throw std::invalid_argument("safetensors writer: metadata key '" + key + "' is reserved");
    // Not UTF-8: throws now rather than at write time.
    json::quoted(key);
    json::quoted(value);
    metadata_[std::move(key)] = std::move(value);
  }

  // The complete file.
  std::vector<std::byte> serialize() const {
    std::string head = header();
    std::vector<std::byte> out(reinterpret_cast<const std::byte*>(head.data()),
                               reinterpret_cast<const std::byte*>(head.data() + head.size()));
    for (auto i : layout()) out.insert(out.end(), entries_[i].bytes().begin(), entries_[i].bytes().end());
    return out;
  }
  // Writes the file atomically (io/file.hpp): path holds the old file or the new, never a mix.
  void write(const std::string& path) const {
    const std::string head = header();
    write_atomic(path, [&](atomic_file_sink& sink) {
      sink.write(head.data(), head.size());
      for (auto i : layout()) sink.write(entries_[i].bytes().data(), entries_[i].bytes().size());
    });
  }

 private:
  struct entry {
    std::string name;
    dtype type;
    std::vector<std::uint64_t> shape;
    std::vector<std::byte> owned;
    std::span<const std::byte> view;
    bool is_view() const { return view.data() != nullptr; }
    std::span<const std::byte> bytes() const { return is_view() ? view : std::span<const std::byte>(owned); }
  };
  std::vector<entry> entries_;
  std::map<std::string, std::string> metadata_;

  template <class T>
  static void check_type(const std::string& name, std::optional<dtype> as) {
    const std::string who = "safetensors writer: tensor '" + name + "': ";
    if (!as) throw std::invalid_argument(who + "the element type has no dtype of its own; name one (e.g. dtype::BF16)");
    if (bits_of(*as) != 8 * sizeof(T))
      throw std::invalid_argument(who + "a " + std::to_string(sizeof(T)) + "-byte element type cannot hold " +
                                  std::string(name_of(*as)));
  }

  entry& push(std::string name, dtype type, std::vector<std::uint64_t> shape, std::size_t bytes) {
    const auto fail = [&](const std::string& why) {
      throw std::invalid_argument("safetensors writer: tensor '" + name + "': " + why);
    };
    if (name == "__metadata__") fail("the name is reserved for the metadata");
    json::quoted(name);  // not UTF-8 -> std::invalid_argument
    for (const auto& e : entries_)
      if (e.name == name) fail("added twice");
    const auto need = detail::tensor_bytes(type, shape);
    if (!need)
      fail("shape " + detail::shape_text(shape) + " of " + std::string(name_of(type)) +
           " is not a whole number of bytes");
    if (*need != bytes)
      fail("shape " + detail::shape_text(shape) + " of " + std::string(name_of(type)) + " needs " +
           std::to_string(*need) + " bytes, got " + std::to_string(bytes));
    return entries_.emplace_back(entry{std::move(name), type, std::move(shape), {}, {}});
  }

  // File order: by decreasing element size (keeps each tensor aligned), then insertion.
  std::vector<std::size_t> layout() const {
    std::vector<std::size_t> order(entries_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](auto a, auto b) { return bits_of(entries_[a].type) > bits_of(entries_[b].type); });
    return order;
  }

  // The length prefix and the padded header JSON, CRCs filled in.
  std::string header() const {
    auto meta = metadata_;
    meta[std::string(format_key)] = format_version;
    meta[std::string(header_crc_key)] = "00000000";
    for (const auto& e : entries_)
      meta[std::string(tensor_crc_prefix) + e.name] = detail::hex8(detail::crc32(e.bytes().data(), e.bytes().size()));

    // Compact, in file order: metadata first, then the tensors as the data holds them.
    nlohmann::ordered_json doc;
    doc["__metadata__"] = meta;
    std::uint64_t offset = 0;
    for (auto i : layout()) {
      const auto& e = entries_[i];
      const std::uint64_t begin = offset;
      offset += e.bytes().size();
      doc[e.name] = {{"dtype", name_of(e.type)}, {"shape", e.shape}, {"data_offsets", {begin, offset}}};
    }
    std::string h = json::dump(doc);
    // the header CRC's digits: the one "<key>":"00000000" (metadata keys are unique, and a
    // tensor of that name is followed by an object)
    const std::string crc_field = json::quoted(header_crc_key) + ":\"00000000\"";
    const std::size_t crc_at = h.find(crc_field) + crc_field.size() - 9;
    h.resize((h.size() + 7) / 8 * 8, ' ');  // the data then starts 8-byte aligned
    if (h.size() > max_header_bytes)
      throw std::invalid_argument("safetensors writer: the header is " + std::to_string(h.size()) +
                                  " bytes, over the " + std::to_string(max_header_bytes) + "-byte limit of the format");
    std::string file(8, '\0');
    for (int b = 0; b < 8; ++b)
      file[static_cast<std::size_t>(b)] = static_cast<char>((static_cast<std::uint64_t>(h.size()) >> (8 * b)) & 0xFF);
    file += h;
    const std::string crc = detail::hex8(detail::crc32(file.data(), file.size()));
    file.replace(8 + crc_at, 8, crc);
    return file;
  }
};

}  // namespace strata::io
