// fashion_mnist/idx.hpp - strict reader for gzip-compressed IDX files (the
// MNIST / Fashion-MNIST container format).
//
// IDX layout: a 4-byte big-endian magic {0x00, 0x00, type, rank}, then `rank`
// big-endian uint32 dimensions, then the row-major payload. Only type 0x08
// (unsigned byte) is supported, which is all Fashion-MNIST uses.
//
// Every failure is a data_error whose message starts with the file path and
// states what is wrong with the numbers involved, because a bad or partial
// download otherwise shows up much later as a silently wrong training run.
//
// Needs zlib (link with -lz).
#ifndef STRATA_EXAMPLES_IDX_HPP
#define STRATA_EXAMPLES_IDX_HPP

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace fashion_mnist {

// Malformed, missing or inconsistent input data. The message names the file.
class data_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

[[noreturn]] inline void data_fail(const std::string& path, const std::string& what) {
  throw data_error(path + ": " + what);
}

inline std::string hex32(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", static_cast<unsigned>(v));
  return buf;
}

inline std::string hex8(unsigned v) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "0x%02x", v & 0xffu);
  return buf;
}

inline std::uint32_t load_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
         (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

inline std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Whole file as bytes; the compressed inputs are small enough (26 MB for the
// largest Fashion-MNIST file) that one read beats a streaming loop.
inline std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) data_fail(path, "file not found");
  if (ec) data_fail(path, "cannot stat file (" + ec.message() + ")");
  if (st.type() != fs::file_type::regular) data_fail(path, "not a regular file");

  struct closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, closer> f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    const int err = errno;
    data_fail(path, "cannot open file (" + std::generic_category().message(err) + ")");
  }
  // Size is only a first guess: keep reading until EOF in case the file grows.
  const auto size = fs::file_size(path, ec);
  std::vector<std::uint8_t> bytes(ec ? std::size_t{1} << 16 : static_cast<std::size_t>(size) + 1);
  std::size_t have = 0;
  for (;;) {
    have += std::fread(bytes.data() + have, 1, bytes.size() - have, f.get());
    if (have < bytes.size()) {
      if (std::ferror(f.get())) data_fail(path, "read error after " + plural(have, "byte", "bytes"));
      break;
    }
    bytes.resize(bytes.size() * 2);
  }
  bytes.resize(have);
  return bytes;
}

}  // namespace detail

// Decompresses the gzip file at `path` completely. Rejects plain (non-gzip)
// files instead of passing them through as gzread would, rejects a stream that
// ends before its end-of-stream marker or fails its CRC, and rejects non-gzip
// bytes after the last member. Concatenated gzip members are accepted (RFC 1952
// allows them and `cat a.gz b.gz` produces them).
inline std::vector<std::uint8_t> read_gzip(const std::string& path) {
  using detail::data_fail;
  using detail::plural;
  const std::vector<std::uint8_t> in = detail::read_file_bytes(path);
  if (in.empty()) data_fail(path, "not a gzip file (file is empty)");
  if (in.size() < 2 || in[0] != 0x1f || in[1] != 0x8b) {
    data_fail(path, "not a gzip file (starts with byte" +
                        std::string(in.size() < 2 ? " " + detail::hex8(in[0])
                                                  : "s " + detail::hex8(in[0]) + " " + detail::hex8(in[1])) +
                        ", gzip starts with 0x1f 0x8b)");
  }

  // ISIZE (last 4 bytes, little-endian) is the uncompressed size mod 2^32 of
  // the last member; use it only as a capacity hint, capped at deflate's
  // maximum ratio (~1032:1) so a forged trailer cannot force a huge allocation.
  std::size_t hint = 0;
  if (in.size() >= 18) {
    const std::uint8_t* t = in.data() + in.size() - 4;
    hint = std::size_t{t[0]} | (std::size_t{t[1]} << 8) | (std::size_t{t[2]} << 16) | (std::size_t{t[3]} << 24);
    if (hint / 1032 > in.size()) hint = 0;
  }
  std::vector<std::uint8_t> out(hint > 0 ? hint : std::max<std::size_t>(in.size() * 4, 1 << 16));

  z_stream zs{};
  // 16 + MAX_WBITS: accept the gzip wrapper only (no zlib or raw deflate).
  if (const int rc = inflateInit2(&zs, 16 + MAX_WBITS); rc != Z_OK) {
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    throw std::runtime_error("zlib inflateInit2 failed (" + std::to_string(rc) + ", zlib " + zlibVersion() + ")");
  }
  struct guard {
    z_stream* z;
    ~guard() { inflateEnd(z); }
  } g{&zs};

  // avail_in / avail_out are uInt (32-bit), so feed and drain in bounded chunks.
  constexpr std::size_t max_chunk = std::size_t{1} << 30;
  std::size_t in_pos = 0, out_pos = 0;
  for (;;) {
    if (zs.avail_in == 0 && in_pos < in.size()) {
      const std::size_t n = std::min(max_chunk, in.size() - in_pos);
      zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
      zs.avail_in = static_cast<uInt>(n);
      in_pos += n;
    }
    if (out_pos == out.size()) out.resize(out.size() * 2);
    const std::size_t room = std::min(max_chunk, out.size() - out_pos);
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(room);

    const int rc = inflate(&zs, Z_NO_FLUSH);
    out_pos += room - zs.avail_out;
    const std::size_t consumed = in_pos - zs.avail_in;

    if (rc == Z_STREAM_END) {
      if (consumed == in.size()) break;
      // Another member follows, or junk: only the former is legal.
      if (in.size() - consumed >= 2 && in[consumed] == 0x1f && in[consumed + 1] == 0x8b) {
        if (inflateReset(&zs) != Z_OK) data_fail(path, "cannot reset gzip decoder");
        continue;
      }
      data_fail(path, plural(in.size() - consumed, "byte", "bytes") +
                          " of non-gzip data after the end of the gzip stream at compressed offset " +
                          std::to_string(consumed));
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) continue;  // output full: grow and retry
    if (rc == Z_BUF_ERROR && consumed == in.size()) {
      data_fail(path, "gzip stream is truncated: the " + plural(in.size(), "byte", "bytes") +
                          " of compressed input end before the end-of-stream marker (" +
                          plural(out_pos, "byte", "bytes") + " decompressed so far)");
    }
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    data_fail(path, "corrupt gzip data at compressed offset " + std::to_string(consumed) + " (zlib: " +
                        (zs.msg ? zs.msg : "error " + std::to_string(rc)) + ")");
  }
  out.resize(out_pos);
  if (out.capacity() - out_pos > out_pos / 4) out.shrink_to_fit();  // only when the guess was far off
  return out;
}

// A parsed unsigned-byte IDX array. `bytes` keeps the header in front so the
// 47 MB payload of the training images is never moved; use values().
struct idx_u8 {
  std::string path;                 // the file it came from, for messages
  std::vector<std::uint32_t> dims;  // dims[0] is the item count
  std::vector<std::uint8_t> bytes;  // header + payload as decompressed
  std::size_t header_size = 0;

  std::size_t count() const { return dims.empty() ? 0 : dims[0]; }
  std::size_t item_size() const {  // elements per item (e.g. rows*cols)
    std::size_t s = 1;
    for (std::size_t i = 1; i < dims.size(); ++i) s *= dims[i];
    return s;
  }
  std::span<const std::uint8_t> values() const {
    return std::span<const std::uint8_t>(bytes).subspan(header_size);
  }
};

namespace detail {
inline const char* idx_type_name(unsigned t) {
  switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0b: return "int16";
    case 0x0c: return "int32";
    case 0x0d: return "float32";
    case 0x0e: return "float64";
    default: return "unknown type";
  }
}
}  // namespace detail

// Validates a decompressed IDX stream of unsigned bytes with the given rank.
// `path` is only used in messages.
inline idx_u8 parse_idx_u8(std::vector<std::uint8_t> bytes, const std::string& path, int expected_rank) {
  using detail::data_fail;
  if (expected_rank < 1 || expected_rank > 255) {
    throw std::invalid_argument("parse_idx_u8: expected_rank must be in 1..255, got " +
                                std::to_string(expected_rank));
  }
  const auto expected_magic = static_cast<std::uint32_t>(0x0800u | static_cast<unsigned>(expected_rank));
  const std::string want = "expected " + detail::hex32(expected_magic) + ": unsigned byte IDX of rank " +
                           std::to_string(expected_rank);
  if (bytes.size() < 4) {
    data_fail(path, "decompressed stream holds only " + detail::plural(bytes.size(), "byte", "bytes") +
                        ", too short for the 4-byte IDX magic number");
  }
  const std::uint32_t magic = detail::load_be32(bytes.data());
  if (bytes[0] != 0 || bytes[1] != 0) {
    data_fail(path, "bad IDX magic " + detail::hex32(magic) + " (first two bytes must be zero; " + want + ")");
  }
  if (bytes[2] != 0x08) {
    data_fail(path, "bad IDX magic " + detail::hex32(magic) + ": element type " + detail::hex8(bytes[2]) + " (" +
                        detail::idx_type_name(bytes[2]) + ") is not supported (" + want + ")");
  }
  const int rank = bytes[3];
  if (rank != expected_rank) {
    data_fail(path, "IDX rank is " + std::to_string(rank) + " (magic " + detail::hex32(magic) + ") but rank " +
                        std::to_string(expected_rank) + " was expected (magic " + detail::hex32(expected_magic) + ")");
  }
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  if (bytes.size() < header) {
    data_fail(path, "stream ends inside the IDX header: " + detail::plural(bytes.size(), "byte", "bytes") +
                        " but a rank-" + std::to_string(rank) + " header needs " + std::to_string(header));
  }
  idx_u8 r;
  r.path = path;
  r.header_size = header;
  std::uint64_t total = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    const std::uint32_t d = detail::load_be32(bytes.data() + 4 + 4 * i);
    r.dims.push_back(d);
    if (d != 0 && total > std::numeric_limits<std::uint64_t>::max() / d) overflow = true;
    else total *= d;
  }
  std::string shape = std::to_string(r.dims[0]) + " items";
  if (rank > 1) {
    shape += " of ";
    for (std::size_t i = 1; i < r.dims.size(); ++i) shape += (i > 1 ? "x" : "") + std::to_string(r.dims[i]);
  }
  const std::uint64_t payload = bytes.size() - header;
  if (overflow) data_fail(path, "header says " + shape + ", which overflows a 64-bit byte count");
  if (payload != total) {
    const std::uint64_t diff = payload < total ? total - payload : payload - total;
    data_fail(path, "header says " + shape + (rank > 1 ? " = " + std::to_string(total) + " bytes" : "") +
                        " but the stream holds " + detail::plural(payload, "byte", "bytes") + " of data (" +
                        (payload < total ? detail::plural(diff, "byte", "bytes") + " missing: truncated"
                                         : detail::plural(diff, "byte", "bytes") + " of trailing data") +
                        ")");
  }
  r.bytes = std::move(bytes);
  return r;
}

// Reads and validates a gzip'd unsigned-byte IDX file of the given rank.
inline idx_u8 read_idx_u8(const std::string& path, int expected_rank) {
  return parse_idx_u8(read_gzip(path), path, expected_rank);
}

// Throws unless every value of a label array lies in [0, num_classes).
inline void check_labels(const idx_u8& labels, int num_classes) {
  std::size_t bad = 0, first = 0;
  unsigned first_value = 0;
  const auto v = labels.values();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (static_cast<int>(v[i]) >= num_classes) {
      if (bad++ == 0) {
        first = i;
        first_value = v[i];
      }
    }
  }
  if (bad != 0) {
    detail::data_fail(labels.path, "label " + std::to_string(first_value) + " at item " + std::to_string(first) +
                                       " is out of range 0.." + std::to_string(num_classes - 1) + " for " +
                                       std::to_string(num_classes) + " classes (" +
                                       detail::plural(bad, "bad label", "bad labels") + " in total)");
  }
}

// Images: rank-3 IDX (count x rows x cols).
inline idx_u8 read_idx_images(const std::string& path) { return read_idx_u8(path, 3); }

// Labels: rank-1 IDX whose values must be valid class ids.
inline idx_u8 read_idx_labels(const std::string& path, int num_classes) {
  idx_u8 r = read_idx_u8(path, 1);
  check_labels(r, num_classes);
  return r;
}

// Throws unless an image file and its label file describe the same number of items.
inline void check_same_count(const idx_u8& images, const idx_u8& labels) {
  if (images.count() != labels.count()) {
    detail::data_fail(labels.path, "holds " + detail::plural(labels.count(), "label", "labels") + " but " +
                                       images.path + " holds " +
                                       detail::plural(images.count(), "image", "images") +
                                       "; the counts must match");
  }
}

}  // namespace fashion_mnist

#endif  // STRATA_EXAMPLES_IDX_HPP
