#pragma once
// strata-header: host-only
// Whole-file reads and crash-safe replacement of a file, for checkpoints.
//
// write_atomic(path, produce): produce() streams the bytes into path + ".tmp.<pid>",
// which is fsync'ed, renamed onto path and its directory fsync'ed. A crash (or an
// exception) at any point leaves either the old file or the new one, complete, at
// path, never a mix: rename(2) within one directory is atomic, and the fsync before it
// keeps the rename from reaching the disk ahead of the data. The temporary is removed
// on every failure this process survives.
//
// Every error is a checkpoint_error naming the file and the system's reason.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::io {

// Any failure to read, validate or write a checkpoint file; the message starts with
// "checkpoint <path>: ".
class checkpoint_error : public std::runtime_error {
 public:
  checkpoint_error(const std::string& path, const std::string& problem)
      : std::runtime_error("checkpoint " + path + ": " + problem) {}
};

namespace detail {

inline std::string errno_text(int err) { return std::strerror(err); }

// Closes on scope exit; close errors of a file being written are checked explicitly.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

inline std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace detail

// The whole content of path, or its first `limit` bytes (fewer if the file is shorter).
inline std::vector<std::byte> read_file(const std::string& path, std::size_t limit = SIZE_MAX) {
  detail::fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw checkpoint_error(path, "cannot open: " + detail::errno_text(errno));
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) throw checkpoint_error(path, "cannot stat: " + detail::errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw checkpoint_error(path, "cannot open: not a regular file");
  std::vector<std::byte> bytes(std::min(static_cast<std::size_t>(st.st_size), limit));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(f.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw checkpoint_error(path, "read failed: " + detail::errno_text(errno));
    if (n == 0) {  // shrank while we read: report what we have, validation will say what is missing
      bytes.resize(done);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  return bytes;
}

// The sink produce() writes into.
class atomic_file_sink {
 public:
  atomic_file_sink(int fd, const std::string& path) : fd_(fd), path_(path) {}
  void write(const void* data, std::size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw checkpoint_error(path_, "write failed: " + detail::errno_text(errno));
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
  const std::string& path_;
};

// Replaces path by what produce(atomic_file_sink&) writes, atomically (see the top).
template <class Produce>
void write_atomic(const std::string& path, Produce&& produce) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  detail::fd_guard f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) throw checkpoint_error(path, "cannot create " + tmp + ": " + detail::errno_text(errno));
  try {
    atomic_file_sink sink(f.fd, path);
    produce(sink);
    if (::fsync(f.fd) != 0) throw checkpoint_error(path, "fsync of " + tmp + " failed: " + detail::errno_text(errno));
    const int fd = f.fd;
    f.fd = -1;
    // close() can report a deferred write error (NFS): the data is not known good.
    if (::close(fd) != 0) throw checkpoint_error(path, "close of " + tmp + " failed: " + detail::errno_text(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw checkpoint_error(path, "cannot rename " + tmp + " onto it: " + detail::errno_text(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename itself lives in the directory: sync it, or a crash may bring the old file back.
  const std::string dir = detail::directory_of(path);
  detail::fd_guard d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0 || ::fsync(d.fd) != 0)
    throw checkpoint_error(path,
                           "written, but fsync of its directory " + dir + " failed: " + detail::errno_text(errno));
}

}  // namespace strata::io
