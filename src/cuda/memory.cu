// CUDA device memory: the per-device contexts, the caching allocator, copies between devices, the
// kernel error slot, and the DeviceBackend that src/graph reaches them through (registered at
// static initialization).
//
// Rules: no cudaMalloc per op once a training loop is warm (Note [caching allocator]); every copy
// and memset runs on the device's stream; a copy to the host waits for it and reports what the
// kernels recorded (Note [kernel errors]). Contexts live until the process ends and are never
// torn down: tensors may still be freed during static destruction, after the CUDA runtime would be.
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "tapegrad/cuda/common.cuh"

namespace tapegrad::cuda {

// Note [caching allocator]
// Blocks are rounded up to a bucket size (powers of two from 512 bytes to 1 MiB, then whole MiB)
// and a freed block goes onto its bucket's free list instead of back to the driver, so a training
// loop, which asks for the same sizes every step, stops calling cudaMalloc after its first step
// (tests/cuda checks that cuda_malloc_count stays flat). Reuse is safe with one stream per device:
// a block freed on the host while kernels that use it are still queued is handed out only to work
// queued after them on the same stream. When cudaMalloc fails, the cache is given back to the
// driver and the call retried once; a second failure is a DeviceError saying what was asked and
// what is free.
//
// Note [graph pools]
// A captured graph replays its kernels on the addresses it was captured with, so the blocks that
// its tensors used must not go to anyone else while the graph lives, even after those tensors are
// freed. During a capture the allocator serves every allocation from the capture's own pool
// (reusing the pool's freed blocks within the capture is safe: the graph replays in the order it
// was recorded, one stream); pool_of_ remembers which blocks belong to a pool, so a block freed
// later, between replays, goes back to its pool and not to the common cache. When the graph is
// destroyed its pool is retired: free blocks join the common cache, and blocks that live tensors
// still hold (a loss the body returned) join it when they are freed. Same-stream ordering again
// makes that safe: anything allocated later is queued after the last replay.
//
// Note [chained launches]
// In a replayed graph of small kernels, much of each kernel's time is its launch: the blocks are
// scheduled only after the kernel before it has drained. Hopper can overlap the two (programmatic
// dependent launch): a kernel launched with launch_chained may be scheduled early, and its first
// statement, chain_start(), waits until the previous kernel has finished and its memory is
// visible, so it reads nothing early and writes nothing early. The kernels of a training step's
// path (gather, cross-entropy and its backward, the scatter, fill, AdamW) are launched that way;
// a kernel launched plainly is ordered as usual. TAPEGRAD_CUDA_CHAINED=0 turns it off (every
// launch plain), to compare or to rule it out.
//
// Note [kernel errors]
// A kernel cannot throw. Kernels that index memory with user data (gather, its backward,
// cross-entropy's targets) or that may run out of room (the exact f64 sums) check each access,
// skip the bad ones, and record the first failure in the device's ErrorSlot: the earliest failing
// launch, and in it the lowest position, so the message does not depend on thread timing. The host
// reads the slot at synchronization points (copies to the host, item(), check_kernel_errors()) and
// throws tapegrad::Error with the message the CPU kernel would have thrown, naming the device.

// ---- checked calls

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw DeviceError(std::string("[cuda] ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw DeviceError(std::string("[cuda] ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cublas_api().status_name(status) + " (" + cublas_api().status_string(status) + ")");
}

namespace {

std::string bytes_str(size_t n) {
  char buf[64];
  if (n >= (size_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(n) / (1 << 30));
  else if (n >= (size_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(n) / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%zu bytes", n);
  return buf;
}

}  // namespace

// ---- the caching allocator

size_t CachingAllocator::block_size(size_t nbytes) {
  constexpr size_t kMin = 512, kMiB = size_t{1} << 20;
  if (nbytes <= kMin) return kMin;
  if (nbytes <= kMiB) return size_t{1} << (64 - __builtin_clzll(nbytes - 1));
  return (nbytes + kMiB - 1) / kMiB * kMiB;
}

void* CachingAllocator::malloc_block(size_t block) {
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, block);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    release_cached_locked();
    status = cudaMalloc(&ptr, block);
  }
  if (status == cudaErrorMemoryAllocation) out_of_memory(block, status);
  TG_CUDA_CHECK(status);
  ++stats_.cuda_malloc_count;
  return ptr;
}

void* CachingAllocator::allocate(size_t nbytes) {
  const size_t block = block_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  if (capturing_) {  // a graph's block: from its own pool, or a new one that joins it
    auto& list = capturing_->free[block];
    if (!list.empty()) {
      ptr = list.back();
      list.pop_back();
    } else {
      ptr = malloc_block(block);
      pool_of_[ptr] = capturing_;
      capturing_->bytes += block;
      stats_.graph_pool_bytes += block;
    }
  } else {
    auto it = free_.find(block);
    if (it != free_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= block;
    } else {
      ptr = malloc_block(block);
    }
  }
  ++stats_.allocations;
  stats_.bytes_in_use += block;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes) noexcept {
  const size_t block = block_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.bytes_in_use -= block;
  if (!pool_of_.empty()) {
    const auto it = pool_of_.find(ptr);
    if (it != pool_of_.end()) {
      it->second->free[block].push_back(ptr);
      return;
    }
  }
  free_[block].push_back(ptr);
  stats_.bytes_cached += block;
}

void CachingAllocator::begin_pool(GraphPool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = pool;
}

void CachingAllocator::end_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = nullptr;
}

void CachingAllocator::retire_pool(GraphPool* pool) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capturing_ == pool) capturing_ = nullptr;
  for (auto it = pool_of_.begin(); it != pool_of_.end();) {
    if (it->second == pool) it = pool_of_.erase(it);
    else ++it;
  }
  for (auto& [block, list] : pool->free) {
    for (void* p : list) free_[block].push_back(p);
    stats_.bytes_cached += block * list.size();
    list.clear();
  }
  stats_.graph_pool_bytes -= pool->bytes;
  pool->bytes = 0;
}

void CachingAllocator::release_cached_locked() {
  for (auto& [block, list] : free_) {
    for (void* p : list) {
      TG_CUDA_CHECK(cudaFree(p));
      ++stats_.cuda_free_count;
    }
    list.clear();
  }
  stats_.bytes_cached = 0;
}

void CachingAllocator::out_of_memory(size_t block, cudaError_t status) {
  (void)cudaGetLastError();
  size_t free_bytes = 0, total_bytes = 0;
  const bool known = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  (void)cudaGetLastError();
  throw DeviceError("[cuda] out of device memory on cuda:" + std::to_string(device_) + ": asked for " +
                    bytes_str(block) + (known ? ", " + bytes_str(free_bytes) + " free of " + bytes_str(total_bytes) : "") +
                    "; tapegrad's tensors hold " + bytes_str(stats_.bytes_in_use) + " (" +
                    cudaGetErrorString(status) + ")");
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();  // cudaFree waits for the device first, so queued kernels finish with the blocks
}

AllocatorStats CachingAllocator::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

// ---- contexts

namespace {

constexpr int kMaxDevices = 64;
std::mutex g_contexts_mutex;
std::atomic<DeviceContext*> g_contexts[kMaxDevices];
thread_local int t_current_device = -1;

// "" when cudaGetDeviceCount finds a device, else why not.
std::string device_count_problem(int* count) {
  *count = 0;
  const cudaError_t status = cudaGetDeviceCount(count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    *count = 0;
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
  }
  if (*count == 0) return "cudaGetDeviceCount: 0 devices";
  return "";
}

}  // namespace

DeviceContext::DeviceContext(int i) : index(i), allocator(i) {
  TG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  error_slot = static_cast<ErrorSlot*>(allocator.allocate(sizeof(ErrorSlot)));
  TG_CUDA_CHECK(cudaMemsetAsync(error_slot, 0, sizeof(ErrorSlot), stream));
  TG_CUDA_CHECK(cudaMallocHost(&error_host, sizeof(ErrorSlot)));
  blocks_done = static_cast<uint32_t*>(allocator.allocate(sizeof(uint32_t)));
  TG_CUDA_CHECK(cudaMemsetAsync(blocks_done, 0, sizeof(uint32_t), stream));
}

DeviceContext& context(int index) {
  DeviceContext* ctx = index >= 0 && index < kMaxDevices ? g_contexts[index].load(std::memory_order_acquire) : nullptr;
  if (!ctx) {
    std::lock_guard<std::mutex> lock(g_contexts_mutex);
    int count = 0;
    const std::string problem = device_count_problem(&count);
    if (!problem.empty()) throw DeviceError("[cuda] no CUDA device is present (" + problem + ")");
    if (index < 0 || index >= count || index >= kMaxDevices)
      throw DeviceError("[cuda] cuda:" + std::to_string(index) + " does not exist: this machine has " +
                        std::to_string(count) + " CUDA device" + (count == 1 ? " (cuda:0)" : "s (cuda:0 to cuda:" +
                        std::to_string(count - 1) + ")"));
    ctx = g_contexts[index].load(std::memory_order_acquire);
    if (!ctx) {
      TG_CUDA_CHECK(cudaSetDevice(index));
      t_current_device = index;
      ctx = new DeviceContext(index);  // never deleted: see the rules at the top
      g_contexts[index].store(ctx, std::memory_order_release);
    }
  }
  if (t_current_device != index) {
    TG_CUDA_CHECK(cudaSetDevice(index));
    t_current_device = index;
  }
  return *ctx;
}

// ---- kernel errors

namespace {

std::string kernel_error_message(const ErrorSlot& e, int device) {
  const char* op = reinterpret_cast<const char*>(e.op);
  std::string what;
  switch (e.kind) {
    case ErrorKind::index_out_of_range:
      what = "index " + std::to_string(e.value) + " at position " + std::to_string(e.position) +
             " is out of range for a table of " + std::to_string(e.dim0) + " rows (shape (" + std::to_string(e.dim0) +
             ", " + std::to_string(e.dim1) + "))";
      break;
    case ErrorKind::axis_index_out_of_range:  // dim0: the axis's extent, dim1: the axis
      what = "index " + std::to_string(e.value) + " at position " + std::to_string(e.position) +
             " is out of range for axis " + std::to_string(e.dim1) + " of size " + std::to_string(e.dim0);
      break;
    case ErrorKind::target_out_of_range:
      what = "target " + std::to_string(e.value) + " at position " + std::to_string(e.position) +
             " is out of range for " + std::to_string(e.dim1) + " classes (logits (" + std::to_string(e.dim0) + ", " +
             std::to_string(e.dim1) + "))";
      break;
    case ErrorKind::sum_out_of_partials:
      what = "the exact f64 sum of output " + std::to_string(e.position) + " needed more than " +
             std::to_string(e.value) + " partials, the CUDA kernel's limit (inputs spanning most of the double range)";
      break;
    case ErrorKind::none: break;
  }
  return std::string("[") + op + "] " + what + " (found on cuda:" + std::to_string(device) +
         ", reported at the next synchronization)";
}

// Waits for the stream (the caller has queued what it needs before) and throws the recorded error.
void finish_and_check(DeviceContext& ctx) {
  if (ctx.capturing)
    throw Error("[capture] the captured body waits for cuda:" + std::to_string(ctx.index) +
                " (a copy to the host, item() or synchronize()), which a graph cannot replay; read values after "
                "replay() instead");
  const bool check = ctx.errors_possible;
  if (check) {
    TG_CUDA_CHECK(cudaMemcpyAsync(ctx.error_host, ctx.error_slot, sizeof(ErrorSlot), cudaMemcpyDeviceToHost, ctx.stream));
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  if (!check) return;
  ctx.errors_possible = false;
  if (ctx.error_host->kind == ErrorKind::none) return;
  const ErrorSlot error = *ctx.error_host;
  TG_CUDA_CHECK(cudaMemsetAsync(ctx.error_slot, 0, sizeof(ErrorSlot), ctx.stream));
  ctx.error_host->kind = ErrorKind::none;
  throw Error(kernel_error_message(error, ctx.index));
}

}  // namespace

void check_kernel_errors(int device) { finish_and_check(context(device)); }

void* stream(int device) { return context(device).stream; }

void* set_stream(int device, void* stream) {
  DeviceContext& ctx = context(device);
  void* old = ctx.stream;
  ctx.stream = static_cast<cudaStream_t>(stream);
  return old;
}

// ---- the DeviceBackend

namespace {

struct CudaBackend final : DeviceBackend {
  void* allocate(size_t nbytes, int device) override { return context(device).allocator.allocate(nbytes); }

  void deallocate(void* ptr, size_t nbytes, int device) noexcept override {
    // The context exists: it made this block. No CUDA call here, so this is safe at exit too.
    g_contexts[device].load(std::memory_order_acquire)->allocator.deallocate(ptr, nbytes);
  }

  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) override {
    if (nbytes == 0) return;
    if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
      // Between two GPUs: wait for the destination's queued work, copy on the source's stream, wait.
      TG_CUDA_CHECK(cudaStreamSynchronize(context(dst_dev.index).stream));
      DeviceContext& from = context(src_dev.index);
      TG_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, nbytes, from.stream));
      TG_CUDA_CHECK(cudaStreamSynchronize(from.stream));
      return;
    }
    if (dst_dev.is_cuda() && src_dev.is_cuda()) {
      DeviceContext& ctx = context(dst_dev.index);
      TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, ctx.stream));
    } else if (dst_dev.is_cuda()) {
      // From pageable host memory: the call returns once the source is staged, so the caller may free it.
      DeviceContext& ctx = context(dst_dev.index);
      if (ctx.capturing)  // a replay would read the host bytes again, long after the caller freed them
        throw Error("[capture] the captured body copies " + std::to_string(nbytes) + " bytes from the host to cuda:" +
                    std::to_string(ctx.index) + ", which a graph cannot replay; make the tensor on the device "
                    "before the capture, or copy_from into one between replays");
      TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, ctx.stream));
    } else {
      DeviceContext& ctx = context(src_dev.index);
      TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, ctx.stream));
      finish_and_check(ctx);  // a synchronization point: the bytes are there, and kernel errors surface
    }
  }

  void memset_zero(void* ptr, size_t nbytes, int device) override {
    if (nbytes) TG_CUDA_CHECK(cudaMemsetAsync(ptr, 0, nbytes, context(device).stream));
  }

  void synchronize(int device) override { finish_and_check(context(device)); }

  std::unique_ptr<CapturedGraph> capture(int device, const std::function<void()>& body) override {
    return capture_graph(context(device), body);
  }
};

// Registered at static initialization and never destroyed, like the contexts: a tensor freed
// during static destruction still finds its backend.
struct Registrar {
  Registrar() { register_backend(DeviceType::cuda, new CudaBackend()); }
} g_registrar;

}  // namespace

bool chained_launches() {
  static const bool on = [] {
    const char* env = std::getenv("TAPEGRAD_CUDA_CHAINED");
    return !(env && std::string(env) == "0");
  }();
  return on;
}

// ---- the public API of cuda.hpp

int device_count() {
  int count = 0;
  (void)device_count_problem(&count);
  return count;
}

std::string no_device_reason() {
  int count = 0;
  return device_count_problem(&count);
}

AllocatorStats allocator_stats(int device) { return context(device).allocator.stats(); }
void reset_peak_bytes(int device) { context(device).allocator.reset_peak(); }
void empty_cache(int device) { context(device).allocator.empty_cache(); }

}  // namespace tapegrad::cuda
