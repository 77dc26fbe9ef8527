// strata-header: mpi
#pragma once
// MPI backend of the communicator concept: one MPI process per simulated
// device. Every call returns through MPI_ERRORS_RETURN and is checked, so a
// failure becomes a comm_error naming the call, the communicator and the rank
// instead of OpenMPI's default abort with no context.
//
// No operation blocks for ever: each posts the non-blocking form of its MPI call
// and waits through the watchdog (comm/mpi/watchdog.hpp), which ends the job with
// a message naming the operation, the communicator and the rank when a peer
// leaves it unfinished for STRATA_MPI_TIMEOUT_S (default 300 s; set_timeout()).
// Error messages keep the name of the blocking call the operation stands for
// (MPI_Allreduce for MPI_Iallreduce + test), which is what it means to the caller.
// Before it ends the job, the watchdog asks every rank where it stands through a side
// channel and prints one verdict naming the ranks that stopped answering (comm/mpi/verdict.hpp).
//
// bf16, f16: moved as 16-bit words and reduced with user-defined ops (comm/mpi/types.hpp).
//
// The parts, by concern (this header includes them all):
//   comm/mpi/bootstrap.hpp    mpi_environment; mpi_communicator: world, borrow, adopt, split, group_of
//   comm/mpi/collectives.hpp  barrier, agree, all_reduce, reduce_scatter, all_gather, broadcast, all_to_all
//   comm/mpi/p2p_group.hpp    send, recv, sendrecv, group, post_group / progress / complete
//   comm/mpi/handle.hpp       the MPI_Comm, its name and timeout; checks and bounded waits
//   comm/mpi/watchdog.hpp     bounded waits and the message that ends the job
//   comm/mpi/verdict.hpp      the side channel: every rank's answer, one verdict naming who stopped
//   comm/mpi/end_job.hpp      fail_all, end_job_on_terminate
//   comm/mpi/types.hpp        MPI datatypes and the bf16/f16 reductions
// What MPI and NCCL share: comm/agree.hpp, comm/naming.hpp, comm/timeout.hpp,
// comm/watchdog_verdict.hpp.

#include "strata/comm/mpi/bootstrap.hpp"
#include "strata/comm/mpi/end_job.hpp"
