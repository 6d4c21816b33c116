// The CUDA backend's own switches and counters (plain C++; exists only in builds with CUDA, where
// config.hpp sets TAPEGRAD_WITH_CUDA). Device-neutral code uses tapegrad::synchronize(device)
// from tensor/backend.hpp instead, which reaches check_kernel_errors() on a CUDA device.
//
//   tapegrad::cuda::device_count()            0 when no device is usable (never throws)
//   tapegrad::cuda::allocator_stats(0)        the caching allocator of cuda:0
//   tapegrad::cuda::check_kernel_errors(0)    wait for cuda:0, throw what its kernels recorded
//   tapegrad::cuda::set_allow_tf32(true)      f32 matmul may use TF32 tensor cores (off by default)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tapegrad::cuda {

// Devices that can run tapegrad's kernels; 0 when there is none or no driver.
int device_count();
// Why there is no device ("cudaGetDeviceCount: no CUDA-capable device is detected"); "" when there is one.
std::string no_device_reason();

// The caching allocator of one device (Note [caching allocator] in memory.cu). Byte counts are
// the rounded block sizes the allocator hands out.
struct AllocatorStats {
  size_t bytes_in_use = 0;       // blocks held by live tensors (and the backend's own buffers)
  size_t peak_bytes_in_use = 0;  // the most bytes_in_use has been since the last reset_peak_bytes()
  size_t bytes_cached = 0;       // free blocks kept for reuse
  uint64_t cuda_malloc_count = 0;  // cudaMalloc calls so far: flat across the steps of a training loop
  uint64_t cuda_free_count = 0;
  uint64_t allocations = 0;        // blocks handed out, cache hits included
  size_t graph_pool_bytes = 0;     // blocks reserved by live captured graphs (in use or not)
};
AllocatorStats allocator_stats(int device = 0);
void reset_peak_bytes(int device = 0);
void empty_cache(int device = 0);  // give every cached free block back to the driver

// Waits for the device's stream, then throws tapegrad::Error for the first error a kernel recorded
// since the last check (an out-of-range index: the op, the index and its position). Copies to the
// host and item() check the same way; apps call tapegrad::synchronize(device) at the end of a step.
void check_kernel_errors(int device = 0);

// The stream (a cudaStream_t) that cuda:device's kernels and copies are queued on, and a swap of
// it: set_stream(device, s) makes s that stream and returns the one it replaces. For work that
// must run beside the compute stream (dist's NCCL backend queues its transfers and the sums of
// what they bring on a stream of its own); the caller orders the two streams with events and
// puts the old stream back. Elementwise kernels and copies follow the swap; cuBLAS handles keep the
// stream they were made with, so no matrix product may be queued while it lasts. A device is
// driven from one thread at a time.
void* stream(int device);
void* set_stream(int device, void* stream);

// f32 matmul through cuBLAS: exact fp32 arithmetic by default; TF32 (10-bit mantissa products,
// about 1e-3 relative error, faster on Hopper's tensor cores) only after set_allow_tf32(true).
void set_allow_tf32(bool allow);
bool allow_tf32();

// The bf16 attention's kernels (autocast) on Hopper (compute capability 9.0) at head sizes up to
// 64: warpgroup products (wgmma) by default; set_attention_wgmma(false), or TAPEGRAD_ATTENTION_WGMMA=0
// in the environment, runs the mma.sync kernels the other devices and head sizes run (Note [wgmma
// attention] in flash_bf16.cu). Both give the same values up to the order of the f32 sums.
void set_attention_wgmma(bool use);
bool attention_wgmma();
bool attention_wgmma_available(int device = 0);  // compute capability 9.0
// Which of the wgmma attention's kernels run a tile's products while the arithmetic around them
// runs (Note [overlapped wgmma forward]): a mask of kOverlapForward, kOverlapDq and kOverlapDkdv,
// by default dQ's alone: timed on an H100, the overlapped forward and dK/dV (which holds 2 blocks a
// multiprocessor where the other holds 3) were slower than a product at a time, the overlapped dQ
// faster on causal rows (docs/perf-gpt-gpu.md). TAPEGRAD_ATTENTION_OVERLAP=N (0 to 7) in the
// environment sets the mask of a run. The same bits whichever kernels run.
inline constexpr unsigned kOverlapForward = 1, kOverlapDq = 2, kOverlapDkdv = 4;
inline constexpr unsigned kOverlapDefault = kOverlapDq;
void set_attention_overlap(unsigned kernels);
unsigned attention_overlap();

}  // namespace tapegrad::cuda
