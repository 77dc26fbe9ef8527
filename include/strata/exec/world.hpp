#pragma once
// The process's view of the job: its communicator and the backend queue its work runs
// on. Generic: runtime/host.hpp and runtime/cuda_world.hpp make worlds for a backend
// and a communicator.
#include <memory>
#include <utility>

namespace strata {

template <class Backend, class Comm>
class world {
 public:
  using backend_type = Backend;
  using comm_type = Comm;

  world(std::shared_ptr<void> keep_alive, Comm* comm) : keep_alive_(std::move(keep_alive)), comm_(comm) {}
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  Comm& comm() { return *comm_; }
  typename Backend::queue& queue() { return queue_; }

 private:
  std::shared_ptr<void> keep_alive_;  // MPI environment (or the self communicator)
  Comm* comm_;
  typename Backend::queue queue_{};
};

}  // namespace strata
