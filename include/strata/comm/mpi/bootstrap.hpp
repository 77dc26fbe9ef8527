// strata-header: mpi
#pragma once
// Where MPI communicators come from: mpi_environment (MPI's lifetime for a program),
// mpi_communicator's private duplicate of MPI_COMM_WORLD, views of existing
// communicators (borrow, adopt), and sub-communicators (split, group_of). The
// operations come from its bases: comm/mpi/collectives.hpp, comm/mpi/p2p_group.hpp.
#include "strata/comm/agree.hpp"
#include "strata/comm/mpi/p2p_group.hpp"
#include "strata/comm/mpi/types.hpp"  // <mpi.h> without the C++ bindings
#include "strata/comm/mpi/verdict.hpp"
#include "strata/comm/mpi/watchdog.hpp"
#include "strata/comm/naming.hpp"
#include "strata/core/communicator.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata::comm {

class mpi_communicator : public detail::mpi_p2p {
 public:
  // Non-owning view of an existing communicator (sets MPI_ERRORS_RETURN on it).
  // The watchdog's timeout is STRATA_MPI_TIMEOUT_S's (see set_timeout).
  static mpi_communicator borrow(MPI_Comm comm, std::string name) {
    return mpi_communicator(comm, std::move(name), /*owned=*/false, detail::mpi_timeout_from_env());
  }
  // Takes ownership: freed with MPI_Comm_free on destruction (also when this throws).
  static mpi_communicator adopt(MPI_Comm comm, std::string name) {
    std::chrono::milliseconds t{};
    try {
      t = detail::mpi_timeout_from_env();
    } catch (...) {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
      throw;
    }
    return mpi_communicator(comm, std::move(name), /*owned=*/true, t);
  }
  // Private duplicate of MPI_COMM_WORLD (collective), so strata's traffic
  // and error handler never mix with other users of MPI_COMM_WORLD. A rank
  // that never gets here ends the job after the timeout, like any operation.
  static mpi_communicator world(std::string name = "world") {
    const std::chrono::milliseconds t = detail::mpi_timeout_from_env();
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req);
    bool expired = false;
    if (rc == MPI_SUCCESS) rc = detail::mpi_wait_bounded(1, &req, nullptr, t, expired);
    if (expired) {
      detail::mpi_op_info op;
      op.what = detail::mpi_op_info::kind::create_world;
      fail_all(detail::mpi_watchdog_message(op, MPI_COMM_WORLD, "MPI_COMM_WORLD (creating communicator '" + name + "')",
                                            t, 1, &req));
    }
    if (rc != MPI_SUCCESS)
      throw comm_error("strata::comm: MPI_Comm_dup of MPI_COMM_WORLD failed: " + detail::mpi_error_string(rc));
    return mpi_communicator(dup, std::move(name), /*owned=*/true, t);
  }

  mpi_communicator split(int color, int key, std::string name = {}) {
    // agree first: a rank throwing alone would leave the rest inside
    // MPI_Comm_split forever.
    agree(color >= 0, "split: color must be >= 0, got " + std::to_string(color));
    return split_unchecked(color, key, detail::child_name(name_, "split", color, std::move(name)));
  }

  mpi_communicator group_of(std::span<const int> ranks, std::string name = {}) {
    const detail::group_choice g = detail::choose_group(ranks, rank_, size_);
    agree(g.error.empty(), "group_of: " + g.error);
    mpi_communicator sub =
        split_unchecked(g.color, g.key, detail::child_name(name_, "group", g.color, std::move(name)));
    std::vector<std::int32_t> got(static_cast<std::size_t>(sub.size()));
    const std::int32_t me = rank_;
    sub.all_gather(&me, got.data(), 1);
    const std::string wrong = detail::group_mismatch(rank_, ranks, got);
    agree(wrong.empty(), wrong);
    return sub;
  }

 private:
  mpi_communicator(MPI_Comm comm, std::string name, bool owned, std::chrono::milliseconds timeout)
      : detail::mpi_p2p(comm, std::move(name), owned, timeout) {}

  // MPI has no non-blocking split; the agree every caller runs first (bounded)
  // has every rank at the split, so only a rank stopping in between is unguarded.
  mpi_communicator split_unchecked(int color, int key, std::string name) {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split",
          "color " + std::to_string(color) + ", key " + std::to_string(key));
    return mpi_communicator(out, std::move(name), /*owned=*/true, timeout_);
  }
};

static_assert(Communicator<mpi_communicator>);

// Owns MPI's lifetime for a program: initialises MPI (MPI_THREAD_FUNNELED:
// only the main thread talks to MPI) unless someone already did, and
// finalises it only if it initialised it. Works under mpiexec/mpirun/srun and
// as a singleton (plain ./prog, size 1).
class mpi_environment {
 public:
  mpi_environment() : mpi_environment(nullptr, nullptr) {}
  mpi_environment(int* argc, char*** argv) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) throw comm_error("strata::comm: MPI was already finalized; it cannot be re-initialised");
    if (!init) {
      const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided_);
      if (rc != MPI_SUCCESS)
        throw comm_error("strata::comm: MPI_Init_thread failed: " + detail::mpi_error_string(rc));
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided_);
    }
    // A setting refused here (STRATA_MPI_TIMEOUT_S) leaves MPI initialised: the caller
    // reports it and then finalises (comm::exit_before_world), so that no rank can end the
    // job before the reporting rank has printed.
    world_.emplace(mpi_communicator::world());
    // the watchdog's side channel, for its verdict (comm/mpi/verdict.hpp); the first
    // environment opens it
    if (detail::g_side.comm == MPI_COMM_NULL) {
      detail::mpi_open_side_channel(world_->timeout());
      opened_side_ = detail::g_side.comm != MPI_COMM_NULL;
    }
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    if (opened_side_) detail::mpi_close_side_channel();
    world_.reset();  // communicators must be freed before MPI_Finalize
    int fin = 0;
    MPI_Finalized(&fin);
    if (owns_mpi_ && !fin) MPI_Finalize();
  }

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  int thread_level() const { return provided_; }
  // A duplicate of MPI_COMM_WORLD named "world", freed before finalisation.
  mpi_communicator& world() { return *world_; }

 private:
  bool owns_mpi_ = false;
  bool opened_side_ = false;
  int provided_ = MPI_THREAD_SINGLE;
  std::optional<mpi_communicator> world_;
};

}  // namespace strata::comm
