#pragma once
// The communicator conformance suite: every operation of strata::comm::Communicator
// (core/communicator.hpp) checked once, against closed-form values, for any
// communicator and the memory it reads: host memory for the self and MPI
// communicators, device memory for NCCL.
//
// Instantiation: a test file defines the policy, then includes this header:
//
//   namespace comm_suite {
//   struct policy : host_memory {             // host_memory.hpp; or its own buffers
//     using comm = strata::comm::mpi_communicator;
//     static comm& world();                   // the communicator under test
//   };
//   }
//   #include "../comm/comm_suite.hpp"
//
// A memory policy provides buffer<T> (with data()), allocate<T>(n), and
// upload(comm, host, n, dst) / download(comm, src, n, host) ordered with the
// communicator's operations (download runs after comm.synchronize()).
//
// Every rank runs every test case in the same order and the checks are CHECKs, so a
// failing rank keeps calling the same collectives as the others. Test cases are in
// the doctest test suite "communicator conformance".
//
// Covered: all_reduce (sum, max, min) on the world and a sub-communicator;
// reduce_scatter (out of place, MPI's and NCCL's in-place forms); all_gather (out of
// place, in place, aliased); broadcast from every root; all_to_all (out of place, in
// place): each for float, double, int32, int64, bf16 and f16 (moves bit for bit, NaN
// payloads included; reductions on inputs whose 16-bit sums are exact). Zero counts.
// send/recv pairs, sendrecv ring shifts, grouped rings in both directions and
// pipelines with no_peer ends mixing element types, self exchange in a group. agree
// (the same comm_error on every rank), split (key order, names, negative color),
// group_of and group_from_partition (a data x pipeline x tensor mesh, list order,
// bad lists), size-1 sub-communicators, invalid peers / roots / null buffers.
#include "comm_suite_common.hpp"

TEST_SUITE_BEGIN("communicator conformance");
#include "comm_suite_collectives.hpp"
#include "comm_suite_groups.hpp"
#include "comm_suite_p2p.hpp"
TEST_SUITE_END();
