// strata-header: cuda-only
// strata-header: mpi nccl
#pragma once
// NCCL backend of the communicator concept: one process per GPU, buffers are
// device pointers, every operation is enqueued on a CUDA stream the
// communicator holds. world() bootstraps over MPI and exists when the build has
// MPI (STRATA_WITH_MPI, set by CMake's strata::mpi); single() never touches MPI.
//
// Semantics on top of communicator.hpp:
//  * Buffers must be device-accessible memory of this communicator's device
//    (cudaMalloc, managed, or mapped pinned). Plain host memory is rejected
//    with a comm_error before NCCL can turn it into an illegal address.
//  * Collectives, send/recv/sendrecv/group return once enqueued. The host may
//    read results or reuse buffers only after synchronize(), or after joining
//    the stream with an event (record()). barrier, agree, split and group_of
//    are host-synchronous, as the concept requires.
//  * Tags are range-checked (0..32767, as with MPI) and otherwise ignored: NCCL
//    matches messages between two ranks by posting order.
//  * A standalone send or recv whose peer is this rank cannot complete: NCCL
//    only pairs self traffic inside one group (use sendrecv or group). NCCL
//    reports it as invalid usage, which surfaces as a comm_error.
//  * Streams: world()/single() create one non-blocking stream that every
//    communicator split from them shares, so operations on world, data,
//    tensor and pipeline communicators run in program order, as with MPI.
//    set_stream() moves one communicator onto another stream (e.g. a separate
//    gradient stream); ordering against compute is then the caller's job
//    (wait_for(stream), record(event)).
//  * Not thread-safe: one host thread drives a communicator.
//
// Failure model: see comm/nccl_watchdog.hpp (every wait is bounded by a timeout;
// an NCCL error or a stuck peer aborts the communicator with a comm_error naming it).

#include <cuda_runtime.h>
#include <nccl.h>

#include "strata/core/communicator.hpp"
#if defined(STRATA_WITH_MPI)
#include "strata/comm/mpi.hpp"
#define STRATA_NCCL_WITH_MPI 1
#endif
#include "strata/comm/nccl_watchdog.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "strata/comm/nccl.hpp needs NCCL >= 2.18 (non-blocking ncclCommSplit)"
#endif

namespace strata::comm {

class nccl_communicator {
 public:
  // Longest agree() message shipped to the other ranks.
  static constexpr std::size_t max_agree_message = 4096;

  // STRATA_NCCL_TIMEOUT_S (seconds, > 0) or 300 s.
  static std::chrono::milliseconds default_timeout() {
    const char* s = std::getenv("STRATA_NCCL_TIMEOUT_S");
    if (s == nullptr || *s == '\0') return std::chrono::seconds(300);
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || *end != '\0' || !std::isfinite(v) || v <= 0.0 || v > 1e8)
      throw comm_error(std::string("strata::comm: STRATA_NCCL_TIMEOUT_S='") + s +
                       "' is not a positive number of seconds");
    return std::chrono::milliseconds(static_cast<long long>(std::ceil(v * 1000.0)));
  }
#ifdef STRATA_NCCL_WITH_MPI
  // Collective over `mpi`: one NCCL rank per MPI rank, same numbering. The
  // device is local_rank % device_count, where local_rank comes from an
  // MPI_COMM_TYPE_SHARED split (so it also works when the launcher restricts
  // CUDA_VISIBLE_DEVICES to one GPU per rank); it becomes the calling
  // thread's current device. Any rank's failure makes every rank throw the
  // same comm_error.
  static nccl_communicator world(mpi_communicator& mpi, std::string name = "world") {
    MPI_Comm node_raw = MPI_COMM_NULL;
    const int rc = MPI_Comm_split_type(mpi.native(), MPI_COMM_TYPE_SHARED, mpi.rank(),
                                       MPI_INFO_NULL, &node_raw);
    if (rc != MPI_SUCCESS)
      throw comm_error("strata::comm: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed on communicator '" +
                       std::string(mpi.name()) + "' (rank " + std::to_string(mpi.rank()) +
                       "): " + detail::mpi_error_string(rc));
    const int local_rank = mpi_communicator::adopt(node_raw, std::string(mpi.name()) + ".node").rank();
    const std::string me = "nccl_communicator::world('" + name + "'): rank " + std::to_string(mpi.rank()) +
                           " (local rank " + std::to_string(local_rank) + "): ";

    std::string err;
    std::chrono::milliseconds timeout{};
    int device = -1;
    try {
      timeout = default_timeout();
    } catch (const comm_error& e) {
      err = e.what();
    }
    int ndev = 0;
    if (err.empty()) {
      if (const cudaError_t e = cudaGetDeviceCount(&ndev); e != cudaSuccess) {
        (void)cudaGetLastError();
        err = "cudaGetDeviceCount failed: " + detail::cuda_error_text(e);
      } else if (ndev <= 0) {
        err = "no CUDA device is visible";
      } else {
        device = local_rank % ndev;
        if (const cudaError_t e2 = cudaSetDevice(device); e2 != cudaSuccess) {
          (void)cudaGetLastError();
          err = "cudaSetDevice(" + std::to_string(device) + ") failed: " + detail::cuda_error_text(e2);
        }
      }
    }
    // Checked collectively: a rank that threw alone would leave the others in
    // the broadcast below.
    mpi.agree(err.empty(), me + err);

    ncclUniqueId id{};
    if (mpi.rank() == 0) {
      if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        err = "ncclGetUniqueId failed: " + detail::nccl_error_text(r);
    }
    mpi.agree(err.empty(), me + err);
    // The id is 128 opaque bytes; int32 words go through the checked wrapper.
    static_assert(sizeof(ncclUniqueId) % sizeof(std::int32_t) == 0);
    std::array<std::int32_t, sizeof(ncclUniqueId) / sizeof(std::int32_t)> words{};
    std::memcpy(words.data(), &id, sizeof id);
    mpi.broadcast(words.data(), words.size(), 0);
    std::memcpy(&id, words.data(), sizeof id);

    std::optional<nccl_communicator> c;
    try {
      c.emplace(create(mpi.size(), mpi.rank(), id, device, std::move(name), timeout));
    } catch (const comm_error& e) {
      err = e.what();
    }
    // A rank whose init failed fast waits here until the others' init fails
    // or times out; then all throw the same error naming the first failure.
    mpi.agree(err.empty(), err);
    return std::move(*c);
  }
#endif

  // World of one rank, no MPI: an id made locally, ncclCommInitRankConfig with
  // nranks = 1. device < 0 means the calling thread's current device; the
  // chosen device becomes current.
  static nccl_communicator single(std::string name = "world", int device = -1) {
    const auto timeout = default_timeout();
    if (device < 0) {
      if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
        (void)cudaGetLastError();
        throw comm_error("strata::comm: nccl_communicator::single('" + name +
                         "'): cudaGetDevice failed: " + detail::cuda_error_text(e));
      }
    }
    ncclUniqueId id{};
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      throw comm_error("strata::comm: nccl_communicator::single('" + name +
                       "'): ncclGetUniqueId failed: " + detail::nccl_error_text(r));
    return create(1, 0, id, device, std::move(name), timeout);
  }

  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  nccl_communicator(nccl_communicator&&) noexcept = default;
  nccl_communicator& operator=(nccl_communicator&&) noexcept = default;
  ~nccl_communicator() = default;

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
    detail::device_scope on(st.device, st.name);  // so a null stream means this device's
    int dev = -1;
    st.cuda_check(cudaStreamGetDevice(s, &dev), "cudaStreamGetDevice", nullptr, at);
    if (dev != st.device)
      throw comm_error("strata::comm: set_stream at " + detail::nccl_site(at) + " on " + st.where() +
                       ": the stream belongs to CUDA device " + std::to_string(dev));
#endif
    st.stream = s;
  }

  // The communicator's stream waits for all work currently queued on
  // `producer` (e.g. the backward kernels that wrote a gradient bucket).
  void wait_for(cudaStream_t producer, std::source_location at = std::source_location::current()) {
    auto& st = usable("wait_for", at);
    detail::device_scope on(st.device, st.name);
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
  std::string last_op() const { return s_ && s_->seq > 0 ? detail::nccl_describe(s_->last) : std::string(); }

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
    detail::device_scope on(st.device, st.name);
    bool progressed = false;
    if (const cudaError_t e = st.retire(progressed); e != cudaSuccess) {
      (void)cudaGetLastError();
      st.watchdog_fail("CUDA reported " + detail::cuda_error_text(e), at);
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(st.comm, &state);
    if (r != ncclSuccess) state = r;
    if (state != ncclSuccess && state != ncclInProgress)
      st.watchdog_fail("NCCL reported " + detail::nccl_error_text(state), at);
    return st.pending.empty();
  }

  // Waits (with the watchdog) until every issued operation has completed.
  void synchronize(std::source_location at = std::source_location::current()) {
    usable("synchronize", at).synchronize(at);
  }

  // ---- host-synchronous collectives ------------------------------------------

  // NCCL has no barrier: a one-word all-reduce, then synchronize().
  void barrier(std::source_location at = std::source_location::current()) {
    auto& st = usable("barrier", at);
    detail::device_scope on(st.device, st.name);
    ensure_scratch(st, at);
    auto o = st.begin(detail::nccl_op_kind::barrier, at);
    st.nccl_check(ncclAllReduce(st.dev_scratch, st.dev_scratch, 1, ncclInt32, ncclSum, st.comm, st.stream),
                  "ncclAllReduce", &o);
    st.commit(o);
    st.synchronize(at);
  }

  // All-reduce (min) of "failing rank or INT32_MAX"; the lowest failing rank
  // then broadcasts its message so every rank throws the identical error.
  void agree(bool ok, std::string_view message,
             std::source_location at = std::source_location::current()) {
    auto& st = usable("agree", at);
    detail::device_scope on(st.device, st.name);
    ensure_scratch(st, at);
    std::int32_t* h = st.host_scratch;
    std::int32_t* d = st.dev_scratch;
    h[0] = ok ? INT32_MAX : st.rank;
    auto o = st.begin(detail::nccl_op_kind::agree, at);
    st.cuda_check(cudaMemcpyAsync(d, h, sizeof(std::int32_t), cudaMemcpyHostToDevice, st.stream),
                  "cudaMemcpyAsync", &o);
    st.nccl_check(ncclAllReduce(d, d, 1, ncclInt32, ncclMin, st.comm, st.stream), "ncclAllReduce", &o);
    st.cuda_check(cudaMemcpyAsync(h, d, sizeof(std::int32_t), cudaMemcpyDeviceToHost, st.stream),
                  "cudaMemcpyAsync", &o);
    st.commit(o);
    st.synchronize(at);
    const int failing = h[0];
    if (failing == INT32_MAX) return;

    const std::size_t words = 1 + max_agree_message / sizeof(std::int32_t);
    if (st.rank == failing) {
      const std::size_t len = std::min(message.size(), max_agree_message);
      h[0] = static_cast<std::int32_t>(len);
      std::memcpy(h + 1, message.data(), len);
    }
    auto o2 = st.begin(detail::nccl_op_kind::agree_message, at);
    st.cuda_check(cudaMemcpyAsync(d, h, words * sizeof(std::int32_t), cudaMemcpyHostToDevice, st.stream),
                  "cudaMemcpyAsync", &o2);
    st.nccl_check(ncclBroadcast(d, d, words, ncclInt32, failing, st.comm, st.stream), "ncclBroadcast", &o2);
    st.cuda_check(cudaMemcpyAsync(h, d, words * sizeof(std::int32_t), cudaMemcpyDeviceToHost, st.stream),
                  "cudaMemcpyAsync", &o2);
    st.commit(o2);
    st.synchronize(at);
    const auto len = static_cast<std::size_t>(
        std::clamp<std::int32_t>(h[0], 0, static_cast<std::int32_t>(max_agree_message)));
    throw comm_error("strata::comm: check failed on rank " + std::to_string(failing) +
                     " of communicator '" + st.name + "' (size " + std::to_string(st.size) +
                     "): " + std::string(reinterpret_cast<const char*>(h + 1), len));
  }

  // ---- collectives --------------------------------------------------------------

  template <comm_scalar T>
  void all_reduce(T* buf, std::size_t count, reduce_op op,
                  std::source_location at = std::source_location::current()) {
    auto& st = usable("all_reduce", at);
    detail::device_scope on(st.device, st.name);
    check_buf(st, buf, count * sizeof(T), "all_reduce", at);
    auto o = st.begin(detail::nccl_op_kind::all_reduce, at);
    o.type = dtype_of<T>;
    o.count = count;
    o.op = op;
    st.nccl_check(ncclAllReduce(buf, buf, count, detail::nccl_type(dtype_of<T>), detail::nccl_op(op),
                                st.comm, st.stream),
                  "ncclAllReduce", &o);
    st.commit(o);
  }

  // NCCL's in-place form (recv == send + rank*recv_count) runs as is; any
  // other overlap (e.g. recv == send) is staged through a stream-ordered copy.
  template <comm_scalar T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op op,
                      std::source_location at = std::source_location::current()) {
    auto& st = usable("reduce_scatter", at);
    detail::device_scope on(st.device, st.name);
    const std::size_t total = recv_count * static_cast<std::size_t>(st.size);
    check_buf(st, send, total * sizeof(T), "reduce_scatter (send)", at);
    check_buf(st, recv, recv_count * sizeof(T), "reduce_scatter (recv)", at);
    auto o = st.begin(detail::nccl_op_kind::reduce_scatter, at);
    o.type = dtype_of<T>;
    o.count = recv_count;
    o.op = op;
    staging tmp(st);
    const bool nccl_in_place = recv == send + static_cast<std::size_t>(st.rank) * recv_count;
    if (!nccl_in_place && detail::overlaps<T>(send, total, recv, recv_count))
      send = static_cast<const T*>(tmp.copy(send, total * sizeof(T), o));
    st.nccl_check(ncclReduceScatter(send, recv, recv_count, detail::nccl_type(dtype_of<T>),
                                    detail::nccl_op(op), st.comm, st.stream),
                  "ncclReduceScatter", &o);
    st.commit(o);
  }

  // In place when send == recv + rank*send_count; other overlaps are staged.
  template <comm_scalar T>
  void all_gather(const T* send, T* recv, std::size_t send_count,
                  std::source_location at = std::source_location::current()) {
    auto& st = usable("all_gather", at);
    detail::device_scope on(st.device, st.name);
    const std::size_t total = send_count * static_cast<std::size_t>(st.size);
    check_buf(st, send, send_count * sizeof(T), "all_gather (send)", at);
    check_buf(st, recv, total * sizeof(T), "all_gather (recv)", at);
    auto o = st.begin(detail::nccl_op_kind::all_gather, at);
    o.type = dtype_of<T>;
    o.count = send_count;
    staging tmp(st);
    const bool nccl_in_place = send == recv + static_cast<std::size_t>(st.rank) * send_count;
    if (!nccl_in_place && detail::overlaps<T>(send, send_count, recv, total))
      send = static_cast<const T*>(tmp.copy(send, send_count * sizeof(T), o));
    st.nccl_check(ncclAllGather(send, recv, send_count, detail::nccl_type(dtype_of<T>), st.comm, st.stream),
                  "ncclAllGather", &o);
    st.commit(o);
  }

  template <comm_scalar T>
  void broadcast(T* buf, std::size_t count, int root,
                 std::source_location at = std::source_location::current()) {
    auto& st = usable("broadcast", at);
    detail::device_scope on(st.device, st.name);
    check_rank(st, root, "broadcast root", at);
    check_buf(st, buf, count * sizeof(T), "broadcast", at);
    auto o = st.begin(detail::nccl_op_kind::broadcast, at);
    o.type = dtype_of<T>;
    o.count = count;
    o.peer = root;
    st.nccl_check(ncclBroadcast(buf, buf, count, detail::nccl_type(dtype_of<T>), root, st.comm, st.stream),
                  "ncclBroadcast", &o);
    st.commit(o);
  }

  // Grouped send/recv (one pair per peer). Overlapping send/recv (including
  // in place) is staged: a grouped exchange would read blocks already
  // overwritten.
  template <comm_scalar T>
  void all_to_all(const T* send, T* recv, std::size_t count_per_peer,
                  std::source_location at = std::source_location::current()) {
    auto& st = usable("all_to_all", at);
    detail::device_scope on(st.device, st.name);
    const std::size_t total = count_per_peer * static_cast<std::size_t>(st.size);
    check_buf(st, send, total * sizeof(T), "all_to_all (send)", at);
    check_buf(st, recv, total * sizeof(T), "all_to_all (recv)", at);
    auto o = st.begin(detail::nccl_op_kind::all_to_all, at);
    o.type = dtype_of<T>;
    o.count = count_per_peer;
    staging tmp(st);
    if (detail::overlaps<T>(send, total, recv, total))
      send = static_cast<const T*>(tmp.copy(send, total * sizeof(T), o));
    const ncclDataType_t t = detail::nccl_type(dtype_of<T>);
    st.nccl_check(ncclGroupStart(), "ncclGroupStart", &o);
    ncclResult_t r = ncclSuccess;
    const char* failed = nullptr;
    for (int p = 0; p < st.size && failed == nullptr; ++p) {
      const std::size_t off = static_cast<std::size_t>(p) * count_per_peer;
      if ((r = ncclSend(send + off, count_per_peer, t, p, st.comm, st.stream)) != ncclSuccess)
        failed = "ncclSend";
      else if ((r = ncclRecv(recv + off, count_per_peer, t, p, st.comm, st.stream)) != ncclSuccess)
        failed = "ncclRecv";
    }
    end_group(st, r, failed, o);
    st.commit(o);
  }

  // ---- point to point --------------------------------------------------------------

  template <comm_scalar T>
  void send(const T* buf, std::size_t count, int peer, int tag = 0,
            std::source_location at = std::source_location::current()) {
    auto& st = usable("send", at);
    check_tag(st, tag, at);
    if (peer == no_peer) return;
    detail::device_scope on(st.device, st.name);
    check_rank(st, peer, "send peer", at);
    check_buf(st, buf, count * sizeof(T), "send", at);
    auto o = st.begin(detail::nccl_op_kind::send, at);
    o.type = dtype_of<T>;
    o.count = count;
    o.peer = peer;
    st.nccl_check(ncclSend(buf, count, detail::nccl_type(dtype_of<T>), peer, st.comm, st.stream), "ncclSend",
                  &o);
    st.commit(o);
  }

  template <comm_scalar T>
  void recv(T* buf, std::size_t count, int peer, int tag = 0,
            std::source_location at = std::source_location::current()) {
    auto& st = usable("recv", at);
    check_tag(st, tag, at);
    if (peer == no_peer) return;
    detail::device_scope on(st.device, st.name);
    check_rank(st, peer, "recv peer", at);
    check_buf(st, buf, count * sizeof(T), "recv", at);
    auto o = st.begin(detail::nccl_op_kind::recv, at);
    o.type = dtype_of<T>;
    o.count = count;
    o.peer = peer;
    st.nccl_check(ncclRecv(buf, count, detail::nccl_type(dtype_of<T>), peer, st.comm, st.stream), "ncclRecv",
                  &o);
    st.commit(o);
  }

  template <comm_scalar T>
  void sendrecv(const T* send, std::size_t send_count, int dest, T* recv, std::size_t recv_count,
                int source, int tag = 0, std::source_location at = std::source_location::current()) {
    const p2p_op ops[] = {send_op(send, send_count, dest, tag), recv_op(recv, recv_count, source, tag)};
    auto& st = usable("sendrecv", at);
    detail::nccl_op_info o;
    o.kind = detail::nccl_op_kind::sendrecv;
    o.where = at;
    o.type = dtype_of<T>;
    o.count = send_count;
    o.peer = dest;
    o.count2 = recv_count;
    o.peer2 = source;
    run_group(st, ops, o, at);
  }

  // ncclGroupStart/End around all ops: they progress together, so rings and
  // pipeline exchanges cannot deadlock. Returns once enqueued.
  void group(std::span<const p2p_op> ops, std::source_location at = std::source_location::current()) {
    auto& st = usable("group", at);
    detail::nccl_op_info o;
    o.kind = detail::nccl_op_kind::group;
    o.where = at;
    for (const auto& op : ops) {
      if (op.peer == no_peer) continue;
      (op.what == p2p_op::kind::send ? o.count : o.count2) += 1;
    }
    if (!ops.empty()) o.type = ops.front().type;
    run_group(st, ops, o, at);
  }
  void group(std::initializer_list<p2p_op> ops, std::source_location at = std::source_location::current()) {
    group(std::span<const p2p_op>(ops.begin(), ops.size()), at);
  }

  // ---- sub-communicators ----------------------------------------------------------

  // Collective (ncclCommSplit). The child shares this communicator's stream
  // and timeout. Create sub-communicators once, in the same order on every rank.
  nccl_communicator split(int color, int key, std::string name = {},
                          std::source_location at = std::source_location::current()) {
    // agree first: a rank throwing alone would leave the rest inside the split.
    agree(color >= 0, "split: color must be >= 0, got " + std::to_string(color), at);
    auto& st = usable("split", at);
    return split_unchecked(color, key,
                           name.empty() ? st.name + ".split" + std::to_string(color) : std::move(name), at);
  }

  nccl_communicator group_of(std::span<const int> ranks, std::string name = {},
                             std::source_location at = std::source_location::current()) {
    auto& st = usable("group_of", at);
    std::string err;
    auto pos = std::find(ranks.begin(), ranks.end(), st.rank);
    if (pos == ranks.end()) err = "the caller (rank " + std::to_string(st.rank) + ") is not in " + list(ranks);
    for (std::size_t i = 0; i < ranks.size() && err.empty(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= st.size)
        err = list(ranks) + " has rank " + std::to_string(ranks[i]) + " outside [0, " +
              std::to_string(st.size) + ")";
      else if (std::find(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(i), ranks[i]) !=
               ranks.begin() + static_cast<std::ptrdiff_t>(i))
        err = list(ranks) + " repeats rank " + std::to_string(ranks[i]);
    }
    agree(err.empty(), "group_of: " + err, at);
    // color = lowest member: unique per group because groups are disjoint.
    const int color = *std::min_element(ranks.begin(), ranks.end());
    nccl_communicator sub = split_unchecked(
        color, static_cast<int>(pos - ranks.begin()),
        name.empty() ? st.name + ".group" + std::to_string(color) : std::move(name), at);
    // Members that passed different lists would silently get another group.
    const std::vector<std::int32_t> got = sub.gather_rank(st.rank, at);
    const bool same = got.size() == ranks.size() && std::equal(got.begin(), got.end(), ranks.begin());
    agree(same, "group_of: rank " + std::to_string(st.rank) + " asked for " + list(ranks) +
                    " but the ranks that chose the same group formed " +
                    list(std::span<const std::int32_t>(got)) + " (every member must pass the same list)",
          at);
    return sub;
  }

 private:
  nccl_communicator() = default;

  std::unique_ptr<detail::nccl_state> s_;

  detail::nccl_state& usable(const char* what, const std::source_location& at) const {
    if (!s_) throw comm_error(std::string("strata::comm: ") + what + " at " + detail::nccl_site(at) +
                              " on a moved-from nccl_communicator");
    if (!s_->abort_reason.empty())
      throw comm_error(std::string("strata::comm: ") + what + " at " + detail::nccl_site(at) + " on " +
                       s_->where() + ", which was aborted earlier: " + s_->abort_reason);
    return *s_;
  }

  static nccl_communicator create(int nranks, int rank, const ncclUniqueId& id, int device,
                                  std::string name, std::chrono::milliseconds timeout) {
    nccl_communicator c;
    c.s_ = std::make_unique<detail::nccl_state>();
    auto& st = *c.s_;
    st.name = std::move(name);
    st.rank = rank;
    st.size = nranks;
    st.device = device;
    st.timeout = timeout;
    const auto at = std::source_location::current();
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
      st.cuda_fail(e, "cudaSetDevice", nullptr, at);
    cudaStream_t s = nullptr;
    st.cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    st.owned_stream.reset(s, [](cudaStream_t p) { (void)cudaStreamDestroy(p); });
    st.stream = s;

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // every wait below is ours, and bounded
    // The init job may store the handle again when it finishes; like split,
    // keep that slot alive (leaked) if we give up waiting.
    auto slot = std::make_unique<ncclComm_t>(nullptr);
    const ncclResult_t r = ncclCommInitRankConfig(slot.get(), nranks, id, rank, &cfg);
    st.comm = *slot;  // from here on a failure aborts it (state destructor or abort_comm)
    try {
      if (r != ncclSuccess && r != ncclInProgress) st.nccl_fail(r, "ncclCommInitRankConfig", nullptr, at);
      wait_new_comm(st, st.comm, "ncclCommInitRankConfig", at);
    } catch (...) {
      (void)slot.release();
      throw;
    }
    return c;
  }

  [[noreturn]] static void creation_timed_out(detail::nccl_state& st, const char* call,
                                              const std::source_location& at) {
    std::string msg = "strata::comm: NCCL watchdog on " + st.where() + ": " + call + " (at " +
                      detail::nccl_site(at) + ") did not complete within " + detail::nccl_seconds(st.timeout) +
                      ". Called ncclCommAbort. Usual causes: a rank did not take part, or ranks "
                      "created communicators in different orders";
    st.abort_comm(msg);
    throw comm_error(msg);
  }

  // A freshly created communicator: wait for its non-blocking init, then
  // check NCCL agrees on rank and size.
  static void wait_new_comm(detail::nccl_state& st, ncclComm_t comm, const char* call,
                            const std::source_location& at) {
    const auto deadline = std::chrono::steady_clock::now() + st.timeout;
    const ncclResult_t ready = detail::nccl_state::poll_ready(comm, deadline);
    if (ready == ncclInProgress) creation_timed_out(st, call, at);
    if (ready != ncclSuccess) st.nccl_fail(ready, call, nullptr, at);
    int n = 0, r = -1;
    st.nccl_check(ncclCommCount(comm, &n), "ncclCommCount");
    st.nccl_check(ncclCommUserRank(comm, &r), "ncclCommUserRank");
    if (n != st.size || r != st.rank) {
      std::string msg = "strata::comm: " + std::string(call) + " on " + st.where() + " produced rank " +
                        std::to_string(r) + " of " + std::to_string(n);
      st.abort_comm(msg);
      throw comm_error(msg);
    }
  }

  nccl_communicator split_unchecked(int color, int key, std::string name, const std::source_location& at) {
    auto& st = usable("split", at);
    detail::device_scope on(st.device, st.name);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    // Non-blocking split runs as a job attached to the parent that writes the
    // child handle when done, so the handle lives on the heap: if the wait
    // below fails, the slot is leaked rather than left for a late write.
    auto slot = std::make_unique<ncclComm_t>(nullptr);
    const ncclResult_t r = ncclCommSplit(st.comm, color, key, slot.get(), &cfg);
    const std::string call = "ncclCommSplit(color " + std::to_string(color) + ", key " + std::to_string(key) +
                             ") -> '" + name + "'";
    try {
      st.nccl_check(r, call.c_str(), nullptr, at);
    } catch (...) {
      (void)slot.release();
      throw;
    }
    ncclComm_t child = *slot;
    if (child == nullptr) {
      // Seen with NCCL 2.28 on an H100: a non-blocking split returns before its job
      // has written the child handle; the job belongs to the parent, so wait there.
      const ncclResult_t parent =
          detail::nccl_state::poll_ready(st.comm, std::chrono::steady_clock::now() + st.timeout);
      if (parent == ncclInProgress) {
        (void)slot.release();  // the job may still write it
        creation_timed_out(st, call.c_str(), at);
      }
      if (parent != ncclSuccess) {
        (void)slot.release();
        st.nccl_fail(parent, call.c_str(), nullptr, at);
      }
      child = *slot;
    }
    if (child == nullptr) {
      (void)slot.release();
      std::string msg = "strata::comm: " + call + " at " + detail::nccl_site(at) + " on " + st.where() +
                        " returned no communicator";
      throw comm_error(msg);
    }
    nccl_communicator c;
    c.s_ = std::make_unique<detail::nccl_state>();
    auto& cs = *c.s_;
    cs.comm = child;
    cs.name = std::move(name);
    cs.device = st.device;
    cs.timeout = st.timeout;
    cs.owned_stream = st.owned_stream;
    cs.stream = st.stream;
    int n = 0, rk = -1;
    // Size and rank are only known once the child is ready.
    const ncclResult_t ready =
        detail::nccl_state::poll_ready(child, std::chrono::steady_clock::now() + cs.timeout);
    if (ready == ncclSuccess && ncclCommCount(child, &n) == ncclSuccess &&
        ncclCommUserRank(child, &rk) == ncclSuccess) {
      cs.size = n;
      cs.rank = rk;
    }
    wait_new_comm(cs, child, call.c_str(), at);
    return c;
  }

  // Scratch for barrier/agree/group_of: one rank word + a length word and a
  // message, on the device and pinned on the host (async copies must not
  // touch pageable memory that a timeout could leave in flight).
  static void ensure_scratch(detail::nccl_state& st, const std::source_location& at) {
    const std::size_t bytes = (2 + max_agree_message / sizeof(std::int32_t)) * sizeof(std::int32_t);
    if (st.dev_scratch == nullptr)
      st.cuda_check(cudaMalloc(reinterpret_cast<void**>(&st.dev_scratch), bytes), "cudaMalloc", nullptr, at);
    if (st.host_scratch == nullptr)
      st.cuda_check(cudaMallocHost(reinterpret_cast<void**>(&st.host_scratch), bytes), "cudaMallocHost",
                    nullptr, at);
  }

  // Host copy of every member's `value` (rank order); host-synchronous.
  std::vector<std::int32_t> gather_rank(std::int32_t value, const std::source_location& at) {
    auto& st = usable("group_of", at);
    detail::device_scope on(st.device, st.name);
    ensure_scratch(st, at);
    const auto n = static_cast<std::size_t>(st.size);
    std::int32_t* d = nullptr;
    st.cuda_check(cudaMallocAsync(reinterpret_cast<void**>(&d), (n + 1) * sizeof(std::int32_t), st.stream),
                  "cudaMallocAsync", nullptr, at);
    struct free_on_exit {
      std::int32_t* p;
      cudaStream_t s;
      ~free_on_exit() { (void)cudaFreeAsync(p, s); }
    } guard{d, st.stream};
    st.host_scratch[0] = value;
    auto o = st.begin(detail::nccl_op_kind::gather_ranks, at);
    o.type = dtype::i32;
    o.count = 1;
    st.cuda_check(cudaMemcpyAsync(d, st.host_scratch, sizeof(std::int32_t), cudaMemcpyHostToDevice, st.stream),
                  "cudaMemcpyAsync", &o);
    st.nccl_check(ncclAllGather(d, d + 1, 1, ncclInt32, st.comm, st.stream), "ncclAllGather", &o);
    st.commit(o);
    st.synchronize(at);
    std::vector<std::int32_t> out(n);
    // Everything before it has completed, so this pageable copy cannot hang.
    st.cuda_check(cudaMemcpyAsync(out.data(), d + 1, n * sizeof(std::int32_t), cudaMemcpyDeviceToHost,
                                  st.stream),
                  "cudaMemcpyAsync", &o);
    return out;
  }

  // A stream-ordered private copy of a send buffer, freed (stream-ordered)
  // when the scope ends, i.e. after the NCCL op that reads it was enqueued.
  class staging {
   public:
    explicit staging(detail::nccl_state& st) : st_(st) {}
    staging(const staging&) = delete;
    staging& operator=(const staging&) = delete;
    ~staging() {
      if (p_ != nullptr) (void)cudaFreeAsync(p_, st_.stream);
    }
    const void* copy(const void* src, std::size_t bytes, const detail::nccl_op_info& o) {
      st_.cuda_check(cudaMallocAsync(&p_, bytes, st_.stream), "cudaMallocAsync", &o);
      st_.cuda_check(cudaMemcpyAsync(p_, src, bytes, cudaMemcpyDeviceToDevice, st_.stream), "cudaMemcpyAsync",
                     &o);
      return p_;
    }

   private:
    detail::nccl_state& st_;
    void* p_ = nullptr;
  };

  void run_group(detail::nccl_state& st, std::span<const p2p_op> ops, detail::nccl_op_info& o,
                 const std::source_location& at) {
    detail::device_scope on(st.device, st.name);
    std::size_t active = 0;
    for (const auto& op : ops) {
      check_tag(st, op.tag, at);
      if (op.peer == no_peer) continue;
      check_rank(st, op.peer, op.what == p2p_op::kind::send ? "send peer" : "recv peer", at);
      check_buf(st, op.data, op.count * dtype_size(op.type), op.what == p2p_op::kind::send ? "send" : "recv",
                at);
      ++active;
    }
    if (active == 0) return;  // MPI_PROC_NULL semantics: nothing to do
    st.stamp(o);
    st.nccl_check(ncclGroupStart(), "ncclGroupStart", &o);
    ncclResult_t r = ncclSuccess;
    const char* failed = nullptr;
    for (const auto& op : ops) {
      if (op.peer == no_peer) continue;
      const ncclDataType_t t = detail::nccl_type(op.type);
      if (op.what == p2p_op::kind::send) {
        if ((r = ncclSend(op.data, op.count, t, op.peer, st.comm, st.stream)) != ncclSuccess) failed = "ncclSend";
      } else if ((r = ncclRecv(op.data, op.count, t, op.peer, st.comm, st.stream)) != ncclSuccess) {
        failed = "ncclRecv";
      }
      if (failed != nullptr) break;
    }
    end_group(st, r, failed, o);
    st.commit(o);
  }

  // Closes a group even when a call inside failed (NCCL's group depth is per
  // thread and would otherwise stay open), then reports the first failure.
  static void end_group(detail::nccl_state& st, ncclResult_t r, const char* failed,
                        const detail::nccl_op_info& o) {
    const ncclResult_t end = ncclGroupEnd();
    if (failed != nullptr) st.nccl_fail(r, failed, &o, std::source_location::current());
    st.nccl_check(end, "ncclGroupEnd", &o);
  }

  static void check_rank(const detail::nccl_state& st, int r, const char* what, const std::source_location& at) {
    if (r < 0 || r >= st.size)
      throw comm_error(std::string("strata::comm: ") + what + " " + std::to_string(r) + " at " +
                       detail::nccl_site(at) + " is not a rank of " + st.where());
  }

  static void check_tag(const detail::nccl_state& st, int tag, const std::source_location& at) {
    if (tag < 0 || tag > 32767)
      throw comm_error("strata::comm: tag " + std::to_string(tag) + " at " + detail::nccl_site(at) + " on " +
                       st.where() + " is outside [0, 32767]");
  }

  // Rejects null and host-only buffers up front: NCCL would fault on the
  // device instead, which kills the CUDA context with no useful message.
  static void check_buf(const detail::nccl_state& st, const void* p, std::size_t bytes, const char* what,
                        const std::source_location& at) {
    if (bytes == 0) return;
    auto fail = [&](const std::string& why) {
      throw comm_error(std::string("strata::comm: ") + what + " at " + detail::nccl_site(at) + " on " + st.where() +
                       ": " + why);
    };
    if (p == nullptr) fail("null buffer with " + std::to_string(bytes) + " bytes");
    cudaPointerAttributes a{};
    if (const cudaError_t e = cudaPointerGetAttributes(&a, p); e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("cudaPointerGetAttributes failed: " + detail::cuda_error_text(e));
    }
    if (a.type == cudaMemoryTypeUnregistered)
      fail("the buffer is plain host memory; NCCL needs device memory (cudaMalloc)");
    if (a.type == cudaMemoryTypeDevice && a.device != st.device)
      fail("the buffer lives on CUDA device " + std::to_string(a.device));
  }

  template <class I>
  static std::string list(std::span<const I> r) {
    std::string s = "[";
    for (std::size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
    return s + "]";
  }
};

static_assert(Communicator<nccl_communicator>);

}  // namespace strata::comm
