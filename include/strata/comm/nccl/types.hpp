// strata-header: cuda-only nccl
#pragma once
// What every part of the NCCL communicator (comm/nccl/*.hpp) uses: strata's element
// types and reductions in NCCL's terms, the texts of CUDA and NCCL errors and of call
// sites, and the scope that runs a communicator's CUDA calls on its device.
#include <cuda_runtime.h>
#include <nccl.h>

#include "strata/core/communicator.hpp"

#include <source_location>
#include <string>
#include <string_view>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "strata/comm/nccl.hpp needs NCCL >= 2.18 (non-blocking ncclCommSplit)"
#endif

namespace strata::comm::detail {

// strata::bf16 is passed to NCCL as ncclBfloat16 and strata::f16 as ncclFloat16:
// they have the layouts of CUDA's __nv_bfloat16 (the high 16 bits of an IEEE
// float) and __half (IEEE binary16), so every collective and p2p op takes their
// buffers unchanged; NCCL reduces them with its own 16-bit kernels (sum, max, min).
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2 && sizeof(f16) == 2 && alignof(f16) == 2);

inline ncclDataType_t nccl_type(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return ncclFloat32;
    case dtype::f64: return ncclFloat64;
    case dtype::i32: return ncclInt32;
    case dtype::i64: return ncclInt64;
    case dtype::bf16: return ncclBfloat16;  // same bits as strata::bf16
    case dtype::f16: return ncclFloat16;    // same bits as strata::f16
  }
  return ncclFloat32;
}

inline ncclRedOp_t nccl_op(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
  }
  return ncclSum;
}

// "file:line", shortened to the part after include/ for library frames.
inline std::string nccl_site(const std::source_location& w) {
  std::string_view f = w.file_name();
  if (auto p = f.rfind("include/"); p != std::string_view::npos) f.remove_prefix(p + 8);
  return std::string(f) + ":" + std::to_string(w.line());
}

inline std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

inline std::string nccl_error_text(ncclResult_t r) {
  std::string s = ncclGetErrorString(r);
  // ncclGetLastError ignores its argument and holds the last WARN text, which
  // is usually the only place the real cause (e.g. peer address) appears.
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') s += " [NCCL: " + std::string(last) + "]";
  return s;
}

// Restores the caller's current device: the communicator's CUDA calls must
// run on its device, the caller's thread may be on another one.
class device_scope {
 public:
  struct quiet_t {};
  // Operations: a failure to switch is reported with the communicator's name.
  device_scope(int device, std::string_view who,
               const std::source_location at = std::source_location::current()) {
    cudaError_t e = cudaGetDevice(&prev_);
    if (e == cudaSuccess && prev_ != device) e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw comm_error("strata::comm: cudaSetDevice(" + std::to_string(device) + ") failed at " +
                       nccl_site(at) + " on communicator '" + std::string(who) + "': " + cuda_error_text(e));
    }
    if (prev_ == device) prev_ = -1;
  }
  // Teardown and abort paths: best effort, never throws.
  device_scope(int device, quiet_t) noexcept {
    if (device >= 0 && cudaGetDevice(&prev_) == cudaSuccess && prev_ != device &&
        cudaSetDevice(device) == cudaSuccess)
      return;
    prev_ = -1;
    (void)cudaGetLastError();
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  ~device_scope() {
    if (prev_ >= 0) (void)cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

}  // namespace strata::comm::detail
