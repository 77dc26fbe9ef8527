// strata-header: cuda-only
// strata CUDA backend: error checking.
//
// Every CUDA runtime / cuBLAS(Lt) call goes through STRATA_CUDA_CHECK or
// STRATA_CUBLAS_CHECK; every kernel launch is followed by
// STRATA_CUDA_CHECK_LAUNCH. A failure throws cuda_error, whose what() names
// the call (the stringified expression), file:line, the library's error name
// and string, and the process rank, so a log line from one rank of a large
// job is enough to find the failing call.
//
// Other libraries plug in through status_traits (see the NCCL note below).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata::backend::cuda {

// A failed CUDA / cuBLAS / (hook) call. Carries the pieces of the message
// separately so tests and handlers need not parse what().
class cuda_error : public std::runtime_error {
 public:
  cuda_error(const char* library, std::string call, std::string file, int line, long long code,
             const std::string& description, int rank)
      : std::runtime_error(format(library, call, file, line, code, description, rank)),
        library_(library),
        call_(std::move(call)),
        file_(std::move(file)),
        line_(line),
        code_(code),
        rank_(rank) {}

  const char* library() const noexcept { return library_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  long long code() const noexcept { return code_; }
  int rank() const noexcept { return rank_; }

 private:
  static std::string format(const char* library, const std::string& call, const std::string& file, int line,
                            long long code, const std::string& description, int rank) {
    return std::string("strata: ") + library + " error on rank " + std::to_string(rank) + " at " + file + ":" +
           std::to_string(line) + ": " + call + " failed: " + description + " (code " + std::to_string(code) + ")";
  }
  const char* library_;
  std::string call_, file_;
  int line_;
  long long code_;
  int rank_;
};

// Device memory exhausted: a std::bad_alloc, as the host backend's allocation
// failure is, with the request and the rank in what().
class device_out_of_memory : public std::bad_alloc {
 public:
  explicit device_out_of_memory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// ---------------------------------------------------------------------------
// Process rank for messages. Defaults to what the launcher exports (Open MPI,
// Slurm, MPICH/PMI) so errors raised before MPI_Init are already labelled;
// the runtime overrides it with the communicator's rank once it has one.
// ---------------------------------------------------------------------------
namespace detail {
inline int rank_from_environment() noexcept {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"}) {
    const char* s = std::getenv(var);
    if (!s || !*s) continue;
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end && *end == '\0' && v >= 0 && v <= 0x7fffffffL) return static_cast<int>(v);
  }
  return 0;
}
inline std::atomic<int>& rank_slot() noexcept {
  static std::atomic<int> rank{rank_from_environment()};
  return rank;
}
}  // namespace detail

inline int process_rank() noexcept { return detail::rank_slot().load(std::memory_order_relaxed); }
inline void set_process_rank(int rank) noexcept { detail::rank_slot().store(rank, std::memory_order_relaxed); }

// ---------------------------------------------------------------------------
// Status hook: specialise status_traits<S> with
//   static constexpr const char* library;
//   static bool ok(S) noexcept;
//   static std::string describe(S);
// and STRATA_GPU_CHECK(expr) accepts that status type. The NCCL communicator
// header is expected to add
//   template <> struct status_traits<ncclResult_t> {
//     static constexpr const char* library = "NCCL";
//     static bool ok(ncclResult_t r) noexcept { return r == ncclSuccess; }
//     static std::string describe(ncclResult_t r) { return ncclGetErrorString(r); }
//   };
//   #define STRATA_NCCL_CHECK(expr) STRATA_GPU_CHECK(expr)
// (kept out of here so this header needs no nccl.h).
// ---------------------------------------------------------------------------
template <class Status>
struct status_traits;

template <>
struct status_traits<cudaError_t> {
  static constexpr const char* library = "CUDA";
  static bool ok(cudaError_t e) noexcept { return e == cudaSuccess; }
  static std::string describe(cudaError_t e) {
    // Non-sticky errors stay pending in the runtime's last-error slot; clear
    // it, or the next launch check would report this failure a second time.
    (void)cudaGetLastError();
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
};

template <>
struct status_traits<cublasStatus_t> {
  static constexpr const char* library = "cuBLAS";
  static bool ok(cublasStatus_t s) noexcept { return s == CUBLAS_STATUS_SUCCESS; }
  static std::string describe(cublasStatus_t s) {
    return std::string(cublasLtGetStatusName(s)) + ": " + cublasLtGetStatusString(s);
  }
};

template <class Status>
[[noreturn]] void raise(Status s, const char* call, const char* file, int line) {
  using traits = status_traits<Status>;
  throw cuda_error(traits::library, call, file, line, static_cast<long long>(s), traits::describe(s), process_rank());
}

template <class Status>
inline void check(Status s, const char* call, const char* file, int line) {
  if (status_traits<Status>::ok(s)) [[likely]]
    return;
  raise(s, call, file, line);
}

namespace detail {
// Exact parameter types: a cuBLAS status handed to STRATA_CUDA_CHECK (or the
// reverse) is a compile error, not a silent enum conversion.
inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) { check(e, call, file, line); }
inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  check(s, call, file, line);
}
}  // namespace detail

}  // namespace strata::backend::cuda

#define STRATA_CUDA_CHECK(expr) ::strata::backend::cuda::detail::check_cuda((expr), #expr, __FILE__, __LINE__)
#define STRATA_CUBLAS_CHECK(expr) ::strata::backend::cuda::detail::check_cublas((expr), #expr, __FILE__, __LINE__)
// Any status type with a status_traits specialisation (NCCL's, via its header).
#define STRATA_GPU_CHECK(expr) ::strata::backend::cuda::check((expr), #expr, __FILE__, __LINE__)

// After a <<<...>>> launch: configuration errors (bad grid, too many
// resources) surface through cudaGetLastError, not the launch statement.
// With STRATA_CUDA_SYNC_LAUNCHES defined, also wait for the kernel so an
// asynchronous fault is attributed to the right launch (debugging only: it
// serialises everything and is illegal inside CUDA Graph capture).
#if defined(STRATA_CUDA_SYNC_LAUNCHES)
#define STRATA_CUDA_CHECK_LAUNCH(kernel_name)                                                                   \
  do {                                                                                                          \
    ::strata::backend::cuda::detail::check_cuda(cudaGetLastError(), kernel_name " <<<launch>>>", __FILE__,       \
                                                __LINE__);                                                      \
    ::strata::backend::cuda::detail::check_cuda(cudaDeviceSynchronize(), kernel_name " <<<execution>>>",        \
                                                __FILE__, __LINE__);                                            \
  } while (0)
#else
#define STRATA_CUDA_CHECK_LAUNCH(kernel_name) \
  ::strata::backend::cuda::detail::check_cuda(cudaGetLastError(), kernel_name " <<<launch>>>", __FILE__, __LINE__)
#endif
