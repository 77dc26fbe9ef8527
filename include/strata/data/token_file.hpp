#pragma once
// strata-header: host-only
// strata/data/token_file.hpp - token files: a sequence of token ids on disk, written once
// (token_file_writer, write_token_file) and read through a read-only memory map (token_file).
//
// Format, version 1. Every integer is little-endian, whatever the machine.
//
//   offset  bytes          field
//        0  8              magic: the ASCII bytes "STRTOKEN"
//        8  4              version: 1
//       12  4              dtype: bytes per id, 2 (uint16 ids) or 4 (uint32 ids)
//       16  8              count: number of ids
//       24  8              vocab: every id is below it; 1 <= vocab <= 2^16 (uint16), 2^32 (uint32)
//       32  8              tag: the writer's own value (e.g. a hash of what the ids were made
//                          from, to tell a stale cached file); 0 when unused
//       40  count x dtype  the ids
//
// The file ends with its last id: its size is exactly 40 + count x dtype bytes.
//
// Opening a token_file checks all of it before anything is read from it: the magic, the
// version, the dtype code, vocab's range, the file size against count x dtype (compared
// without forming a product that could overflow), and that every id is below vocab. Every
// failure is a data_error "<path>: <problem>" stating the numbers involved. The file must
// not change while it is mapped (a file truncated under a live map faults on access).
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/data/data_error.hpp"

namespace strata::data {

enum class token_dtype : std::uint32_t { u16 = 2, u32 = 4 };

inline constexpr std::array<unsigned char, 8> token_file_magic = {'S', 'T', 'R', 'T', 'O', 'K', 'E', 'N'};
inline constexpr std::uint32_t token_file_version = 1;
inline constexpr std::size_t token_file_header_bytes = 40;

// The most distinct ids a dtype holds.
constexpr std::uint64_t max_vocab(token_dtype d) noexcept {
  return d == token_dtype::u16 ? std::uint64_t{1} << 16 : std::uint64_t{1} << 32;
}
// The narrowest dtype for ids below `vocab`.
constexpr token_dtype dtype_for(std::uint64_t vocab) noexcept {
  return vocab <= max_vocab(token_dtype::u16) ? token_dtype::u16 : token_dtype::u32;
}

// The header's fields, as read (token_file::header()) or to be written.
struct token_file_header {
  std::uint32_t version = token_file_version;
  token_dtype dtype = token_dtype::u16;
  std::uint64_t count = 0;
  std::uint64_t vocab = 0;
  std::uint64_t tag = 0;
};

namespace detail {

inline std::uint64_t load_le(const unsigned char* p, std::size_t bytes) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}
inline void store_le(unsigned char* p, std::uint64_t v, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::string system_error_text(int err) { return std::strerror(err); }

inline std::array<unsigned char, token_file_header_bytes> encode_header(const token_file_header& h) {
  std::array<unsigned char, token_file_header_bytes> b{};
  std::copy(token_file_magic.begin(), token_file_magic.end(), b.begin());
  store_le(b.data() + 8, h.version, 4);
  store_le(b.data() + 12, static_cast<std::uint32_t>(h.dtype), 4);
  store_le(b.data() + 16, h.count, 8);
  store_le(b.data() + 24, h.vocab, 8);
  store_le(b.data() + 32, h.tag, 8);
  return b;
}

inline std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A name beside `path` no other writer (process or thread) uses at the same time.
inline std::string temporary_beside(const std::string& path) {
  static std::atomic<unsigned long long> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// All of `size` bytes to fd, or a data_error naming `path`.
inline void write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw data_error(path, "write failed: " + system_error_text(errno));
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// fsync, close and rename `tmp` onto `path`, then fsync the directory: a crash leaves the old
// file or the new one, complete. Closes fd whatever happens; removes tmp on failure.
inline void commit_file(int fd, const std::string& tmp, const std::string& path) {
  std::string problem;
  if (::fsync(fd) != 0) problem = "fsync of " + tmp + " failed: " + system_error_text(errno);
  if (::close(fd) != 0 && problem.empty()) problem = "close of " + tmp + " failed: " + system_error_text(errno);
  if (problem.empty() && ::rename(tmp.c_str(), path.c_str()) != 0)
    problem = "cannot rename " + tmp + " onto it: " + system_error_text(errno);
  if (!problem.empty()) {
    ::unlink(tmp.c_str());
    throw data_error(path, problem);
  }
  const std::string dir = directory_of(path);
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

// Replaces `path` by `bytes`, atomically (commit_file).
inline void replace_file(const std::string& path, const void* bytes, std::size_t size) {
  const std::string tmp = temporary_beside(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw data_error(path, "cannot create " + tmp + ": " + system_error_text(errno));
  try {
    write_all(fd, bytes, size, path);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  commit_file(fd, tmp, path);
}

inline std::string hex_bytes(const unsigned char* p, std::size_t n) {
  std::string s;
  char b[8];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%s%02x", i ? " " : "", static_cast<unsigned>(p[i]));
    s += b;
  }
  return s;
}

}  // namespace detail

// Writes a token file: ids are appended in order; finish() writes the count into the header
// and puts the file in place atomically (written beside it, then renamed). A writer destroyed
// before finish() leaves nothing behind, and an existing file at `path` untouched.
class token_file_writer {
 public:
  token_file_writer(std::string path, std::uint64_t vocab, std::uint64_t tag = 0)
      : token_file_writer(std::move(path), vocab, dtype_for(vocab), tag) {}
  token_file_writer(std::string path, std::uint64_t vocab, token_dtype dtype, std::uint64_t tag)
      : path_(std::move(path)), header_{token_file_version, dtype, 0, vocab, tag} {
    if (dtype != token_dtype::u16 && dtype != token_dtype::u32)
      throw std::invalid_argument("token_file_writer " + path_ + ": dtype code " +
                                  std::to_string(static_cast<std::uint32_t>(dtype)) + " is neither 2 (uint16) nor 4 (uint32)");
    if (vocab < 1 || vocab > max_vocab(dtype))
      throw std::invalid_argument("token_file_writer " + path_ + ": vocab " + std::to_string(vocab) + " is outside [1, " +
                                  std::to_string(max_vocab(dtype)) + "] for " +
                                  (dtype == token_dtype::u16 ? "uint16" : "uint32") + " ids");
    tmp_ = detail::temporary_beside(path_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) throw data_error(path_, "cannot create " + tmp_ + ": " + detail::system_error_text(errno));
    const auto h = detail::encode_header(header_);  // count patched by finish()
    buffer_.assign(h.begin(), h.end());
  }
  token_file_writer(const token_file_writer&) = delete;
  token_file_writer& operator=(const token_file_writer&) = delete;
  ~token_file_writer() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }

  // Appends ids; each must be in [0, vocab) (else data_error naming the id and its position).
  template <std::integral I>
  void append(std::span<const I> ids) {
    if (fd_ < 0) throw std::logic_error("token_file_writer " + path_ + ": append after finish()");
    const std::size_t width = static_cast<std::size_t>(header_.dtype);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const I id = ids[i];
      bool negative = false;
      if constexpr (std::is_signed_v<I>) negative = id < 0;
      if (negative || static_cast<std::uint64_t>(id) >= header_.vocab)
        throw data_error(path_, "id " + std::to_string(id) + " at position " + std::to_string(header_.count + i) +
                                    " is outside [0, " + std::to_string(header_.vocab) + ")");
      unsigned char b[4];
      detail::store_le(b, static_cast<std::uint64_t>(id), width);
      buffer_.insert(buffer_.end(), b, b + width);
      if (buffer_.size() >= (std::size_t{1} << 20)) flush();
    }
    header_.count += ids.size();
  }
  template <std::integral I>
  void append(const std::vector<I>& ids) {
    append(std::span<const I>(ids));
  }

  std::uint64_t count() const noexcept { return header_.count; }
  const std::string& path() const noexcept { return path_; }

  // Completes the file and moves it onto path().
  void finish() {
    if (fd_ < 0) throw std::logic_error("token_file_writer " + path_ + ": finish() called twice");
    flush();
    const auto h = detail::encode_header(header_);
    std::size_t done = 0;
    while (done < h.size()) {
      const ssize_t n = ::pwrite(fd_, h.data() + done, h.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw data_error(path_, "write failed: " + detail::system_error_text(errno));
      done += static_cast<std::size_t>(n);
    }
    const int fd = fd_;
    fd_ = -1;
    detail::commit_file(fd, tmp_, path_);
  }

 private:
  void flush() {
    detail::write_all(fd_, buffer_.data(), buffer_.size(), path_);
    buffer_.clear();
  }

  std::string path_, tmp_;
  token_file_header header_;
  int fd_ = -1;
  std::vector<unsigned char> buffer_;
};

// The whole file in one call.
template <std::integral I>
void write_token_file(const std::string& path, std::span<const I> ids, std::uint64_t vocab, std::uint64_t tag = 0) {
  token_file_writer w(path, vocab, tag);
  w.append(ids);
  w.finish();
}
template <std::integral I>
void write_token_file(const std::string& path, const std::vector<I>& ids, std::uint64_t vocab, std::uint64_t tag = 0) {
  write_token_file(path, std::span<const I>(ids), vocab, tag);
}

// A token file, mapped read-only and validated in full when opened (see the top).
class token_file {
 public:
  explicit token_file(std::string path) : path_(std::move(path)) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open: " + detail::system_error_text(errno));
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot stat: " + detail::system_error_text(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      fail("not a regular file");
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size < token_file_header_bytes) {
      ::close(fd);
      fail("the file is " + std::to_string(size) + " bytes, shorter than the " +
           std::to_string(token_file_header_bytes) + "-byte token-file header");
    }
    if (size > std::numeric_limits<std::size_t>::max()) {
      ::close(fd);
      fail("the file is " + std::to_string(size) + " bytes, more than this machine can map");
    }
    void* m = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the map keeps the file
    if (m == MAP_FAILED) fail("cannot map " + std::to_string(size) + " bytes: " + detail::system_error_text(err));
    map_ = static_cast<const unsigned char*>(m);
    map_size_ = static_cast<std::size_t>(size);
    try {
      validate();
    } catch (...) {
      unmap();
      throw;
    }
  }
  token_file(token_file&& o) noexcept
      : path_(std::move(o.path_)), map_(std::exchange(o.map_, nullptr)), map_size_(std::exchange(o.map_size_, 0)),
        header_(o.header_) {}
  token_file& operator=(token_file&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      map_ = std::exchange(o.map_, nullptr);
      map_size_ = std::exchange(o.map_size_, 0);
      header_ = o.header_;
    }
    return *this;
  }
  token_file(const token_file&) = delete;
  token_file& operator=(const token_file&) = delete;
  ~token_file() { unmap(); }

  const std::string& path() const noexcept { return path_; }
  const token_file_header& header() const noexcept { return header_; }
  std::uint64_t size() const noexcept { return header_.count; }
  std::uint64_t vocab() const noexcept { return header_.vocab; }
  std::uint64_t tag() const noexcept { return header_.tag; }
  token_dtype dtype() const noexcept { return header_.dtype; }
  std::size_t width() const noexcept { return static_cast<std::size_t>(header_.dtype); }

  // Id i, i < size() (unchecked).
  std::uint32_t operator[](std::uint64_t i) const noexcept {
    const std::size_t w = static_cast<std::size_t>(header_.dtype);
    return static_cast<std::uint32_t>(
        detail::load_le(map_ + token_file_header_bytes + static_cast<std::size_t>(i) * w, w));
  }
  std::uint32_t at(std::uint64_t i) const {
    if (i >= size()) throw std::out_of_range(path_ + ": id " + std::to_string(i) + " of " + std::to_string(size()));
    return (*this)[i];
  }
  // Ids [first, first + out.size()) into out.
  void copy(std::uint64_t first, std::span<std::uint32_t> out) const {
    if (first > size() || out.size() > size() - first)
      throw std::out_of_range(path_ + ": ids [" + std::to_string(first) + ", " + std::to_string(first) + " + " +
                              std::to_string(out.size()) + ") of " + std::to_string(size()));
    const unsigned char* src = map_ + token_file_header_bytes + static_cast<std::size_t>(first) * width();
    if (header_.dtype == token_dtype::u16)
      for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<std::uint32_t>(detail::load_le(src + 2 * k, 2));
    else
      for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<std::uint32_t>(detail::load_le(src + 4 * k, 4));
  }
  std::vector<std::uint32_t> read(std::uint64_t first, std::size_t n) const {
    std::vector<std::uint32_t> v(n);
    copy(first, v);
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const { throw data_error(path_, problem); }

  void unmap() noexcept {
    if (map_) ::munmap(const_cast<unsigned char*>(map_), map_size_);
    map_ = nullptr;
    map_size_ = 0;
  }

  void validate() {
    const unsigned char* p = map_;
    if (!std::equal(token_file_magic.begin(), token_file_magic.end(), p))
      fail("not a token file: it starts with bytes " + detail::hex_bytes(p, 8) + ", a token file with \"STRTOKEN\" (" +
           detail::hex_bytes(token_file_magic.data(), 8) + ")");
    header_.version = static_cast<std::uint32_t>(detail::load_le(p + 8, 4));
    if (header_.version != token_file_version)
      fail("token-file version " + std::to_string(header_.version) + "; this reader reads version " +
           std::to_string(token_file_version));
    const auto code = static_cast<std::uint32_t>(detail::load_le(p + 12, 4));
    if (code != 2 && code != 4)
      fail("dtype code " + std::to_string(code) + " is neither 2 (uint16 ids) nor 4 (uint32 ids)");
    header_.dtype = static_cast<token_dtype>(code);
    header_.count = detail::load_le(p + 16, 8);
    header_.vocab = detail::load_le(p + 24, 8);
    header_.tag = detail::load_le(p + 32, 8);
    if (header_.vocab < 1 || header_.vocab > max_vocab(header_.dtype))
      fail("vocab " + std::to_string(header_.vocab) + " is outside [1, " + std::to_string(max_vocab(header_.dtype)) +
           "] for " + (code == 2 ? "uint16" : "uint32") + " ids");
    // size == 40 + count x width, checked by division: count comes from disk and may be huge
    const std::uint64_t body = map_size_ - token_file_header_bytes;
    if (body % code != 0 || body / code != header_.count) {
      std::string expected = "more than 2^64";
      if (header_.count <= (std::numeric_limits<std::uint64_t>::max() - token_file_header_bytes) / code)
        expected = std::to_string(token_file_header_bytes + header_.count * code);
      fail("the header says " + std::to_string(header_.count) + " ids of " + std::to_string(code) + " bytes (" +
           expected + " bytes in all) but the file is " + std::to_string(map_size_) + " bytes (" +
           (body / code < header_.count ? "truncated" : "bytes beyond the last id") + ")");
    }
    // every id below vocab; the first offender is named
    const std::uint64_t i = code == 2 ? first_beyond_vocab<2>() : first_beyond_vocab<4>();
    if (i < header_.count)
      fail("id " + std::to_string((*this)[i]) + " at position " + std::to_string(i) + " is not below the vocab " +
           std::to_string(header_.vocab));
  }
  template <std::size_t Width>
  std::uint64_t first_beyond_vocab() const noexcept {
    const unsigned char* ids = map_ + token_file_header_bytes;
    for (std::uint64_t i = 0; i < header_.count; ++i)
      if (detail::load_le(ids + static_cast<std::size_t>(i) * Width, Width) >= header_.vocab) return i;
    return header_.count;
  }

  std::string path_;
  const unsigned char* map_ = nullptr;
  std::size_t map_size_ = 0;
  token_file_header header_{};
};

}  // namespace strata::data
