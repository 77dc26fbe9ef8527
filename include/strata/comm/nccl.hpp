// strata-header: cuda-only
// strata-header: mpi nccl
#pragma once
// NCCL backend of the communicator concept: one process per GPU, buffers are
// device pointers, every operation is enqueued on a CUDA stream the
// communicator holds. world() bootstraps over MPI and exists when the build has
// MPI (STRATA_WITH_MPI, set by CMake's strata::mpi); single() never touches MPI.
//
// Semantics on top of communicator.hpp:
//  * Buffers must be device-accessible memory of this communicator's device
//    (cudaMalloc, managed, or mapped pinned). Plain host memory is rejected
//    with a comm_error before NCCL can turn it into an illegal address.
//  * Collectives, send/recv/sendrecv/group return once enqueued. The host may
//    read results or reuse buffers only after synchronize(), or after joining
//    the stream with an event (record()). barrier, agree, split and group_of
//    are host-synchronous, as the concept requires.
//  * Tags are range-checked (0..32767, as with MPI) and otherwise ignored: NCCL
//    matches messages between two ranks by posting order.
//  * A standalone send or recv whose peer is this rank cannot complete: NCCL
//    only pairs self traffic inside one group (use sendrecv or group). NCCL
//    reports it as invalid usage, which surfaces as a comm_error.
//  * Streams: world()/single() create one non-blocking stream that every
//    communicator split from them shares, so operations on world, data,
//    tensor and pipeline communicators run in program order, as with MPI.
//    set_stream() moves one communicator onto another stream (e.g. a separate
//    gradient stream); ordering against compute is then the caller's job
//    (wait_for(stream), record(event)).
//  * Not thread-safe: one host thread drives a communicator.
//
// Failure model: see comm/nccl/watchdog.hpp (every wait is bounded by a timeout;
// an NCCL error or a stuck peer aborts the communicator with a comm_error naming it).
//
// The parts, by concern (this header includes them all):
//   comm/nccl/bootstrap.hpp    nccl_communicator: world (over MPI), single, split, group_of
//   comm/nccl/collectives.hpp  barrier, agree, all_reduce, reduce_scatter, all_gather, broadcast, all_to_all
//   comm/nccl/p2p_group.hpp    send, recv, sendrecv, group
//   comm/nccl/handle.hpp       the owned state, streams, the watchdog's controls, argument checks
//   comm/nccl/watchdog.hpp     the state and its watchdog: numbered operations, bounded waits, abort
//   comm/nccl/types.hpp        NCCL types and ops of strata's, error texts, the device scope
// What MPI and NCCL share: comm/agree.hpp, comm/naming.hpp, comm/timeout.hpp.

#include "strata/comm/nccl/bootstrap.hpp"
