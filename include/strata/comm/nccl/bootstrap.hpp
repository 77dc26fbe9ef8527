// strata-header: cuda-only
// strata-header: mpi nccl
#pragma once
// Where NCCL communicators come from: world() (bootstrapped over MPI, when the build
// has it: STRATA_WITH_MPI), single() (a world of one, no MPI), and sub-communicators
// (split, group_of), each created non-blocking and waited for under the watchdog. The
// operations come from nccl_communicator's bases: comm/nccl/collectives.hpp,
// comm/nccl/p2p_group.hpp.
#include <cuda_runtime.h>
#include <nccl.h>

#include "strata/comm/agree.hpp"
#include "strata/comm/naming.hpp"
#include "strata/comm/nccl/p2p_group.hpp"
#include "strata/comm/nccl/types.hpp"
#include "strata/comm/nccl/watchdog.hpp"
#include "strata/comm/timeout.hpp"
#include "strata/core/communicator.hpp"
#if defined(STRATA_WITH_MPI)
#include "strata/comm/mpi.hpp"
#define STRATA_NCCL_WITH_MPI 1
#endif

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata::comm {

class nccl_communicator : public detail::nccl_p2p {
 public:
  // STRATA_NCCL_TIMEOUT_S (seconds, > 0) or 300 s.
  static std::chrono::milliseconds default_timeout() {
    return detail::timeout_from_env("STRATA_NCCL_TIMEOUT_S", /*zero_off=*/false, "a positive number of seconds");
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

  // Collective (ncclCommSplit). The child shares this communicator's stream
  // and timeout. Create sub-communicators once, in the same order on every rank.
  nccl_communicator split(int color, int key, std::string name = {},
                          std::source_location at = std::source_location::current()) {
    // agree first: a rank throwing alone would leave the rest inside the split.
    agree(color >= 0, "split: color must be >= 0, got " + std::to_string(color), at);
    auto& st = usable("split", at);
    return split_unchecked(color, key, detail::child_name(st.name, "split", color, std::move(name)), at);
  }

  nccl_communicator group_of(std::span<const int> ranks, std::string name = {},
                             std::source_location at = std::source_location::current()) {
    auto& st = usable("group_of", at);
    const detail::group_choice g = detail::choose_group(ranks, st.rank, st.size);
    agree(g.error.empty(), "group_of: " + g.error, at);
    nccl_communicator sub =
        split_unchecked(g.color, g.key, detail::child_name(st.name, "group", g.color, std::move(name)), at);
    const std::string wrong = detail::group_mismatch(st.rank, ranks, sub.gather_rank(st.rank, at));
    agree(wrong.empty(), wrong, at);
    return sub;
  }

 private:
  nccl_communicator() = default;

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
                      detail::nccl_site(at) + ") did not complete within " + detail::seconds_text(st.timeout) +
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
};

static_assert(Communicator<nccl_communicator>);

}  // namespace strata::comm
