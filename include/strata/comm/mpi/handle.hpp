// strata-header: mpi
#pragma once
// The base of mpi_communicator (comm/mpi/bootstrap.hpp): the MPI_Comm it owns or
// borrows, its name, rank, size and watchdog timeout, and what every operation does
// around its MPI call: number it for the watchdog, check the arguments MPI would take
// badly, turn a failed call into a comm_error naming the call, the communicator and
// the rank, and wait for the posted requests under the watchdog.
#include "strata/comm/mpi/end_job.hpp"
#include "strata/comm/mpi/types.hpp"  // <mpi.h> without the C++ bindings
#include "strata/comm/mpi/watchdog.hpp"
#include "strata/comm/naming.hpp"
#include "strata/comm/watchdog_verdict.hpp"
#include "strata/core/communicator.hpp"

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::comm::detail {

class mpi_handle {
 public:
  mpi_handle(const mpi_handle&) = delete;
  mpi_handle& operator=(const mpi_handle&) = delete;
  mpi_handle(mpi_handle&& o) noexcept
      : comm_(std::exchange(o.comm_, MPI_COMM_NULL)),
        owned_(std::exchange(o.owned_, false)),
        rank_(o.rank_),
        size_(o.size_),
        timeout_(o.timeout_),
        seq_(o.seq_),
        name_(std::move(o.name_)) {}
  mpi_handle& operator=(mpi_handle&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(o.owned_, false);
      rank_ = o.rank_;
      size_ = o.size_;
      timeout_ = o.timeout_;
      seq_ = o.seq_;
      name_ = std::move(o.name_);
    }
    return *this;
  }
  ~mpi_handle() { release(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string_view name() const { return name_; }
  MPI_Comm native() const { return comm_; }

  // The watchdog: an operation not complete this long after it was posted ends
  // the job (every rank) with a message naming it. 0: wait for ever. Split and
  // group_of children start with their parent's.
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) {
    if (t.count() < 0)
      throw comm_error("strata::comm: set_timeout on " + where() + ": the timeout must be >= 0 (0: none)");
    timeout_ = t;
  }
  // Operations issued so far on this communicator (the watchdog's "#N").
  std::uint64_t ops_issued() const noexcept { return seq_; }

 protected:
  using kind = mpi_op_info::kind;

  // Sets MPI_ERRORS_RETURN on `comm` and names it when owned. A throwing constructor
  // never runs the destructor, so an adopted comm is released here on failure.
  mpi_handle(MPI_Comm comm, std::string name, bool owned, std::chrono::milliseconds timeout)
      : comm_(comm), owned_(owned), timeout_(timeout), name_(std::move(name)) {
    int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm_, &rank_);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm_, &size_);
    if (rc == MPI_SUCCESS && owned_) rc = MPI_Comm_set_name(comm_, name_.substr(0, MPI_MAX_OBJECT_NAME - 1).c_str());
    if (rc != MPI_SUCCESS) {
      release();
      throw comm_error("strata::comm: setting up communicator '" + name_ +
                       "' failed: " + mpi_error_string(rc));
    }
  }

  // Numbers the operation about to be posted, for the watchdog's message.
  mpi_op_info begin(kind what, dtype type = dtype::i32, std::size_t count = 0,
                    reduce_op op = reduce_op::sum) noexcept {
    mpi_op_info o;
    o.what = what;
    o.seq = ++seq_;
    o.type = type;
    o.count = count;
    o.op = op;
    return o;
  }

  // With the watchdog off, the five data collectives make the blocking calls:
  // Open MPI runs non-blocking collectives with other algorithms (libnbc's),
  // faster for some sizes, slower for others (docs/execution.md).
  bool bounded() const noexcept { return timeout_.count() > 0; }

  // Completes the posted requests and returns MPI's code, or, when they are
  // not done within the timeout, ends every rank naming the operation: a
  // posted collective cannot be cancelled, and the peers are stuck too.
  // A single MPI_REQUEST_NULL: the blocking call already ran (!bounded()).
  // While it waits, a peer's watchdog may ask what for: `site` describes it then.
  int wait(int n, MPI_Request* reqs, MPI_Status* st, const mpi_op_info& op) const {
    if (n == 1 && *reqs == MPI_REQUEST_NULL) return MPI_SUCCESS;
    const waiting w{this, &op, n, reqs};
    wait_site site{&waiting::describe, &w};
    bool expired = false;
    const int rc = mpi_wait_bounded(n, reqs, st, timeout_, expired, &site);
    if (expired) [[unlikely]]
      watchdog_expired(w, site);
    return rc;
  }

  std::string where() const { return where_text(name_, rank_, size_); }

  void check(int rc, const char* call, std::string_view detail = {}) const {
    if (rc == MPI_SUCCESS) [[likely]]
      return;
    std::string msg = std::string("strata::comm: ") + call + " failed on " + where();
    if (!detail.empty()) msg += " [" + std::string(detail) + "]";
    throw comm_error(msg + ": " + mpi_error_string(rc));
  }

  // MPI counts are int; the backend rejects rather than chunks so that sender
  // and receiver can never disagree about how a message was split.
  int count_arg(std::size_t count, const char* call) const {
    if (count > static_cast<std::size_t>(INT_MAX))
      throw comm_error(std::string("strata::comm: ") + call + " on " + where() + ": count " +
                       std::to_string(count) +
                       " exceeds INT_MAX (2147483647), the MPI limit; split the buffer");
    return static_cast<int>(count);
  }

  void require_buf(const void* p, std::size_t count, const char* call) const {
    if (count > 0 && p == nullptr)
      throw comm_error(std::string("strata::comm: ") + call + " on " + where() +
                       ": null buffer with count " + std::to_string(count));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 0;
  std::chrono::milliseconds timeout_{300'000};
  std::uint64_t seq_ = 0;
  std::string name_;

 private:
  // An operation being waited for, as the watchdog and a peer's question name it.
  struct waiting {
    const mpi_handle* self;
    const mpi_op_info* op;
    int n;
    MPI_Request* reqs;
    static std::string describe(const void* p) {
      const waiting& w = *static_cast<const waiting*>(p);
      const std::vector<bool> pending =
          w.op->what == mpi_op_info::kind::group ? mpi_pending(w.n, w.reqs) : std::vector<bool>{};
      return mpi_describe(*w.op, w.self->comm_, pending) + " on " + w.self->where();
    }
  };

  // Names the operation, then (with the side channel, comm/mpi/verdict.hpp) asks every rank
  // where it stands and adds the verdict, and ends the job.
  [[noreturn]] void watchdog_expired(const waiting& w, const wait_site& site) const noexcept {
    std::string msg = "MPI watchdog: an operation timed out; ending every rank";
    try {
      msg = mpi_watchdog_message(*w.op, comm_, where(), timeout_, w.n, w.reqs);
      if (g_verdict && size_ > 1) msg = g_verdict(site, msg, timeout_);
    } catch (...) {  // out of memory: the short message still ends the job
    }
    fail_all(msg);
  }

  void release() noexcept {
    if (owned_ && comm_ != MPI_COMM_NULL) {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Comm_free(&comm_);  // after MPI_Finalize there is nothing to free
    }
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }
};

}  // namespace strata::comm::detail
