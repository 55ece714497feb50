// runtime.cu: identity, status strings, device, memory, streams, copies and graph capture.
#include <stdio.h>

#include <mutex>

#include "common.cuh"

#ifndef CS1_BUILD_ARCH
#define CS1_BUILD_ARCH "unknown"
#endif
#ifndef CS1_BUILD_NVCC
#define CS1_BUILD_NVCC "unknown"
#endif
#ifndef CS1_BUILD_GIT
#define CS1_BUILD_GIT "unknown"
#endif

// ---- identity -----------------------------------------------------------------------------------------------------

extern "C" uint32_t cs1_abi_version(void) { return CS1_ABI_VERSION; }

extern "C" const char *cs1_build_info(void) {
    static char text[512];
    static std::once_flag once;
    std::call_once(once, [] {
        snprintf(text, sizeof text, "abi=%d arch=%s cuda=%d.%d nvcc=%s git=%s", CS1_ABI_VERSION, CS1_BUILD_ARCH,
                 CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10, CS1_BUILD_NVCC, CS1_BUILD_GIT);
    });
    return text;
}

// cuBLAS statuses by value (1000 + status); kept here so the text does not need a cuBLAS call.
static const char *cublas_status_text(int s) {
    switch (s) {
        case 0: return "cuBLAS: CUBLAS_STATUS_SUCCESS";
        case 1: return "cuBLAS: CUBLAS_STATUS_NOT_INITIALIZED (handle creation failed: no device or driver?)";
        case 3: return "cuBLAS: CUBLAS_STATUS_ALLOC_FAILED (out of device or host memory)";
        case 7: return "cuBLAS: CUBLAS_STATUS_INVALID_VALUE (unsupported shape, layout or alignment)";
        case 8: return "cuBLAS: CUBLAS_STATUS_ARCH_MISMATCH (feature not available on this GPU)";
        case 11: return "cuBLAS: CUBLAS_STATUS_MAPPING_ERROR";
        case 13: return "cuBLAS: CUBLAS_STATUS_EXECUTION_FAILED (a GPU kernel failed to launch or run)";
        case 14: return "cuBLAS: CUBLAS_STATUS_INTERNAL_ERROR";
        case 15: return "cuBLAS: CUBLAS_STATUS_NOT_SUPPORTED (no algorithm for this configuration)";
        case 16: return "cuBLAS: CUBLAS_STATUS_LICENSE_ERROR";
        default: return "cuBLAS: unknown cublasStatus_t";
    }
}

extern "C" const char *cs1_error_string(int status) {
    if (status == 0) return "success";
    if (status > 0 && status < 1000) return cudaGetErrorString((cudaError_t)status);
    if (status >= 1000 && status < 2000) return cublas_status_text(status - 1000);
    switch (status) {
        case CS1_ERR_SHAPE: return "cs1: a size argument is out of range or inconsistent";
        case CS1_ERR_ALIGNMENT: return "cs1: a pointer or leading dimension is not aligned as the kernel needs";
        case CS1_ERR_NULL: return "cs1: a required pointer is null";
        case CS1_ERR_UNSUPPORTED: return "cs1: configuration not implemented by the kernels (head dim, arch, ...)";
        case CS1_ERR_NO_DEVICE: return "cs1: no CUDA device is visible";
        case CS1_ERR_WORKSPACE: return "cs1: workspace smaller than the size function asked for";
        case CS1_ERR_GRAPH: return "cs1: graph capture misuse (null graph, end without begin, ...)";
        default: return "cs1: unknown status code";
    }
}

// ---- device -------------------------------------------------------------------------------------------------------

extern "C" int cs1_device_count(int *count) {
    CS1_REQUIRE_PTR(count);
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        return CS1_ERR_NO_DEVICE;
    }
    CS1_CUDA(e);
    *count = n;
    return n > 0 ? 0 : CS1_ERR_NO_DEVICE;
}

extern "C" int cs1_set_device(int device) {
    CS1_CUDA(cudaSetDevice(device));
    return 0;
}

extern "C" int cs1_get_device(int *device) {
    CS1_REQUIRE_PTR(device);
    CS1_CUDA(cudaGetDevice(device));
    return 0;
}

extern "C" int cs1_device_info(int device, int *cc_major, int *cc_minor, int *sm_count, size_t *total_bytes) {
    CS1_REQUIRE(cc_major && cc_minor && sm_count && total_bytes, CS1_ERR_NULL);
    cudaDeviceProp prop;
    CS1_CUDA(cudaGetDeviceProperties(&prop, device));
    *cc_major = prop.major;
    *cc_minor = prop.minor;
    *sm_count = prop.multiProcessorCount;
    *total_bytes = prop.totalGlobalMem;
    return 0;
}

extern "C" int cs1_mem_info(size_t *free_bytes, size_t *total_bytes) {
    CS1_REQUIRE(free_bytes && total_bytes, CS1_ERR_NULL);
    CS1_CUDA(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

// ---- memory -------------------------------------------------------------------------------------------------------

extern "C" int cs1_malloc(void **ptr, size_t bytes) {
    CS1_REQUIRE_PTR(ptr);
    *ptr = nullptr;
    CS1_REQUIRE_SHAPE(bytes > 0);
    CS1_CUDA(cudaMalloc(ptr, bytes));
    return 0;
}

extern "C" int cs1_free(void *ptr) {
    if (!ptr) return 0;
    CS1_CUDA(cudaFree(ptr));
    return 0;
}

extern "C" int cs1_memset_async(void *ptr, int value, size_t bytes, void *stream) {
    if (bytes == 0) return 0;
    CS1_REQUIRE_PTR(ptr);
    CS1_CUDA(cudaMemsetAsync(ptr, value, bytes, cs1_stream(stream)));
    return 0;
}

extern "C" int cs1_host_alloc(void **ptr, size_t bytes) {
    CS1_REQUIRE_PTR(ptr);
    *ptr = nullptr;
    CS1_REQUIRE_SHAPE(bytes > 0);
    CS1_CUDA(cudaHostAlloc(ptr, bytes, cudaHostAllocDefault));
    return 0;
}

extern "C" int cs1_host_free(void *ptr) {
    if (!ptr) return 0;
    CS1_CUDA(cudaFreeHost(ptr));
    return 0;
}

// ---- streams ------------------------------------------------------------------------------------------------------

extern "C" int cs1_stream_create(void **stream) {
    CS1_REQUIRE_PTR(stream);
    *stream = nullptr;
    cudaStream_t s = nullptr;
    CS1_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return 0;
}

extern "C" int cs1_stream_sync(void *stream) {
    CS1_CUDA(cudaStreamSynchronize(cs1_stream(stream)));
    return 0;
}

extern "C" int cs1_stream_destroy(void *stream) {
    if (!stream) return 0;  // the legacy default stream is never destroyed
    CS1_CUDA(cudaStreamDestroy(cs1_stream(stream)));
    return 0;
}

// ---- copies -------------------------------------------------------------------------------------------------------

static int copy(void *dst, const void *src, size_t bytes, void *stream, cudaMemcpyKind kind, bool wait) {
    if (bytes == 0) return 0;
    CS1_REQUIRE(dst && src, CS1_ERR_NULL);
    cudaStream_t s = cs1_stream(stream);
    CS1_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, s));
    if (wait) CS1_CUDA(cudaStreamSynchronize(s));
    return 0;
}

extern "C" int cs1_upload(void *dst, const void *src, size_t bytes, void *stream) {
    return copy(dst, src, bytes, stream, cudaMemcpyHostToDevice, true);
}
extern "C" int cs1_upload_async(void *dst, const void *pinned_src, size_t bytes, void *stream) {
    return copy(dst, pinned_src, bytes, stream, cudaMemcpyHostToDevice, false);
}
extern "C" int cs1_download(void *dst, const void *src, size_t bytes, void *stream) {
    return copy(dst, src, bytes, stream, cudaMemcpyDeviceToHost, true);
}
extern "C" int cs1_download_async(void *pinned_dst, const void *src, size_t bytes, void *stream) {
    return copy(pinned_dst, src, bytes, stream, cudaMemcpyDeviceToHost, false);
}
extern "C" int cs1_copy_dd(void *dst, const void *src, size_t bytes, void *stream) {
    return copy(dst, src, bytes, stream, cudaMemcpyDeviceToDevice, false);
}

// ---- graph capture ------------------------------------------------------------------------------------------------
// Every failure path clears the last error, so one failed capture never poisons the next call or capture.

extern "C" int cs1_graph_begin(void *stream) {
    CS1_CUDA(cudaStreamBeginCapture(cs1_stream(stream), cudaStreamCaptureModeThreadLocal));
    return 0;
}

extern "C" int cs1_graph_end(void *stream, void **graph_exec) {
    CS1_REQUIRE_PTR(graph_exec);
    *graph_exec = nullptr;
    cudaStream_t s = cs1_stream(stream);
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    CS1_CUDA(cudaStreamIsCapturing(s, &st));
    if (st == cudaStreamCaptureStatusNone) return CS1_ERR_GRAPH;  // end without begin
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &graph);  // also ends an invalidated capture
    if (e != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        return cs1_fail(e);
    }
    if (!graph) return cs1_fail(cudaErrorStreamCaptureInvalidated);
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return cs1_fail(e);
    *graph_exec = exec;
    return 0;
}

extern "C" int cs1_graph_launch(void *graph_exec, void *stream) {
    CS1_REQUIRE(graph_exec != nullptr, CS1_ERR_GRAPH);
    CS1_CUDA(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph_exec), cs1_stream(stream)));
    return 0;
}

extern "C" int cs1_graph_destroy(void *graph_exec) {
    if (!graph_exec) return 0;
    CS1_CUDA(cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(graph_exec)));
    return 0;
}
