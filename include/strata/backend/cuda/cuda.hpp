// strata-header: cuda-only
// strata CUDA backend: device memory, queues, events and transfers.
//
// The same interface as the host backend (host/host.hpp): buffer / view (the
// one backend::buffer and backend::view over device_space and pinned_space) /
// queue / event, allocate, record / wait / query / synchronize, gathered in
// `struct strata::backend::Cuda`. Kernels (kernels.cuh) take a cuda::queue
// first and raw device pointers; the fronts (backend/dispatch.hpp) are found by
// argument-dependent lookup on the queue.
//
// Memory model. Device memory is not host-accessible (Cuda::host_accessible
// is false); data moves by explicit upload / download. A buffer is one
// cudaMalloc; the executor makes all of a plan's buffers once, at exactly the
// sizes of the lowered buffer plan, so a training step performs no
// cudaMalloc/cudaFree (both synchronise the device) and its addresses never
// change: the property CUDA Graph capture and replay of a whole step needs.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/backend/buffer.hpp"
#include "strata/backend/cuda/check.hpp"
#include "strata/backend/dispatch.hpp"

namespace strata::backend::cuda {

// The kernel fronts (backend/<family>.hpp) under this namespace's name too: cuda::fill(q, ...).
using namespace kernels;

// cudaMalloc's own guarantee, and cuBLASLt's default alignment assumption.
inline constexpr std::size_t alignment = 256;

// ---------------------------------------------------------------------------
// Raw device allocation (counted)
// ---------------------------------------------------------------------------

namespace detail {
inline std::atomic<std::uint64_t>& malloc_counter() noexcept {
  static std::atomic<std::uint64_t> count{0};
  return count;
}

// Every cudaMalloc strata makes goes through here, so tests can assert that
// a warmed-up training step makes none.
inline void* device_malloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    const std::string call = "cudaMalloc(" + std::to_string(bytes) + " bytes)";
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: the context stays usable
      std::size_t free_bytes = 0, total = 0;
      (void)cudaMemGetInfo(&free_bytes, &total);
      throw device_out_of_memory("strata: out of device memory on rank " + std::to_string(process_rank()) +
                                 ": " + call + " with " + std::to_string(free_bytes) + " of " +
                                 std::to_string(total) + " bytes free");
    }
    raise(e, call.c_str(), __FILE__, __LINE__);
  }
  malloc_counter().fetch_add(1, std::memory_order_relaxed);
  return p;
}
// Destructor paths: errors cannot be thrown, and a failing cudaFree means the
// context is already broken (the next checked call reports it).
inline void device_free(void* p) noexcept {
  if (p && cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}
inline std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }
}  // namespace detail

// Number of cudaMalloc calls strata has made in this process (buffers and
// queue workspaces). Libraries' own
// allocations (cuBLASLt's handle) happen when a queue is made, not here.
inline std::uint64_t malloc_count() noexcept { return detail::malloc_counter().load(std::memory_order_relaxed); }

// ---------------------------------------------------------------------------
// Memory spaces, views and buffers (backend/buffer.hpp)
// ---------------------------------------------------------------------------

// Device memory: one counted cudaMalloc per buffer; freeing it waits for the device. The
// executor allocates every buffer of a plan once, at construction (the lowered buffer
// plan's exact sizes), so a training step allocates nothing.
struct device_space {
  static constexpr bool host_accessible = false;
  static void* allocate(std::size_t bytes) { return detail::device_malloc(bytes); }
  static void deallocate(void* p) noexcept { detail::device_free(p); }
};

// Page-locked host memory (cudaMallocHost): what offloaded parameters and optimizer state
// live in, so copies to and from the device run at full bandwidth and asynchronously on
// a queue.
struct pinned_space {
  static constexpr bool host_accessible = true;
  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    STRATA_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  static void deallocate(void* p) noexcept {
    if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
  }
};

// Non-owning window onto device memory: no operator[] (the host cannot dereference it),
// and a distinct type from host::view, so a device pointer never reaches a host kernel.
template <class T>
using view = backend::view<T, device_space>;
// Owning, uninitialised, 256-byte aligned device array; move-only.
template <class T>
using buffer = backend::buffer<T, device_space>;
// Owning page-locked host array; move-only.
template <class T>
using pinned_buffer = backend::buffer<T, pinned_space>;

// ---------------------------------------------------------------------------
// Queue
// ---------------------------------------------------------------------------

// Math for float GEMMs: exact FP32 (the default, comparable with the host
// reference) or TF32 tensor cores (10-bit mantissa inputs, FP32 accumulate).
enum class fp32_math : unsigned char { exact, tf32 };

struct queue_options {
  int device = -1;                                // -1: the calling thread's current device
  std::size_t workspace_bytes = std::size_t(32) << 20;  // cuBLASLt + reduction scratch
  fp32_math math = fp32_math::exact;
  // Fuse GELU into GEMMs through cuBLASLt's GELU epilogues. Off by default:
  // cuBLASLt documents only "GELU", so the fused result is checked against
  // the tanh form at a looser tolerance than the unfused path.
  bool lt_gelu_epilogue = false;
};

namespace detail {

// Cached cuBLASLt plan: descriptors plus the heuristic's algorithm for one
// problem signature (shapes, types, transposes, epilogue, pointer alignment).
// Building one costs tens of microseconds of host time; reusing it costs none.
struct lt_key {
  std::int64_t v[28] = {};
  bool operator<(const lt_key& o) const noexcept { return std::memcmp(v, o.v, sizeof v) < 0; }
};
struct lt_plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;

  lt_plan() = default;
  lt_plan(const lt_plan&) = delete;
  lt_plan& operator=(const lt_plan&) = delete;
  ~lt_plan() {
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
    for (cublasLtMatrixLayout_t l : {a, b, c, d})
      if (l) (void)cublasLtMatrixLayoutDestroy(l);
  }
};

// Word the kernels use to report invalid labels / ids without a host sync;
// raise_device_errors(q) reads it. Packed key = row << 32 | (uint32)label,
// so atomicMin keeps the first bad row (and its label) deterministically.
struct device_status {
  unsigned long long first_bad = ~0ull;
  int kernel = 0;  // detail::kernel_code of the first kernel that found one
  int pad = 0;
  long long lo = 0, hi = 0;  // the range the label had to lie in
};

// Small per-queue device and pinned-host slots for results the host reads
// back (reduction values, flags), allocated once with the queue.
struct queue_slots {
  device_status status;
  unsigned long long first_bad_id;
  double value;
  unsigned int flag;
};

struct queue_state {
  int device = 0;
  int sm_count = 1;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  queue_slots* dev_slots = nullptr;   // device memory
  queue_slots* host_slots = nullptr;  // pinned host memory
  fp32_math math = fp32_math::exact;
  bool lt_gelu = false;
  std::map<lt_key, std::unique_ptr<lt_plan>> plans;

  queue_state() = default;
  queue_state(const queue_state&) = delete;
  queue_state& operator=(const queue_state&) = delete;
  ~queue_state() {
    // Outstanding work may still use the workspace: drain before freeing.
    if (stream && cudaStreamSynchronize(stream) != cudaSuccess) (void)cudaGetLastError();
    plans.clear();
    if (lt) (void)cublasLtDestroy(lt);
    device_free(workspace);
    device_free(dev_slots);
    if (host_slots && cudaFreeHost(host_slots) != cudaSuccess) (void)cudaGetLastError();
    if (stream && cudaStreamDestroy(stream) != cudaSuccess) (void)cudaGetLastError();
  }
};

}  // namespace detail

// An ordered stream of device work: a non-blocking CUDA stream (no implicit
// sync with the legacy default stream), a cuBLASLt handle with its
// workspace, and small result slots. Move-only; a moved-from queue may only
// be destroyed or assigned. Kernels launch on the device that was current
// when the queue was made: keep that device current on the calling thread
// (one device per process or thread, as the executor runs).
class queue : public queue_base {
 public:
  queue() : queue(queue_options{}) {}
  explicit queue(const queue_options& opt) : s_(std::make_unique<detail::queue_state>()) {
    detail::queue_state& s = *s_;
    if (opt.device >= 0) STRATA_CUDA_CHECK(cudaSetDevice(opt.device));
    STRATA_CUDA_CHECK(cudaGetDevice(&s.device));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, s.device));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    STRATA_CUBLAS_CHECK(cublasLtCreate(&s.lt));
    s.workspace_bytes = detail::round_up(opt.workspace_bytes, alignment);
    if (s.workspace_bytes) s.workspace = detail::device_malloc(s.workspace_bytes);
    s.dev_slots = static_cast<detail::queue_slots*>(detail::device_malloc(sizeof(detail::queue_slots)));
    STRATA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host_slots), sizeof(detail::queue_slots)));
    const detail::queue_slots init{};
    STRATA_CUDA_CHECK(cudaMemcpyAsync(s.dev_slots, &init, sizeof init, cudaMemcpyHostToDevice, s.stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
    s.math = opt.math;
    s.lt_gelu = opt.lt_gelu_epilogue;
  }
  queue(queue&&) noexcept = default;
  queue& operator=(queue&&) noexcept = default;
  queue(const queue&) = delete;
  queue& operator=(const queue&) = delete;

  cudaStream_t stream() const noexcept { return s_->stream; }
  cublasLtHandle_t lt_handle() const noexcept { return s_->lt; }
  int device() const noexcept { return s_->device; }
  int sm_count() const noexcept { return s_->sm_count; }
  void* workspace() const noexcept { return s_->workspace; }
  std::size_t workspace_bytes() const noexcept { return s_->workspace_bytes; }

  fp32_math math() const noexcept { return s_->math; }
  void set_math(fp32_math m) noexcept { s_->math = m; }
  bool tf32() const noexcept { return s_->math == fp32_math::tf32; }
  void set_tf32(bool on) noexcept { s_->math = on ? fp32_math::tf32 : fp32_math::exact; }
  bool lt_gelu_epilogue() const noexcept { return s_->lt_gelu; }
  void set_lt_gelu_epilogue(bool on) noexcept { s_->lt_gelu = on; }

  // Blocks the host until all work submitted so far has finished.
  void synchronize() { STRATA_CUDA_CHECK(cudaStreamSynchronize(s_->stream)); }

  // For the kernel implementations.
  detail::queue_state& state() noexcept { return *s_; }

 private:
  std::unique_ptr<detail::queue_state> s_;
};

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

// A point in a queue's order. Timing is off unless asked for (cheaper to
// record and to wait on).
class event {
 public:
  event() noexcept = default;  // empty: complete, waiting on it is a no-op
  explicit event(bool timing) {
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~event() {
    if (e_ && cudaEventDestroy(e_) != cudaSuccess) (void)cudaGetLastError();
  }
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      if (e_) (void)cudaEventDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;

  cudaEvent_t native() const noexcept { return e_; }
  explicit operator bool() const noexcept { return e_ != nullptr; }

 private:
  cudaEvent_t e_ = nullptr;
};

inline event record(queue& q) {
  event e(false);
  STRATA_CUDA_CHECK(cudaEventRecord(e.native(), q.stream()));
  return e;
}
// Re-records an existing event (no creation cost; keeps its timing flag).
inline void record(queue& q, event& e) {
  if (!e) e = event(false);
  STRATA_CUDA_CHECK(cudaEventRecord(e.native(), q.stream()));
}
// Later work on q waits for e on the device; the host does not block.
inline void wait(queue& q, const event& e) {
  if (e) STRATA_CUDA_CHECK(cudaStreamWaitEvent(q.stream(), e.native(), 0));
}
inline bool query(const event& e) {
  if (!e) return true;
  const cudaError_t r = cudaEventQuery(e.native());
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to report later
    return false;
  }
  STRATA_CUDA_CHECK(r);
  return true;
}
inline void synchronize(const event& e) {
  if (e) STRATA_CUDA_CHECK(cudaEventSynchronize(e.native()));
}
inline void synchronize(queue& q) { q.synchronize(); }
// Milliseconds between two completed events created with timing enabled.
inline float elapsed_ms(const event& start, const event& stop) {
  float ms = 0.f;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.native(), stop.native()));
  return ms;
}

// ---------------------------------------------------------------------------
// Transfers
// ---------------------------------------------------------------------------

// host -> device, ordered on q. Pageable `host` memory may be reused as soon
// as this returns (the runtime stages it); pinned memory must stay untouched
// until the copy has run (synchronize(q) or an event).
template <class T>
void upload(queue& q, const T* host, std::size_t n, T* device) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(device, host, n * sizeof(T), cudaMemcpyHostToDevice, q.stream()));
}

// device -> host, ordered on q. Asynchronous: `host` holds the data only
// after synchronize(q) (or an event recorded after this call completed).
template <class T>
void download(queue& q, const T* device, std::size_t n, T* host) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host, device, n * sizeof(T), cudaMemcpyDeviceToHost, q.stream()));
}

// A whole piece of stream work recorded once and replayed: what a static plan's
// training step becomes. capture() records everything `work` enqueues on q (nothing
// runs); launch() replays it on q. Host code inside `work` runs only while capturing.
class graph {
 public:
  graph() = default;
  graph(graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  graph& operator=(graph&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  ~graph() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
  }

  bool ready() const noexcept { return exec_ != nullptr; }

  template <class F>
  void capture(queue& q, F&& work) {
    STRATA_CUDA_CHECK(cudaStreamBeginCapture(q.stream(), cudaStreamCaptureModeThreadLocal));
    cudaGraph_t g = nullptr;
    try {
      work();
    } catch (...) {
      (void)cudaStreamEndCapture(q.stream(), &g);
      if (g) (void)cudaGraphDestroy(g);
      throw;
    }
    STRATA_CUDA_CHECK(cudaStreamEndCapture(q.stream(), &g));
    cudaGraphExec_t e = nullptr;
    const cudaError_t rc = cudaGraphInstantiate(&e, g, 0);
    (void)cudaGraphDestroy(g);
    STRATA_CUDA_CHECK(rc);
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    exec_ = e;
  }
  void launch(queue& q) { STRATA_CUDA_CHECK(cudaGraphLaunch(exec_, q.stream())); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace strata::backend::cuda

namespace strata::backend {

// The CUDA backend as a single type, for `template <class Backend>` plans.
struct Cuda {
  static constexpr const char* name = "cuda";
  // Device memory: the host must upload/download instead of dereferencing.
  static constexpr bool host_accessible = false;

  template <class T>
  using buffer = cuda::buffer<T>;
  template <class T>
  using view = cuda::view<T>;
  using queue = cuda::queue;
  using event = cuda::event;

  template <class T>
  static buffer<T> allocate(std::size_t n) {
    return buffer<T>(n);
  }
  // Host memory for offloaded state: page-locked, read and written by upload/download.
  template <class T>
  using host_buffer = cuda::pinned_buffer<T>;
  template <class T>
  static host_buffer<T> allocate_host(std::size_t n) {
    return host_buffer<T>(n);
  }
  using graph = cuda::graph;
  static event record(queue& q) { return cuda::record(q); }
  static void wait(queue& q, const event& e) { cuda::wait(q, e); }
  static bool query(const event& e) { return cuda::query(e); }
  static void synchronize(queue& q) { q.synchronize(); }
  // Whole-device barrier.
  static void synchronize() { STRATA_CUDA_CHECK(cudaDeviceSynchronize()); }

  template <class T>
  static void upload(queue& q, const T* host, std::size_t n, T* device) {
    cuda::upload(q, host, n, device);
  }
  // True for memory the device reads directly (cudaMalloc, managed): a batch already
  // on the GPU is copied device to device and checked by kernels.
  static bool device_pointer(const void* p) {
    cudaPointerAttributes a{};
    STRATA_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  // Asynchronous: synchronize(q) before reading `host`.
  template <class T>
  static void download(queue& q, const T* device, std::size_t n, T* host) {
    cuda::download(q, device, n, host);
  }
};

}  // namespace strata::backend
