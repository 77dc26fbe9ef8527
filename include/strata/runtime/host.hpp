#pragma once
// The world on CPUs: strata::init<Host>(argc, argv) and local_world<Host>().
// With MPI (STRATA_WITH_MPI defined: CMake's strata::mpi target sets it), init<Host>
// initialises MPI and returns the launcher's world, one process per simulated device;
// without it, a world of one process, which refuses to run if a launcher started more.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/backend/host/backend.hpp"
#include "strata/comm/self.hpp"
#include "strata/exec/world.hpp"

#if defined(STRATA_WITH_MPI)
#include "strata/comm/mpi.hpp"
#endif

namespace strata {

using backend::Host;

namespace detail {
// Processes a launcher says it started (Open MPI, MPICH/PMI, Slurm), or 0 if none.
inline int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}
}  // namespace detail

#if defined(STRATA_WITH_MPI)
// Under mpirun/srun (or as an MPI singleton): one process per device.
template <class Backend>
world<Backend, comm::mpi_communicator> init(int& argc, char**& argv) {
  std::shared_ptr<comm::mpi_environment> env;
  try {
    env = std::make_shared<comm::mpi_environment>(&argc, &argv);
  } catch (const comm::comm_error& e) {  // a bad setting, on every rank alike
    comm::exit_before_world(e.what());
  }
  comm::mpi_communicator* c = &env->world();
  // One rank failing alone ends the job (comm::fail_all), never leaves the others waiting.
  comm::end_job_on_terminate();
  world<Backend, comm::mpi_communicator> w(std::move(env), c, c->size() > 1 ? &comm::fail_all : nullptr);
  if constexpr (requires { w.queue().set_threads(1u); }) {
    // Ranks on one node share its cores: each takes its share of the CPUs it may
    // run on (backend::host::cpu_share), for strata's pool and the BLAS together.
    // (a bounded barrier first: MPI_Comm_split_type has no non-blocking form, and the
    // node communicator's own collectives go through the watchdog)
    c->agree(true, "");
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(c->native(), MPI_COMM_TYPE_SHARED, c->rank(), MPI_INFO_NULL, &node) == MPI_SUCCESS) {
      comm::mpi_communicator nodec = comm::mpi_communicator::adopt(node, "node");
      const int local = nodec.size();
      const std::vector<int> mine = backend::host::allowed_cpus();
      std::int32_t most = static_cast<std::int32_t>(mine.size());
      nodec.all_reduce(&most, 1, comm::reduce_op::max);
      std::vector<std::int32_t> padded(mine.begin(), mine.end());
      padded.resize(static_cast<std::size_t>(most), -1);
      std::vector<std::int32_t> all(static_cast<std::size_t>(most) * static_cast<std::size_t>(local));
      nodec.all_gather(padded.data(), all.data(), static_cast<std::size_t>(most));
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
// Built without MPI: a world of one process. Launched as several processes, every one
// of them would train alone on its own: refuse, saying why.
template <class Backend>
world<Backend, comm::self_communicator> init(int&, char**&) {
  if (const int n = detail::launcher_world_size(); n > 1)
    throw std::runtime_error("strata: launched as " + std::to_string(n) +
                             " processes, but this program was built without MPI: each would train alone. "
                             "Build with MPI (CMake: link strata::mpi; by hand: -DSTRATA_WITH_MPI and mpicxx)");
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

template <>
struct one_device_world<backend::Host> {
  static auto make() { return local_world<backend::Host>(); }
};


}  // namespace strata
