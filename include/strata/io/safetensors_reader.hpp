#pragma once
// strata-header: host-only
// safetensors reader: reads one file, validates all of it on open (io/safetensors.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/io/file.hpp"
#include "strata/io/json.hpp"
#include "strata/io/safetensors_format.hpp"

namespace strata::io {

// One validated file, held in memory. Movable; spans stay valid as long as the reader.
class reader {
 public:
  explicit reader(const std::string& path) : reader(read_file(path), path) {}
  // An in-memory file image; `name` stands for the path in messages.
  reader(std::vector<std::byte> file, std::string name) : path_(std::move(name)), file_(std::move(file)) { validate(); }

  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return order_; }  // in file order
  bool has(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  bool checksummed() const { return checksummed_; }  // a strata checkpoint, every CRC matched
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }
  std::optional<std::string> metadata(std::string_view key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }

  const tensor_info& info(std::string_view name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      std::string some;
      for (std::size_t i = 0; i < order_.size() && i < 5; ++i) some += (i ? ", '" : "'") + order_[i] + "'";
      fail("no tensor '" + std::string(name) + "' (it holds " + std::to_string(order_.size()) + " tensors" +
           (order_.empty() ? "" : ": " + some + (order_.size() > 5 ? ", ..." : "")) + ")");
    }
    return it->second;
  }
  std::span<const std::byte> bytes(std::string_view name) const {
    const auto& t = info(name);
    return {file_.data() + data_start_ + t.begin, static_cast<std::size_t>(t.bytes())};
  }
  // Copies the tensor into out, which must hold exactly its elements; T must be stored as
  // `as` (default dtype_of<T>): a F32 tensor is never silently read as double.
  template <class T>
  void read_into(std::string_view name, std::span<T> out,
                 std::optional<dtype> as = dtype_of<std::remove_const_t<T>>) const {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_const_v<T>);
    const auto& t = info(name);
    if (!as)
      fail("tensor '" + std::string(name) + "': the element type has no dtype of its own; name one (e.g. dtype::BF16)");
    if (bits_of(*as) != 8 * sizeof(T))
      fail("tensor '" + std::string(name) + "': a " + std::to_string(sizeof(T)) + "-byte element type cannot hold " +
           std::string(name_of(*as)));
    if (t.type != *as)
      fail("tensor '" + std::string(name) + "' is " + std::string(name_of(t.type)) + ", not " +
           std::string(name_of(*as)));
    if (out.size() != t.elements())
      fail("tensor '" + std::string(name) + "' has " + std::to_string(t.elements()) + " elements, the destination " +
           std::to_string(out.size()));
    if (!out.empty()) std::memcpy(out.data(), file_.data() + data_start_ + t.begin, out.size_bytes());
  }
  template <class T>
  std::vector<T> read(std::string_view name, std::optional<dtype> as = dtype_of<T>) const {
    std::vector<T> v(static_cast<std::size_t>(info(name).elements()));
    read_into(name, std::span<T>(v), as);
    return v;
  }

 private:
  std::string path_;
  std::vector<std::byte> file_;
  std::size_t data_start_ = 0;
  std::map<std::string, tensor_info, std::less<>> tensors_;
  std::vector<std::string> order_;
  std::map<std::string, std::string, std::less<>> metadata_;
  bool checksummed_ = false;

  [[noreturn]] void fail(const std::string& problem) const { throw checkpoint_error(path_, problem); }

  void validate();
  void check_header_crc(const json::value& crc, std::string_view header) const;
  void check_tensor_crcs() const;
  tensor_info parse_tensor(const std::string& name, const json::value& v) const;
};

inline void reader::validate() {
  const std::size_t size = file_.size();
  if (size < 8)
    fail("truncated: the file holds " + std::to_string(size) + " bytes, fewer than the 8 of the header length");
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = n << 8 | std::to_integer<std::uint64_t>(file_[static_cast<std::size_t>(b)]);
  if (n > max_header_bytes)
    fail("the header length " + std::to_string(n) + " is over the format's limit of " +
         std::to_string(max_header_bytes) + " bytes: not a safetensors file, or a corrupt one");
  if (n > size - 8)
    fail("truncated: the header length is " + std::to_string(n) + " bytes, the file holds only " +
         std::to_string(size - 8) + " after the length");
  const std::string_view header(reinterpret_cast<const char*>(file_.data()) + 8, static_cast<std::size_t>(n));
  if (header.empty() || header[0] != '{')
    fail("the header does not start with '{': not a safetensors file, or a corrupt one");
  json::value root;
  try {
    root = json::parse(header);
  } catch (const json::parse_error& e) {
    fail("the header JSON is malformed" +
         (e.offset ? " at byte " + std::to_string(*e.offset) + " of the header (file offset " +
                         std::to_string(*e.offset + 8) + ")"
                   : std::string()) +
         ": " + e.problem);
  }
  if (!root.is_object()) fail("the header is not a JSON object");
  data_start_ = static_cast<std::size_t>(8 + n);

  // Metadata first: a strata checkpoint's header CRC is checked before anything in the
  // header is believed, so a corrupt header says so instead of "shape mismatch".
  const json::value* crc = nullptr;
  if (const auto meta = root.find("__metadata__"); meta != root.end()) {
    if (!meta->is_object()) fail("__metadata__ is " + json::described(*meta) + ", not an object");
    for (const auto& [k, v] : meta->items()) {
      if (!v.is_string())
        fail("__metadata__ entry '" + k + "' is " + json::described(v) + "; metadata values must be strings");
      metadata_.emplace(k, v.get<std::string>());
    }
    if (const auto c = meta->find(header_crc_key); c != meta->end()) crc = &*c;
  }
  const auto format = metadata(format_key);
  if (format && *format != format_version)
    fail("unsupported " + std::string(format_key) + " '" + *format + "' (this reader knows " +
         std::string(format_version) + ")");
  if (format && !crc)
    fail("a strata checkpoint without its " + std::string(header_crc_key) + ": the header is corrupt");
  if (!format && crc)
    fail("has " + std::string(header_crc_key) + " but no " + std::string(format_key) + ": the header is corrupt");
  if (crc) check_header_crc(*crc, header);

  std::vector<std::pair<std::string, tensor_info>> sorted;
  for (const auto& [name, v] : root.items())
    if (name != "__metadata__") sorted.emplace_back(name, parse_tensor(name, v));
  // Any order in the header is valid; the offsets, sorted, must tile the data exactly.
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second.begin, a.second.end) < std::pair(b.second.begin, b.second.end);
  });
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = sorted[i];
    if (t.begin < next)
      fail("tensor '" + name + "' (data_offsets " + detail::offsets_text(t) + ") overlaps tensor '" +
           sorted[i - 1].first + "' (" + detail::offsets_text(sorted[i - 1].second) + ")");
    if (t.begin > next)
      fail("a gap of " + std::to_string(t.begin - next) + " bytes before tensor '" + name + "' (data_offsets " +
           detail::offsets_text(t) + "): the data must be contiguous");
    next = t.end;
  }
  const std::uint64_t held = size - data_start_;
  if (held < next)
    fail("truncated: the header says " + std::to_string(next) + " bytes of tensor data, the file holds " +
         std::to_string(held));
  if (held > next)
    fail(std::to_string(held - next) + " stray bytes after the last tensor (the header says " + std::to_string(next) +
         " bytes of tensor data, the file holds " + std::to_string(held) + ")");
  for (auto& [name, t] : sorted) {
    order_.push_back(name);
    tensors_.emplace(std::move(name), t);
  }
  if (format) check_tensor_crcs();
  checksummed_ = format.has_value();
}

inline tensor_info reader::parse_tensor(const std::string& name, const json::value& v) const {
  const std::string who = "tensor '" + name + "'";
  if (!v.is_object()) fail(who + " is described by " + json::described(v) + ", not an object");
  const auto field = [&](const char* key, bool (json::value::*is)() const noexcept,
                         const char* kind) -> const json::value& {
    const auto f = v.find(key);
    if (f == v.end()) fail(who + " has no \"" + key + "\"");
    if (!((*f).*is)()) fail(who + ": \"" + key + "\" is " + json::described(*f) + ", not " + kind);
    return *f;
  };
  const auto naturals = [&](const char* key) {
    std::vector<std::uint64_t> out;
    for (const auto& x : field(key, &json::value::is_array, "an array")) {
      const auto d = json::natural(x);
      if (!d) fail(who + ": \"" + key + "\" holds something other than a non-negative integer");
      out.push_back(*d);
    }
    return out;
  };
  for (const auto& [k, _] : v.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets") fail(who + " has an unknown field \"" + k + "\"");
  tensor_info t;
  const auto& type = field("dtype", &json::value::is_string, "a string").get_ref<const std::string&>();
  const auto d = parse_dtype(type);
  if (!d) fail(who + " has an unknown dtype \"" + type + "\"");
  t.type = *d;
  t.shape = naturals("shape");
  const auto offsets = naturals("data_offsets");
  if (offsets.size() != 2)
    fail(who + ": \"data_offsets\" must hold 2 integers, it holds " + std::to_string(offsets.size()));
  t.begin = offsets[0];
  t.end = offsets[1];
  if (t.end < t.begin) fail(who + ": data_offsets " + detail::offsets_text(t) + " end before they begin");
  const auto need = detail::tensor_bytes(t.type, t.shape);
  if (!need)
    fail(who + ": shape " + detail::shape_text(t.shape) + " of " + type +
         " overflows, or is not a whole number of bytes");
  if (*need != t.bytes())
    fail(who + ": shape " + detail::shape_text(t.shape) + " of " + type + " is " + std::to_string(*need) +
         " bytes, but its data_offsets " + detail::offsets_text(t) + " span " + std::to_string(t.bytes()));
  return t;
}

// The CRC covers the header with its own 8 digits zeroed, so they are found in the raw text:
// the one place where the key, as a token, is followed by ':' and a string (inside a JSON
// string every '"' is escaped, so "<key>" cannot match there; a tensor of that name is
// followed by an object), the digits unescaped between its quotes.
inline void reader::check_header_crc(const json::value& crc, std::string_view header) const {
  const std::string key = "\"" + std::string(header_crc_key) + "\"";
  std::size_t digits = 0, found = 0;
  for (std::size_t at = header.find(key); at != std::string_view::npos; at = header.find(key, at + 1)) {
    std::size_t i = header.find_first_not_of(" \t\n\r", at + key.size());
    if (i == std::string_view::npos || header[i] != ':') continue;
    i = header.find_first_not_of(" \t\n\r", i + 1);
    if (i == std::string_view::npos || header[i] != '"') continue;
    digits = i + 1;
    ++found;
  }
  const std::string& text = crc.get_ref<const std::string&>();
  const auto stored = detail::parse_hex8(text);
  if (!stored || found != 1 || header.substr(digits, 9) != text + "\"")
    fail(std::string(header_crc_key) + " is not 8 lowercase hex digits: the header is corrupt");
  std::string head(reinterpret_cast<const char*>(file_.data()), header.size() + 8);
  head.replace(8 + digits, 8, "00000000");
  const std::uint32_t computed = detail::crc32(head.data(), head.size());
  if (computed != *stored)
    fail("the header fails its CRC32 check (stored " + detail::hex8(*stored) + ", computed " + detail::hex8(computed) +
         "): the file is corrupt");
}

inline void reader::check_tensor_crcs() const {
  for (const auto& name : order_) {
    const std::string key = std::string(tensor_crc_prefix) + name;
    const auto it = metadata_.find(key);
    if (it == metadata_.end()) fail("tensor '" + name + "' has no " + key + " entry: the header is corrupt");
    const auto stored = detail::parse_hex8(it->second);
    if (!stored) fail(key + " is '" + it->second + "', not 8 lowercase hex digits: the header is corrupt");
    const auto b = bytes(name);
    const std::uint32_t computed = detail::crc32(b.data(), b.size());
    if (computed != *stored)
      fail("tensor '" + name + "' fails its CRC32 check (stored " + detail::hex8(*stored) + ", computed " +
           detail::hex8(computed) + "): the file is corrupt");
  }
}

// The header CRC of a strata checkpoint file, read from its header alone: a digest of the
// whole file, since the header holds every tensor's CRC (the reader checks them all when
// the file is read).
inline std::string header_crc_of(const std::string& path) {
  const std::vector<std::byte> head = read_file(path, 8);
  std::uint64_t n = 0;
  for (int b = 7; b >= 0 && head.size() == 8; --b) n = n << 8 | std::to_integer<std::uint64_t>(head[std::size_t(b)]);
  if (head.size() < 8 || n > max_header_bytes) throw checkpoint_error(path, "not a safetensors file: no header length");
  const std::vector<std::byte> file = read_file(path, 8 + static_cast<std::size_t>(n));
  if (file.size() < 8 + n) throw checkpoint_error(path, "truncated inside its header");
  try {
    const json::value root =
        json::parse(std::string_view(reinterpret_cast<const char*>(file.data()) + 8, static_cast<std::size_t>(n)));
    const auto meta = root.find("__metadata__");
    if (meta != root.end() && meta->is_object())
      if (const auto c = meta->find(header_crc_key); c != meta->end() && c->is_string()) return c->get<std::string>();
  } catch (const json::parse_error&) {
  }
  throw checkpoint_error(path, "its header holds no " + std::string(header_crc_key));
}

}  // namespace strata::io
