// probe_check.h: CHECK(call) for the stand-alone CUDA probes in benchmarks/ (pdl_probe.cu, conv_runs.cu): print the
// failing call and its error, then exit 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                   \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                             \
        }                                                                                             \
    } while (0)
