// strata-header: cuda-only nccl
#pragma once
// The base of nccl_communicator (comm/nccl/bootstrap.hpp): the state it owns (the
// NCCL communicator, its stream, the watchdog's record of issued operations; see
// comm/nccl/watchdog.hpp), what it reports about itself, its stream, the watchdog's
// controls (timeout, query, synchronize, abort), and the checks every operation
// makes of its arguments before NCCL sees them.
#include <cuda_runtime.h>
#include <nccl.h>

#include "strata/comm/nccl/types.hpp"
#include "strata/comm/nccl/watchdog.hpp"
#include "strata/core/communicator.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>

namespace strata::comm::detail {

class nccl_handle {
 public:
  // A moved-from communicator reports rank 0 of 0 and throws on use.
  int rank() const noexcept { return s_ ? s_->rank : 0; }
  int size() const noexcept { return s_ ? s_->size : 0; }
  std::string_view name() const noexcept { return s_ ? std::string_view(s_->name) : std::string_view(); }
  int device() const noexcept { return s_ ? s_->device : -1; }
  ncclComm_t native() const noexcept { return s_ ? s_->comm : nullptr; }
  bool aborted() const noexcept { return s_ && !s_->abort_reason.empty(); }

  // ---- streams --------------------------------------------------------------

  cudaStream_t stream() const noexcept { return s_ ? s_->stream : nullptr; }

  // Later operations go to `s` (not owned; must outlive its use here and be
  // on this communicator's device). Operations already issued keep their own
  // completion events, so synchronize() still covers them.
  void set_stream(cudaStream_t s, std::source_location at = std::source_location::current()) {
    auto& st = usable("set_stream", at);
#if CUDART_VERSION >= 12080
    device_scope on(st.device, st.name);  // so a null stream means this device's
    int dev = -1;
    st.cuda_check(cudaStreamGetDevice(s, &dev), "cudaStreamGetDevice", nullptr, at);
    if (dev != st.device)
      throw comm_error("strata::comm: set_stream at " + nccl_site(at) + " on " + st.where() +
                       ": the stream belongs to CUDA device " + std::to_string(dev));
#endif
    st.stream = s;
  }

  // The communicator's stream waits for all work currently queued on
  // `producer` (e.g. the backward kernels that wrote a gradient bucket).
  void wait_for(cudaStream_t producer, std::source_location at = std::source_location::current()) {
    auto& st = usable("wait_for", at);
    device_scope on(st.device, st.name);
    if (st.join_event == nullptr)
      st.cuda_check(cudaEventCreateWithFlags(&st.join_event, cudaEventDisableTiming),
                    "cudaEventCreateWithFlags", nullptr, at);
    st.cuda_check(cudaEventRecord(st.join_event, producer), "cudaEventRecord", nullptr, at);
    st.cuda_check(cudaStreamWaitEvent(st.stream, st.join_event, 0), "cudaStreamWaitEvent", nullptr, at);
  }

  // Records `ev` on the communicator's stream after everything issued so far,
  // for consumers on other streams (cudaStreamWaitEvent).
  void record(cudaEvent_t ev, std::source_location at = std::source_location::current()) {
    auto& st = usable("record", at);
    st.cuda_check(cudaEventRecord(ev, st.stream), "cudaEventRecord", nullptr, at);
  }

  // ---- watchdog ---------------------------------------------------------------

  std::chrono::milliseconds timeout() const noexcept {
    return s_ ? s_->timeout : std::chrono::milliseconds(0);
  }
  void set_timeout(std::chrono::milliseconds t) {
    auto& st = usable("set_timeout", std::source_location::current());
    if (t.count() <= 0)
      throw comm_error("strata::comm: set_timeout on " + st.where() + ": the timeout must be positive");
    st.timeout = t;
  }

  // Number of operations issued so far, and a description of the last one
  // ("op #N kind(sizes) issued at file:line").
  std::uint64_t ops_issued() const noexcept { return s_ ? s_->seq : 0; }
  std::string last_op() const { return s_ && s_->seq > 0 ? nccl_describe(s_->last) : std::string(); }

  // Aborts now (e.g. because another communicator failed): NCCL kernels of
  // this communicator exit, every later call throws.
  void abort(std::string_view reason = "abort() was called") noexcept {
    if (!s_ || !s_->abort_reason.empty()) return;
    std::string why;
    try {
      why.assign(reason);
    } catch (...) {
    }
    if (why.empty()) why = "aborted";  // fits the small-string buffer: cannot throw
    s_->abort_comm(std::move(why));
  }

  // Non-blocking: true when every issued operation has completed. Throws
  // (after aborting) if NCCL or CUDA reported an error.
  bool query(std::source_location at = std::source_location::current()) {
    auto& st = usable("query", at);
    device_scope on(st.device, st.name);
    bool progressed = false;
    if (const cudaError_t e = st.retire(progressed); e != cudaSuccess) {
      (void)cudaGetLastError();
      st.watchdog_fail("CUDA reported " + cuda_error_text(e), at);
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(st.comm, &state);
    if (r != ncclSuccess) state = r;
    if (state != ncclSuccess && state != ncclInProgress)
      st.watchdog_fail("NCCL reported " + nccl_error_text(state), at);
    return st.pending.empty();
  }

  // Waits (with the watchdog) until every issued operation has completed.
  void synchronize(std::source_location at = std::source_location::current()) {
    usable("synchronize", at).synchronize(at);
  }

 protected:
  nccl_handle() = default;

  std::unique_ptr<nccl_state> s_;

  nccl_state& usable(const char* what, const std::source_location& at) const {
    if (!s_) throw comm_error(std::string("strata::comm: ") + what + " at " + nccl_site(at) +
                              " on a moved-from nccl_communicator");
    if (!s_->abort_reason.empty())
      throw comm_error(std::string("strata::comm: ") + what + " at " + nccl_site(at) + " on " +
                       s_->where() + ", which was aborted earlier: " + s_->abort_reason);
    return *s_;
  }

  static void check_rank(const nccl_state& st, int r, const char* what, const std::source_location& at) {
    if (r < 0 || r >= st.size)
      throw comm_error(std::string("strata::comm: ") + what + " " + std::to_string(r) + " at " +
                       nccl_site(at) + " is not a rank of " + st.where());
  }

  static void check_tag(const nccl_state& st, int tag, const std::source_location& at) {
    if (tag < 0 || tag > 32767)
      throw comm_error("strata::comm: tag " + std::to_string(tag) + " at " + nccl_site(at) + " on " +
                       st.where() + " is outside [0, 32767]");
  }

  // Rejects null and host-only buffers up front: NCCL would fault on the
  // device instead, which kills the CUDA context with no useful message.
  static void check_buf(const nccl_state& st, const void* p, std::size_t bytes, const char* what,
                        const std::source_location& at) {
    if (bytes == 0) return;
    auto fail = [&](const std::string& why) {
      throw comm_error(std::string("strata::comm: ") + what + " at " + nccl_site(at) + " on " + st.where() +
                       ": " + why);
    };
    if (p == nullptr) fail("null buffer with " + std::to_string(bytes) + " bytes");
    cudaPointerAttributes a{};
    if (const cudaError_t e = cudaPointerGetAttributes(&a, p); e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("cudaPointerGetAttributes failed: " + cuda_error_text(e));
    }
    if (a.type == cudaMemoryTypeUnregistered)
      fail("the buffer is plain host memory; NCCL needs device memory (cudaMalloc)");
    if (a.type == cudaMemoryTypeDevice && a.device != st.device)
      fail("the buffer lives on CUDA device " + std::to_string(a.device));
  }
};

}  // namespace strata::comm::detail
