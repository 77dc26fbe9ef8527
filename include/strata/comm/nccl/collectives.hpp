// strata-header: cuda-only nccl
#pragma once
// The NCCL communicator's collectives: barrier and agree (host-synchronous: they
// wait, under the watchdog, for everything issued before them) and the five data
// collectives, which return once enqueued on the communicator's stream. Aliasing
// other than NCCL's in-place forms goes through a stream-ordered copy.
#include <cuda_runtime.h>
#include <nccl.h>

#include "strata/comm/agree.hpp"
#include "strata/comm/nccl/handle.hpp"
#include "strata/comm/nccl/types.hpp"
#include "strata/comm/nccl/watchdog.hpp"
#include "strata/core/communicator.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace strata::comm::detail {

class nccl_collectives : public nccl_handle {
 public:
  // Longest agree() message shipped to the other ranks.
  static constexpr std::size_t max_agree_message = detail::max_agree_message;

  // NCCL has no barrier: a one-word all-reduce, then synchronize().
  void barrier(std::source_location at = std::source_location::current()) {
    auto& st = usable("barrier", at);
    device_scope on(st.device, st.name);
    ensure_scratch(st, at);
    auto o = st.begin(nccl_op_kind::barrier, at);
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
    device_scope on(st.device, st.name);
    ensure_scratch(st, at);
    std::int32_t* h = st.host_scratch;
    std::int32_t* d = st.dev_scratch;
    h[0] = ok ? INT32_MAX : st.rank;
    auto o = st.begin(nccl_op_kind::agree, at);
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
    auto o2 = st.begin(nccl_op_kind::agree_message, at);
    st.cuda_check(cudaMemcpyAsync(d, h, words * sizeof(std::int32_t), cudaMemcpyHostToDevice, st.stream),
                  "cudaMemcpyAsync", &o2);
    st.nccl_check(ncclBroadcast(d, d, words, ncclInt32, failing, st.comm, st.stream), "ncclBroadcast", &o2);
    st.cuda_check(cudaMemcpyAsync(h, d, words * sizeof(std::int32_t), cudaMemcpyDeviceToHost, st.stream),
                  "cudaMemcpyAsync", &o2);
    st.commit(o2);
    st.synchronize(at);
    const auto len = static_cast<std::size_t>(
        std::clamp<std::int32_t>(h[0], 0, static_cast<std::int32_t>(max_agree_message)));
    throw agreed_failure(failing, st.name, st.size, std::string_view(reinterpret_cast<const char*>(h + 1), len));
  }

  template <comm_scalar T>
  void all_reduce(T* buf, std::size_t count, reduce_op op,
                  std::source_location at = std::source_location::current()) {
    auto& st = usable("all_reduce", at);
    device_scope on(st.device, st.name);
    check_buf(st, buf, count * sizeof(T), "all_reduce", at);
    auto o = st.begin(nccl_op_kind::all_reduce, at);
    o.type = dtype_of<T>;
    o.count = count;
    o.op = op;
    st.nccl_check(ncclAllReduce(buf, buf, count, nccl_type(dtype_of<T>), nccl_op(op),
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
    device_scope on(st.device, st.name);
    const std::size_t total = recv_count * static_cast<std::size_t>(st.size);
    check_buf(st, send, total * sizeof(T), "reduce_scatter (send)", at);
    check_buf(st, recv, recv_count * sizeof(T), "reduce_scatter (recv)", at);
    auto o = st.begin(nccl_op_kind::reduce_scatter, at);
    o.type = dtype_of<T>;
    o.count = recv_count;
    o.op = op;
    staging tmp(st);
    const bool nccl_in_place = recv == send + static_cast<std::size_t>(st.rank) * recv_count;
    if (!nccl_in_place && overlaps<T>(send, total, recv, recv_count))
      send = static_cast<const T*>(tmp.copy(send, total * sizeof(T), o));
    st.nccl_check(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype_of<T>),
                                    nccl_op(op), st.comm, st.stream),
                  "ncclReduceScatter", &o);
    st.commit(o);
  }

  // In place when send == recv + rank*send_count; other overlaps are staged.
  template <comm_scalar T>
  void all_gather(const T* send, T* recv, std::size_t send_count,
                  std::source_location at = std::source_location::current()) {
    auto& st = usable("all_gather", at);
    device_scope on(st.device, st.name);
    const std::size_t total = send_count * static_cast<std::size_t>(st.size);
    check_buf(st, send, send_count * sizeof(T), "all_gather (send)", at);
    check_buf(st, recv, total * sizeof(T), "all_gather (recv)", at);
    auto o = st.begin(nccl_op_kind::all_gather, at);
    o.type = dtype_of<T>;
    o.count = send_count;
    staging tmp(st);
    const bool nccl_in_place = send == recv + static_cast<std::size_t>(st.rank) * send_count;
    if (!nccl_in_place && overlaps<T>(send, send_count, recv, total))
      send = static_cast<const T*>(tmp.copy(send, send_count * sizeof(T), o));
    st.nccl_check(ncclAllGather(send, recv, send_count, nccl_type(dtype_of<T>), st.comm, st.stream),
                  "ncclAllGather", &o);
    st.commit(o);
  }

  template <comm_scalar T>
  void broadcast(T* buf, std::size_t count, int root,
                 std::source_location at = std::source_location::current()) {
    auto& st = usable("broadcast", at);
    device_scope on(st.device, st.name);
    check_rank(st, root, "broadcast root", at);
    check_buf(st, buf, count * sizeof(T), "broadcast", at);
    auto o = st.begin(nccl_op_kind::broadcast, at);
    o.type = dtype_of<T>;
    o.count = count;
    o.peer = root;
    st.nccl_check(ncclBroadcast(buf, buf, count, nccl_type(dtype_of<T>), root, st.comm, st.stream),
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
    device_scope on(st.device, st.name);
    const std::size_t total = count_per_peer * static_cast<std::size_t>(st.size);
    check_buf(st, send, total * sizeof(T), "all_to_all (send)", at);
    check_buf(st, recv, total * sizeof(T), "all_to_all (recv)", at);
    auto o = st.begin(nccl_op_kind::all_to_all, at);
    o.type = dtype_of<T>;
    o.count = count_per_peer;
    staging tmp(st);
    if (overlaps<T>(send, total, recv, total))
      send = static_cast<const T*>(tmp.copy(send, total * sizeof(T), o));
    const ncclDataType_t t = nccl_type(dtype_of<T>);
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

 protected:
  nccl_collectives() = default;

  // Scratch for barrier/agree/group_of: one rank word + a length word and a
  // message, on the device and pinned on the host (async copies must not
  // touch pageable memory that a timeout could leave in flight).
  static void ensure_scratch(nccl_state& st, const std::source_location& at) {
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
    device_scope on(st.device, st.name);
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
    auto o = st.begin(nccl_op_kind::gather_ranks, at);
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

  // Closes a group even when a call inside failed (NCCL's group depth is per
  // thread and would otherwise stay open), then reports the first failure.
  static void end_group(nccl_state& st, ncclResult_t r, const char* failed,
                        const nccl_op_info& o) {
    const ncclResult_t end = ncclGroupEnd();
    if (failed != nullptr) st.nccl_fail(r, failed, &o, std::source_location::current());
    st.nccl_check(end, "ncclGroupEnd", &o);
  }

 private:
  // A stream-ordered private copy of a send buffer, freed (stream-ordered)
  // when the scope ends, i.e. after the NCCL op that reads it was enqueued.
  class staging {
   public:
    explicit staging(nccl_state& st) : st_(st) {}
    staging(const staging&) = delete;
    staging& operator=(const staging&) = delete;
    ~staging() {
      if (p_ != nullptr) (void)cudaFreeAsync(p_, st_.stream);
    }
    const void* copy(const void* src, std::size_t bytes, const nccl_op_info& o) {
      st_.cuda_check(cudaMallocAsync(&p_, bytes, st_.stream), "cudaMallocAsync", &o);
      st_.cuda_check(cudaMemcpyAsync(p_, src, bytes, cudaMemcpyDeviceToDevice, st_.stream), "cudaMemcpyAsync",
                     &o);
      return p_;
    }

   private:
    nccl_state& st_;
    void* p_ = nullptr;
  };
};

}  // namespace strata::comm::detail
