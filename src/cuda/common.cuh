// What every CUDA family file shares: checked CUDA calls, the per-device context (stream,
// allocator, cuBLAS handle, kernel error slot), dtype dispatch, launch sizes.
//
// Rules: every CUDA runtime call goes through TG_CUDA_CHECK and every launch is followed by
// TG_CUDA_CHECK_LAUNCH(); all work of a device runs on its context's stream, in call order (one
// stream per device for now; stream_for() is the seam for more). Kernels never throw: they record
// a bad index in the device's error slot and skip the access (Note [kernel errors] in memory.cu),
// and the host reports it at the next synchronization.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::cuda {

// ---- checked calls

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

// The cuBLAS entry points tapegrad calls, loaded with dlopen the first time a CUDA matmul needs
// them (Note [cuBLAS on demand] in linalg.cu); a DeviceError naming the library if it cannot be.
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);  // the library's, not the inline overload
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
  // batched products (kernels::matmul of the N-d ops); the library's, not the inline overload
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t);
};
const CublasApi& cublas_api();

// The cuBLASLt entry points (loaded as cuBLAS is): GEMMs with epilogues (linalg.cu, matmul_bias).
struct CublasLtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};
const CublasLtApi& cublaslt_api();

}  // namespace tapegrad::cuda

// A failed CUDA call throws DeviceError naming the call, its file and line, and the driver's reason.
#define TG_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    const cudaError_t tg_status_ = (call);                                                         \
    if (tg_status_ != cudaSuccess) ::tapegrad::cuda::throw_cuda_error(tg_status_, #call, __FILE__, __LINE__); \
  } while (0)
#define TG_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                             \
    const cublasStatus_t tg_status_ = (call);                                                      \
    if (tg_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::tapegrad::cuda::throw_cublas_error(tg_status_, #call, __FILE__, __LINE__);                 \
  } while (0)
// After every <<<...>>>: a bad launch configuration shows here, an asynchronous fault at the next sync.
#define TG_CUDA_CHECK_LAUNCH() TG_CUDA_CHECK(cudaGetLastError())

namespace tapegrad::cuda {

// ---- kernel errors (Note [kernel errors] in memory.cu)

enum class ErrorKind : int32_t { none = 0, index_out_of_range, target_out_of_range, sum_out_of_partials, axis_index_out_of_range };

// One per device, in device memory. `lock` guards the other fields between recording threads.
struct ErrorSlot {
  int32_t lock;
  ErrorKind kind;
  uint64_t launch;     // which launch recorded it: the first launch to fail keeps the slot
  uint64_t op;         // the op's name: a host string literal, carried through the device untouched
  int64_t position;    // the lowest failing position of that launch
  int64_t value;       // the bad index
  int64_t dim0, dim1;  // the table's (or the logits') shape, for the message
};

// What a launch that may fail passes its kernel (by value): where to record and what to say.
struct ErrorSite {
  ErrorSlot* slot;
  uint64_t launch;
  uint64_t op;
  int64_t dim0, dim1;
};

// Records (kind, position, value) unless the slot already holds an error of an earlier launch or
// of a lower position of this one. Rare, so a spin lock is fine (threads of one warp make progress
// independently on sm_70 and later).
__device__ inline void record_error(const ErrorSite& site, ErrorKind kind, int64_t position, int64_t value) {
  volatile ErrorSlot* s = site.slot;
  while (atomicCAS(&site.slot->lock, 0, 1) != 0) {
  }
  __threadfence();
  const bool empty = s->kind == ErrorKind::none;
  if (empty || (s->launch == site.launch && position < s->position)) {
    s->kind = kind;
    s->launch = site.launch;
    s->op = site.op;
    s->position = position;
    s->value = value;
    s->dim0 = site.dim0;
    s->dim1 = site.dim1;
  }
  __threadfence();
  atomicExch(&site.slot->lock, 0);
}

// ---- a fixed-order f32 sum (the reductions' arithmetic: the same bits on every run)

constexpr int kSumSlots = 512;

// sum(x (n,)) in double: slot s adds x[s], x[s + kSumSlots], ... in order, then a fixed tree halves
// the slots. Called by every thread of one block (any size up to kSumSlots) with a shared array of
// kSumSlots doubles; returns the sum to every thread. Loads bypass L1 (__ldcg), so a block may sum
// values that other blocks wrote before a __threadfence().
__device__ inline double fixed_order_sum(const float* x, int64_t n, double* slots) {
  for (int s = threadIdx.x; s < kSumSlots; s += blockDim.x) {
    double acc = 0.0;
    for (int64_t i = s; i < n; i += kSumSlots) acc += __ldcg(x + i);
    slots[s] = acc;
  }
  __syncthreads();
  for (int half = kSumSlots / 2; half > 0; half /= 2) {
    for (int s = threadIdx.x; s < half; s += blockDim.x) slots[s] += slots[s + half];
    __syncthreads();
  }
  return slots[0];
}

// ---- the caching allocator (Note [caching allocator] in memory.cu)

// The blocks a captured graph allocated (Note [graph pools] in memory.cu): reserved for it, so
// that no tensor made outside the graph is handed a block its replays write.
struct GraphPool {
  std::unordered_map<size_t, std::vector<void*>> free;  // block size -> free blocks of the graph
  size_t bytes = 0;                                     // every block made for it
};

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  void* allocate(size_t nbytes);
  void deallocate(void* ptr, size_t nbytes) noexcept;
  void empty_cache();
  AllocatorStats stats();
  void reset_peak();

  // While a capture runs, allocations come from (and frees of its blocks go back to) `pool`.
  void begin_pool(GraphPool* pool);
  void end_pool();
  // The graph is gone: its free blocks join the common cache, and its blocks still held by
  // tensors will when those are freed.
  void retire_pool(GraphPool* pool) noexcept;

 private:
  static size_t block_size(size_t nbytes);
  void* malloc_block(size_t block);  // cudaMalloc, emptying the cache and retrying once
  [[noreturn]] void out_of_memory(size_t block, cudaError_t status);
  void release_cached_locked();

  int device_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // block size -> free blocks of that size
  GraphPool* capturing_ = nullptr;                      // the pool of the capture now running
  std::unordered_map<void*, GraphPool*> pool_of_;        // every block that belongs to a graph pool
  AllocatorStats stats_;
};

// ---- the per-device context (a device is driven from one thread at a time; only the allocator,
// which tensors freed on any thread reach, takes a lock)

struct DeviceContext {
  explicit DeviceContext(int index);
  int index;
  cudaStream_t stream = nullptr;        // all kernels and copies of this device, in call order
  CachingAllocator allocator;
  cublasHandle_t cublas = nullptr;      // made by the first matmul (linalg.cu)
  cublasLtHandle_t cublaslt = nullptr;  // made by the first GEMM with an epilogue (linalg.cu),
  void* lt_workspace = nullptr;         // with its workspace
  ErrorSlot* error_slot = nullptr;      // device memory
  ErrorSlot* error_host = nullptr;      // pinned host copy, read after a sync
  uint32_t* blocks_done = nullptr;      // device memory, 0 between launches: a fused reduction's
                                        // last block finds itself with it (and puts it back to 0)
  uint64_t launches = 0;                // launches that may record an error, ever
  bool errors_possible = false;         // one ran since the last check
  bool capturing = false;               // a capture() is recording this device's stream

  // An ErrorSite for a launch of `op` that may record an error; marks the context to be checked.
  ErrorSite error_site(const char* op, int64_t dim0, int64_t dim1) {
    errors_possible = true;
    return {error_slot, ++launches, reinterpret_cast<uint64_t>(op), dim0, dim1};
  }
};

// The context of cuda:index, made on first use (and the current device of this thread set to it);
// throws DeviceError when there is no such device.
DeviceContext& context(int index);
inline DeviceContext& context(const Tensor& t) { return context(t.device().index); }
inline cudaStream_t stream_for(const Tensor& t) { return context(t).stream; }

// capture.cu: tapegrad::capture() on a CUDA device.
std::unique_ptr<CapturedGraph> capture_graph(DeviceContext& ctx, const std::function<void()>& body);

// ---- dtype dispatch: f.template operator()<T>() for the dtypes a kernel family supports

template <class F>
void dispatch_float(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::f64: f.template operator()<double>(); return;
    case DType::f32: f.template operator()<float>(); return;
    default: throw Error(std::string("[") + op + "] no CUDA kernel for " + dtype_name(t) + " (f64 and f32 only)");
  }
}

template <class F>
void dispatch_index(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    default: throw Error(std::string("[") + op + "] indices must be i32 or i64, got " + dtype_name(t));
  }
}

template <class T>
const T* cdata(const Tensor& t) {
  return static_cast<const T*>(t.raw_data());
}
template <class T>
T* mdata(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// ---- chained launches (Note [chained launches] in memory.cu)

// The first statement of a kernel launched with launch_chained: waits until the kernel before it
// on the stream has finished and its writes are visible, then lets the kernel after it start
// launching (it will wait the same way). A no-op when the kernel was launched plainly.
__device__ inline void chain_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

bool chained_launches();  // false when TAPEGRAD_CUDA_CHAINED=0 (then every launch is plain)

// kernel<<<grid, block, 0, stream>>>(args...), allowed to begin launching while the kernel before
// it finishes (programmatic dependent launch). The kernel must begin with chain_start().
template <class... Params, class... Args>
void launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = chained_launches() ? 1 : 0;
  config.attrs = attribute;
  config.numAttrs = 1;
  TG_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

// ---- launch sizes: grid-stride loops over n items, at most a few waves of blocks

constexpr int kBlock = 256;

// Note [packed loops]
// An elementwise kernel moves 16 bytes per thread and step (four f32 or two f64 elements) through
// one vector load or store: the loads in flight, not the arithmetic, bound these kernels on
// Hopper, and a 4-byte load per thread leaves most of the bandwidth unused. A tensor's bytes start
// at its storage (no offsets), which the allocator aligns to 256 bytes, so the packs are aligned;
// the launchers still check and take the scalar loop otherwise. The tail past the last full pack
// runs element by element.
template <class T>
struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};
inline bool packable(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}
inline unsigned blocks_for(int64_t n, int block = kBlock) {
  return static_cast<unsigned>(std::min<int64_t>((n + block - 1) / block, 4096));
}

// ---- copies into shared memory that skip the registers (PTX cp.async)

__device__ inline uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// 16 bytes from device memory (src 16-byte aligned, cached in L2 only) to shared memory, in flight
// until the thread waits on them; the thread's loads stay free to issue meanwhile.
__device__ inline void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(dst)), "l"(src));
}
// Every copy this thread issued has landed and is visible to it (to the block after a barrier).
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// 2^x by the multi-function unit alone (ex2.approx.ftz: about 2^-22 relative; results below
// 2^-126 flush to 0): for softmax probabilities, where exp2f's extra instructions for subnormal
// results cost more than the exponentials themselves (the flash attention's and cross-entropy's).
__device__ inline float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace tapegrad::cuda
