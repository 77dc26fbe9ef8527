// strata-header: mpi
#pragma once
// The MPI communicator's collectives: barrier, agree and the five data collectives.
// Each posts the non-blocking form of its MPI call and waits through the watchdog
// (the blocking call when the watchdog is off); errors keep the name of the blocking
// call the operation stands for (MPI_Allreduce for MPI_Iallreduce + test), which is
// what it means to the caller. Aliasing other than MPI's (and NCCL's) in-place forms
// goes through a private copy.
#include "strata/comm/agree.hpp"
#include "strata/comm/mpi/handle.hpp"
#include "strata/comm/mpi/types.hpp"  // <mpi.h> without the C++ bindings
#include "strata/core/communicator.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::comm::detail {

class mpi_collectives : public mpi_handle {
 public:
  void barrier() {
    const auto op = begin(kind::barrier);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &req), "MPI_Barrier");
    check(wait(1, &req, nullptr, op), "MPI_Barrier");
  }
  void synchronize() {}  // every operation here has completed when it returns

  void agree(bool ok, std::string_view message) {
    struct {
      int value;
      int rank;
    } in{ok ? 1 : 0, rank_}, out{1, 0};
    auto op = begin(kind::agree);
    MPI_Request req = MPI_REQUEST_NULL;
    // MINLOC: whether anyone failed and the lowest failing rank, in one call.
    check(MPI_Iallreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm_, &req), "MPI_Allreduce", "agree");
    check(wait(1, &req, nullptr, op), "MPI_Allreduce", "agree");
    if (out.value == 1) return;
    // Ship the failing rank's text so every rank throws the identical error.
    op.peer = out.rank;
    std::string text = out.rank == rank_ ? std::string(message.substr(0, max_agree_message)) : std::string();
    int len = static_cast<int>(text.size());
    check(MPI_Ibcast(&len, 1, MPI_INT, out.rank, comm_, &req), "MPI_Bcast", "agree");
    check(wait(1, &req, nullptr, op), "MPI_Bcast", "agree");
    text.resize(static_cast<std::size_t>(len));
    check(MPI_Ibcast(text.data(), len, MPI_CHAR, out.rank, comm_, &req), "MPI_Bcast", "agree");
    check(wait(1, &req, nullptr, op), "MPI_Bcast", "agree");
    throw agreed_failure(out.rank, name_, size_, text);
  }

  template <comm_scalar T>
  void all_reduce(T* buf, std::size_t count, reduce_op op) {
    const int n = count_arg(count, "MPI_Allreduce");
    require_buf(buf, count, "MPI_Allreduce");
    const MPI_Op mop = reduction<T>(op, "MPI_Allreduce");
    const auto info = begin(kind::all_reduce, dtype_of<T>, count, op);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = mpi_type<T>();
    check(bounded() ? MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, mop, comm_, &req)
                    : MPI_Allreduce(MPI_IN_PLACE, buf, n, t, mop, comm_),
          "MPI_Allreduce");
    check(wait(1, &req, nullptr, info), "MPI_Allreduce");
  }

  template <comm_scalar T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op op) {
    const int n = count_arg(recv_count, "MPI_Reduce_scatter_block");
    const std::size_t total = recv_count * static_cast<std::size_t>(size_);
    require_buf(send, total, "MPI_Reduce_scatter_block");
    require_buf(recv, recv_count, "MPI_Reduce_scatter_block");
    // MPI in-place (recv == send): reads all of recv, result in its first block. Other
    // overlaps (e.g. NCCL's in-place recv == send + rank*count) go through a copy.
    std::vector<T> copy;
    const void* s = send_buffer(send, total, recv, recv_count, recv == send, copy);
    const MPI_Op mop = reduction<T>(op, "MPI_Reduce_scatter_block");
    const auto info = begin(kind::reduce_scatter, dtype_of<T>, recv_count, op);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = mpi_type<T>();
    check(bounded() ? MPI_Ireduce_scatter_block(s, recv, n, t, mop, comm_, &req)
                    : MPI_Reduce_scatter_block(s, recv, n, t, mop, comm_),
          "MPI_Reduce_scatter_block");
    check(wait(1, &req, nullptr, info), "MPI_Reduce_scatter_block");
  }

  template <comm_scalar T>
  void all_gather(const T* send, T* recv, std::size_t send_count) {
    const int n = count_arg(send_count, "MPI_Allgather");
    const std::size_t total = send_count * static_cast<std::size_t>(size_);
    require_buf(send, send_count, "MPI_Allgather");
    require_buf(recv, total, "MPI_Allgather");
    // In place when the caller's block already is (the NCCL in-place form).
    std::vector<T> copy;
    const void* s =
        send_buffer(send, send_count, recv, total, send == recv + static_cast<std::size_t>(rank_) * send_count, copy);
    const auto info = begin(kind::all_gather, dtype_of<T>, send_count);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = mpi_type<T>();
    check(bounded() ? MPI_Iallgather(s, n, t, recv, n, t, comm_, &req) : MPI_Allgather(s, n, t, recv, n, t, comm_),
          "MPI_Allgather");
    check(wait(1, &req, nullptr, info), "MPI_Allgather");
  }

  template <comm_scalar T>
  void broadcast(T* buf, std::size_t count, int root) {
    const int n = count_arg(count, "MPI_Bcast");
    require_buf(buf, count, "MPI_Bcast");
    auto info = begin(kind::broadcast, dtype_of<T>, count);
    info.peer = root;
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = mpi_type<T>();
    check(bounded() ? MPI_Ibcast(buf, n, t, root, comm_, &req) : MPI_Bcast(buf, n, t, root, comm_), "MPI_Bcast",
          "root " + std::to_string(root));
    check(wait(1, &req, nullptr, info), "MPI_Bcast", "root " + std::to_string(root));
  }

  template <comm_scalar T>
  void all_to_all(const T* send, T* recv, std::size_t count_per_peer) {
    const int n = count_arg(count_per_peer, "MPI_Alltoall");
    const std::size_t total = count_per_peer * static_cast<std::size_t>(size_);
    require_buf(send, total, "MPI_Alltoall");
    require_buf(recv, total, "MPI_Alltoall");
    std::vector<T> copy;
    const void* s = send_buffer(send, total, recv, total, recv == send, copy);
    const auto info = begin(kind::all_to_all, dtype_of<T>, count_per_peer);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = mpi_type<T>();
    check(bounded() ? MPI_Ialltoall(s, n, t, recv, n, t, comm_, &req) : MPI_Alltoall(s, n, t, recv, n, t, comm_),
          "MPI_Alltoall");
    check(wait(1, &req, nullptr, info), "MPI_Alltoall");
  }

 protected:
  using mpi_handle::mpi_handle;

 private:
  // The send argument of a collective that reads send[0..send_n) and writes recv[0..recv_n):
  // MPI_IN_PLACE for MPI's in-place form, a private copy where the buffers overlap
  // otherwise (MPI forbids that aliasing), else send itself.
  template <class T>
  static const void* send_buffer(const T* send, std::size_t send_n, const T* recv, std::size_t recv_n,
                                 bool in_place, std::vector<T>& copy) {
    if (in_place) return MPI_IN_PLACE;
    if (!overlaps<T>(send, send_n, recv, recv_n)) return send;
    copy.assign(send, send + send_n);
    return copy.data();
  }

  // The MPI_Op for `op` on elements of type T: predefined, or for bf16 and f16 the
  // user-defined op (created on the first 16-bit reduction).
  template <comm_scalar T>
  MPI_Op reduction(reduce_op op, const char* call) const {
    if constexpr (std::same_as<T, bf16> || std::same_as<T, f16>) {
      const char* failed = "MPI_Op_create";
      check(half_mpi_ops_init(failed), failed, std::string(call) + ": creating the bf16/f16 reduction ops");
      return half_mpi_op<T>(op);
    } else {
      return mpi_op(op);
    }
  }
};

}  // namespace strata::comm::detail
