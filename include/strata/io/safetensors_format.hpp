#pragma once
// strata-header: host-only
// The safetensors format's vocabulary: dtypes, a tensor's header entry, the metadata keys of
// a strata checkpoint, and the CRC / size helpers the writer and the reader share.
// The format itself and the guarantees: io/safetensors.hpp.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zlib.h>

namespace strata::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this implementation copies bytes as they are");

// Every dtype of the format, in the reference's order of increasing alignment.
enum class dtype : std::uint8_t {
  BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
  I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64
};

namespace detail {
struct dtype_row { std::string_view name; unsigned bits; };
inline constexpr dtype_row dtype_table[] = {
    {"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8},
    {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16}, {"U16", 16},
    {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F32", 32}, {"C64", 64}, {"F64", 64},
    {"I64", 64}, {"U64", 64}};
}  // namespace detail

constexpr std::string_view name_of(dtype t) { return detail::dtype_table[static_cast<int>(t)].name; }
constexpr unsigned bits_of(dtype t) { return detail::dtype_table[static_cast<int>(t)].bits; }
inline std::optional<dtype> parse_dtype(std::string_view s) {
  for (std::size_t i = 0; i < std::size(detail::dtype_table); ++i)
    if (detail::dtype_table[i].name == s) return static_cast<dtype>(i);
  return std::nullopt;
}

// The dtype a C++ type is stored as (read<T>(name) / writer::add(name, shape, values)).
// bf16 / fp16 / fp8 types have no standard C++ type: pass the dtype explicitly.
template <class T> inline constexpr std::optional<dtype> dtype_of = std::nullopt;
template <> inline constexpr std::optional<dtype> dtype_of<double> = dtype::F64;
template <> inline constexpr std::optional<dtype> dtype_of<float> = dtype::F32;
template <> inline constexpr std::optional<dtype> dtype_of<std::int64_t> = dtype::I64;
template <> inline constexpr std::optional<dtype> dtype_of<std::int32_t> = dtype::I32;
template <> inline constexpr std::optional<dtype> dtype_of<std::int16_t> = dtype::I16;
template <> inline constexpr std::optional<dtype> dtype_of<std::int8_t> = dtype::I8;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint64_t> = dtype::U64;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint32_t> = dtype::U32;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint16_t> = dtype::U16;
template <> inline constexpr std::optional<dtype> dtype_of<std::uint8_t> = dtype::U8;

struct tensor_info {
  dtype type = dtype::F32;
  std::vector<std::uint64_t> shape;  // [] is a scalar; a 0 anywhere, an empty tensor
  std::uint64_t begin = 0, end = 0;  // data_offsets: bytes [begin, end) of the data buffer
  std::uint64_t elements() const {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  std::uint64_t bytes() const { return end - begin; }
};

inline constexpr std::string_view format_key = "strata.format";
inline constexpr std::string_view format_version = "strata-checkpoint-1";
inline constexpr std::string_view header_crc_key = "strata.header_crc32";
inline constexpr std::string_view tensor_crc_prefix = "crc32.";
inline constexpr std::uint64_t max_header_bytes = 100'000'000;  // the reference's limit

namespace detail {

inline std::uint32_t crc32(const void* p, std::size_t n, std::uint32_t crc = 0) {
  const auto* b = static_cast<const Bytef*>(p);
  for (; n > 0;) {  // zlib's length is a 32-bit uInt
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, b, chunk));
    b += chunk;
    n -= chunk;
  }
  return crc;
}

inline std::string hex8(std::uint32_t v) {
  constexpr char hex[] = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = hex[v & 15];
  return s;
}

// Lowercase only, as written: one spelling per value, so a flipped letter case in a stored
// CRC cannot go unnoticed (the header CRC zeroes its own digits before it is computed).
inline std::optional<std::uint32_t> parse_hex8(std::string_view s) {
  if (s.size() != 8) return std::nullopt;
  std::uint32_t v = 0;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<std::uint32_t>(d);
  }
  return v;
}

// Bytes of a tensor of this dtype and shape; nullopt on overflow or a partial byte.
inline std::optional<std::uint64_t> tensor_bytes(dtype t, const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(n, std::uint64_t{bits_of(t)}, &bits) || bits % 8 != 0) return std::nullopt;
  return bits / 8;
}

inline std::string shape_text(const std::vector<std::uint64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline std::string offsets_text(const tensor_info& t) {
  return "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
}

}  // namespace detail

}  // namespace strata::io
