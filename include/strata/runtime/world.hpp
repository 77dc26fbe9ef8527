#pragma once
// The process's view of the job: its communicator (MPI under a launcher, or a world of
// one without MPI) and the backend queue work runs on.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "strata/backend/host/host.hpp"
#include "strata/comm/communicator.hpp"

#if !defined(STRATA_NO_MPI) && __has_include(<mpi.h>)
#include "strata/comm/mpi.hpp"
#define STRATA_RUNTIME_MPI 1
#endif

namespace strata {

using backend::Host;

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

#ifdef STRATA_RUNTIME_MPI
// Under mpirun/srun (or as an MPI singleton): one process per device.
template <class Backend>
world<Backend, comm::mpi_communicator> init(int& argc, char**& argv) {
  auto env = std::make_shared<comm::mpi_environment>(&argc, &argv);
  comm::mpi_communicator* c = &env->world();
  world<Backend, comm::mpi_communicator> w(std::move(env), c);
  if constexpr (requires { w.queue().set_threads(1u); }) {
    // Ranks on one node share its cores: each takes its share of the CPUs it may
    // run on (backend::host::cpu_share), for strata's pool and the BLAS together.
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(c->native(), MPI_COMM_TYPE_SHARED, c->rank(), MPI_INFO_NULL, &node) == MPI_SUCCESS) {
      int local = 1;
      MPI_Comm_size(node, &local);
      const std::vector<int> mine = backend::host::allowed_cpus();
      int count = static_cast<int>(mine.size()), most = 0;
      MPI_Allreduce(&count, &most, 1, MPI_INT, MPI_MAX, node);
      std::vector<int> padded(mine);
      padded.resize(static_cast<std::size_t>(most), -1);
      std::vector<int> all(static_cast<std::size_t>(most) * static_cast<std::size_t>(local));
      MPI_Allgather(padded.data(), most, MPI_INT, all.data(), most, MPI_INT, node);
      MPI_Comm_free(&node);
      std::vector<std::vector<int>> masks(static_cast<std::size_t>(local));
      for (std::size_t r = 0; r < masks.size(); ++r)
        for (int k = 0; k < most; ++k)
          if (const int cpu = all[r * static_cast<std::size_t>(most) + static_cast<std::size_t>(k)]; cpu >= 0)
            masks[r].push_back(cpu);
      if (std::getenv("STRATA_HOST_THREADS") == nullptr)
        w.queue().set_threads(backend::host::cpu_share(mine, masks));
    }
  }
  return w;
}
#else
// Built without MPI: a world of one process.
template <class Backend>
world<Backend, comm::self_communicator> init(int&, char**&) {
  auto self = std::make_shared<comm::self_communicator>("world");
  comm::self_communicator* c = self.get();
  return world<Backend, comm::self_communicator>(std::move(self), c);
}
#endif

// A world of one process, whatever the build (tests and single-device references).
template <class Backend>
world<Backend, comm::self_communicator> local_world() {
  auto self = std::make_shared<comm::self_communicator>("world");
  comm::self_communicator* c = self.get();
  return world<Backend, comm::self_communicator>(std::move(self), c);
}

}  // namespace strata
