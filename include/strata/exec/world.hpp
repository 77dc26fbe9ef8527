#pragma once
// The process's view of the job: its communicator, the backend queue its work runs on,
// and how to end the whole job when one rank fails alone. Generic: runtime/host.hpp and
// runtime/cuda_world.hpp make worlds for a backend and a communicator.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "strata/core/agreed_error.hpp"

namespace strata {

// Ends every rank of the job after printing "[strata] rank R: message" (MPI_Abort); set
// by the launchers' worlds. Null for a world of one process: nothing can wait on it.
using job_abort_fn = void (*)(std::string_view message) noexcept;

template <class Backend, class Comm>
class world {
 public:
  using backend_type = Backend;
  using comm_type = Comm;

  world(std::shared_ptr<void> keep_alive, Comm* comm, job_abort_fn abort_job = nullptr)
      : keep_alive_(std::move(keep_alive)), comm_(comm), abort_(abort_job) {}
  world(world&& o) noexcept
      : keep_alive_(std::move(o.keep_alive_)), comm_(o.comm_), abort_(std::exchange(o.abort_, nullptr)),
        unwinding_at_birth_(o.unwinding_at_birth_), queue_(std::move(o.queue_)) {}
  world& operator=(world&&) = delete;
  // Leaving the world's scope while an exception unwinds: if the exception came from
  // one rank alone, the others wait in a collective for ever and MPI_Finalize would wait
  // for them. End the job instead.
  ~world() {
    if (abort_ && std::uncaught_exceptions() > unwinding_at_birth_)
      abort_("an exception is unwinding past strata's world (not caught in main): ending every rank");
  }

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  Comm& comm() { return *comm_; }
  typename Backend::queue& queue() { return queue_; }
  bool can_abort() const { return abort_ != nullptr; }
  job_abort_fn abort_fn() const { return abort_; }

  // Ends every rank now (a rank that found a problem on its own), or, in a world of one
  // process, prints the message and exits with 1.
  [[noreturn]] void abort(std::string_view message) const noexcept {
    if (abort_) abort_(message);
    std::fprintf(stderr, "[strata] rank %d: %.*s\n", comm_->rank(), static_cast<int>(message.size()),
                 message.data());
    std::fflush(stderr);
    std::_Exit(1);
  }

  // For main's catch. An agreed_error (every rank threw the same: the job ends normally)
  // is printed once, by rank 0, as "[strata] all N ranks: what", and main returns 1 on
  // every rank; any other error ends every rank, naming this one.
  //   catch (const std::exception& e) { return world.fail(e); }
  int fail(const std::exception& e) const noexcept {
    if (dynamic_cast<const agreed_error*>(&e) == nullptr && abort_) abort(e.what());
    if (comm_->rank() == 0) {
      if (comm_->size() > 1) std::fprintf(stderr, "[strata] all %d ranks: %s\n", comm_->size(), e.what());
      else std::fprintf(stderr, "[strata] %s\n", e.what());
      std::fflush(stderr);
    }
    return 1;
  }

 private:
  std::shared_ptr<void> keep_alive_;  // MPI environment (or the self communicator)
  Comm* comm_;
  job_abort_fn abort_ = nullptr;
  int unwinding_at_birth_ = std::uncaught_exceptions();
  typename Backend::queue queue_{};
};

// The one-device world of a backend, for references (runtime/host.hpp, cuda_world.hpp).
template <class Backend>
struct one_device_world;

}  // namespace strata
