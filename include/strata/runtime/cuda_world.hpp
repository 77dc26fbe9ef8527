// strata-header: cuda-only
#pragma once
// The world on GPUs: NCCL for every collective, one process per GPU. Under a launcher
// rank 0 makes the ncclUniqueId and MPI broadcasts it; a world of one needs no MPI.
#include <memory>
#include <optional>
#include <utility>

#include "strata/backend/cuda/cuda.hpp"
#include "strata/backend/cuda/kernels.cuh"
#include "strata/comm/nccl.hpp"
#include "strata/exec/world.hpp"

namespace strata {

using backend::Cuda;

namespace detail {
struct cuda_world_state {
#ifdef STRATA_NCCL_WITH_MPI
  std::optional<comm::mpi_environment> mpi;
#endif
  std::optional<comm::nccl_communicator> nccl;
};
}  // namespace detail

// mpiexec -n N: one rank per GPU (device = local rank); plain ./prog: a world of one.
template <class Backend>
  requires std::same_as<Backend, backend::Cuda>
world<backend::Cuda, comm::nccl_communicator> init(int& argc, char**& argv) {
  auto st = std::make_shared<detail::cuda_world_state>();
#ifdef STRATA_NCCL_WITH_MPI
  try {
    st->mpi.emplace(&argc, &argv);
  } catch (const comm::comm_error& e) {  // a bad setting, on every rank alike
    comm::exit_before_world(e.what());
  }
  comm::end_job_on_terminate();
  const bool several = st->mpi->size() > 1;
  if (several) st->nccl.emplace(comm::nccl_communicator::world(st->mpi->world()));
  else st->nccl.emplace(comm::nccl_communicator::single());
  job_abort_fn abort_job = several ? &comm::fail_all : nullptr;  // MPI_Abort also ends NCCL's kernels
#else
  (void)argc;
  (void)argv;
  st->nccl.emplace(comm::nccl_communicator::single());  // built without MPI: one GPU
  job_abort_fn abort_job = nullptr;
#endif
  comm::nccl_communicator* c = &*st->nccl;
  world<backend::Cuda, comm::nccl_communicator> w(std::move(st), c, abort_job);
  // Collectives run on the compute queue's stream, in program order with the kernels
  // (sub-communicators split later inherit it); gradient buckets get their own stream.
  c->set_stream(w.queue().stream());
  return w;
}

// A world of one GPU whatever the launcher (tests and single-device references).
inline world<backend::Cuda, comm::nccl_communicator> cuda_local_world() {
  auto st = std::make_shared<detail::cuda_world_state>();
  st->nccl.emplace(comm::nccl_communicator::single());
  comm::nccl_communicator* c = &*st->nccl;
  world<backend::Cuda, comm::nccl_communicator> w(std::move(st), c);
  c->set_stream(w.queue().stream());
  return w;
}

template <>
struct one_device_world<backend::Cuda> {
  static auto make() { return cuda_local_world(); }
};

}  // namespace strata
