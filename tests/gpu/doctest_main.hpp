#pragma once
// main() of a doctest program in tests/gpu: exit code 77 (ctest: skipped) when
// there is no CUDA device, else every test case (doctest's command line applies).
#include <doctest/doctest.h>

#include <cstdio>

#include <cuda_runtime.h>

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    std::puts("no CUDA device: skipping");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
