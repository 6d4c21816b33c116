// CUDA optimizer updates, in place: SGD, SGD with momentum, the AdamW of docs/bob.md, "Learner"
// (one launch for up to 16 parameters), and clip_grad_norm's sums of squares and scaling (one
// launch each for up to 48 tensors).
//
// Rule: per element, the CPU kernel's arithmetic in its order (src/kernels/cpu/elementwise.cpp),
// rounded after every operation (--fmad=false), with the scalars the CPU derives computed the
// same way on the host; so parameters and moments equal the CPU's bit for bit.
#include <type_traits>
#include <vector>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/kernels/bf16.hpp"

namespace tapegrad::cuda {

// ----------------------------------------------------------------------------
// CUDA kernels

// param (n,) = param - lr * grad
template <class T>
__global__ void sgd_kernel(T* param, const T* grad, T lr, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    param[i] = param[i] - lr * grad[i];
}

// Up to kAdamWGroup parameters updated by one launch ("multi-tensor apply"): parameter k gets the
// blocks [first_block[k], first_block[k + 1]) and strides over its elements with them.
constexpr int kAdamWGroup = 16;
struct AdamWGroup {
  float* w[kAdamWGroup];
  const float* g[kAdamWGroup];
  float* m[kAdamWGroup];
  float* v[kAdamWGroup];
  kernels::bf16* copy[kAdamWGroup];  // null, or the parameter's bf16 copy (AdamWSlot::copy)
  int64_t n[kAdamWGroup];
  unsigned first_block[kAdamWGroup + 1];
  int count;
};

// For each parameter of the group, w, m, v (n,) updated from g (n,), fp32, left to right as
// docs/bob.md ("Learner") writes it:
//   w = w * (1 - lr*wd);  m = b1*m + (1 - b1)*g;  v = b2*v + (1 - b2)*g*g
//   w = w - step_size * (m / (sqrt(v) / bc2_sqrt + eps))
// step_scalars, when not null, holds (step_size, bc2_sqrt, decay) in device memory (a captured graph's update);
// grad_scale, when not null, a () f64 factor each g is multiplied by, rounded to fp32 (scale_many_kernel's product);
// a parameter's copy, when not null, receives the new w rounded to bf16 (the cast's bits).
__global__ void adamw_kernel(AdamWGroup group, float decay, float beta1, float one_minus_b1, float beta2,
                             float one_minus_b2, float step_size, float bc2_sqrt, float eps,
                             const float* step_scalars, const double* grad_scale) {
  chain_start();
  if (step_scalars) {
    step_size = step_scalars[0];
    bc2_sqrt = step_scalars[1];
    decay = step_scalars[2];
  }
  const float scale = grad_scale ? static_cast<float>(*grad_scale) : 1.0f;
  int k = 0;
  while (k + 1 < group.count && blockIdx.x >= group.first_block[k + 1]) ++k;
  float* w = group.w[k];
  const float* g = group.g[k];
  float* m = group.m[k];
  float* v = group.v[k];
  kernels::bf16* copy = group.copy[k];
  const int64_t n = group.n[k];
  const int64_t stride = int64_t{group.first_block[k + 1] - group.first_block[k]} * blockDim.x;
  for (int64_t i = (blockIdx.x - group.first_block[k]) * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const float gi = grad_scale ? g[i] * scale : g[i];
    float wi = w[i] * decay;
    const float mi = beta1 * m[i] + one_minus_b1 * gi;
    const float vi = beta2 * v[i] + one_minus_b2 * gi * gi;
    wi = wi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
    if (copy) copy[i] = kernels::to_bf16(wi);
  }
}

// torch.optim.SGD's update, SGDElement's math (optim_ops.hpp): p, g, buf (n,); buf only with momentum
template <class T>
__global__ void sgd_momentum_kernel(T* param, const T* grad, T* buf, kernels::SGDElement<T> e, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    e.update(param[i], grad[i], buf ? buf + i : nullptr);
}

// clip_grad_norm's kernels: up to kClipGroup tensors (f32 or f64, mixed) served by one launch
// ("multi-tensor apply", as AdamWGroup): tensor k gets the blocks
// [first_block[k], first_block[k + 1]). A block's tensor decides its dtype, so no warp diverges on
// it. 48 tensors keep the struct well under the 4 KiB that a kernel's parameters may take.
constexpr int kClipGroup = 48;
struct ClipGroup {
  void* x[kClipGroup];
  int64_t n[kClipGroup];
  int64_t first_out[kClipGroup];  // where tensor k's chunk sums go in out; unused by scale_many
  unsigned first_block[kClipGroup + 1];
  bool f64[kClipGroup];
  int count;

  // Appends a tensor given `blocks` blocks; true when the group is then full.
  bool add(void* data, int64_t elements, bool is_f64, int64_t out_at, unsigned blocks) {
    const int k = count++;
    x[k] = data;
    n[k] = elements;
    first_out[k] = out_at;
    f64[k] = is_f64;
    first_block[k + 1] = first_block[k] + blocks;
    return count == kClipGroup;
  }
  unsigned blocks() const { return first_block[count]; }
  // The tensor block b works on.
  __device__ int member(unsigned b) const {
    int k = 0;
    while (k + 1 < count && b >= first_block[k + 1]) ++k;
    return k;
  }
};
static_assert(sizeof(ClipGroup) + 64 <= 4096, "a group and the kernel's other parameters fit in 4 KiB");

// Note [sum of squares order] (optim_ops.hpp), one launch for a group of tensors: a warp sums a
// chunk, lane l adding the squares of the chunk's elements l, l + 32, ... in double, then the
// pairwise tree over the lanes through shuffles (at stride s, lane l with l % 2s == 0 adds lane
// l + s's sum to its own: the CPU's tree); kChunkWarps chunks a block.
constexpr int kChunkWarps = 8;
static_assert(kernels::kSquaresLanes == 32, "a chunk's lanes are a warp");

template <class T>
__device__ double chunk_sum_of_squares(const T* x, int64_t n, unsigned lane) {
  double acc = 0.0;
  for (int64_t i = lane; i < n; i += 32) {
    const double v = static_cast<double>(x[i]);
    acc = acc + v * v;
  }
  for (unsigned stride = 1; stride < 32; stride *= 2) {
    const double other = __shfl_down_sync(0xffffffffu, acc, stride);
    if (lane % (2 * stride) == 0) acc = acc + other;
  }
  return acc;
}

// out[first_out[k] + c] = the sum of squares of chunk c of tensor k
__global__ void sum_squares_chunks_kernel(ClipGroup group, double* out) {
  const int k = group.member(blockIdx.x);
  const unsigned lane = threadIdx.x % 32;
  const int64_t chunk = (blockIdx.x - group.first_block[k]) * int64_t{kChunkWarps} + threadIdx.x / 32;
  const int64_t begin = chunk * kernels::kSquaresChunk, n = group.n[k];
  if (begin >= n) return;  // the whole warp: its chunk is past the tensor
  const int64_t m = n - begin < kernels::kSquaresChunk ? n - begin : kernels::kSquaresChunk;
  const double sum = group.f64[k] ? chunk_sum_of_squares(static_cast<const double*>(group.x[k]) + begin, m, lane)
                                  : chunk_sum_of_squares(static_cast<const float*>(group.x[k]) + begin, m, lane);
  if (lane == 0) out[group.first_out[k] + chunk] = sum;
}

// x (n,) = x * s for every tensor of the group, s rounded to its dtype (scale_kernel's product)
template <class T>
__device__ void scale_in_place(T* x, T s, int64_t n, int64_t begin, int64_t stride) {
  for (int64_t i = begin; i < n; i += stride) x[i] = x[i] * s;
}
// factor: null, or a device scalar that replaces s32 and s64 (scale_many_by)
__global__ void scale_many_kernel(ClipGroup group, float s32, double s64, const double* factor) {
  if (factor) {
    s64 = *factor;
    s32 = static_cast<float>(s64);
  }
  const int k = group.member(blockIdx.x);
  const int64_t begin = (blockIdx.x - group.first_block[k]) * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{group.first_block[k + 1] - group.first_block[k]} * blockDim.x;
  if (group.f64[k]) scale_in_place(static_cast<double*>(group.x[k]), s64, group.n[k], begin, stride);
  else scale_in_place(static_cast<float*>(group.x[k]), s32, group.n[k], begin, stride);
}

// ----------------------------------------------------------------------------
// kernel launchers

void sgd_step(Tensor& param, const Tensor& grad, double lr) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_float("sgd", param.dtype(), [&]<class T>() {
    sgd_kernel<<<blocks_for(n), kBlock, 0, stream_for(param)>>>(mdata<T>(param), cdata<T>(grad), static_cast<T>(lr), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void adamw_step_many(const std::vector<kernels::AdamWSlot>& slots, const AdamWScalars& s) {
  const float decay = kernels::adamw_decay(s);  // as the CPU computes them: fp32, one rounding each
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  AdamWGroup group{};
  auto launch = [&] {
    if (group.count == 0) return;
    launch_chained(adamw_kernel, group.first_block[group.count], kBlock, stream_for(*slots[0].param), group, decay,
                   s.beta1, one_minus_b1, s.beta2, one_minus_b2, s.step_size, s.bc2_sqrt, s.eps, s.device_step_scalars,
                   s.grad_scale.defined() ? cdata<double>(s.grad_scale) : nullptr);
    TG_CUDA_CHECK_LAUNCH();
    group = AdamWGroup{};
  };
  for (const kernels::AdamWSlot& slot : slots) {
    if (slot.param->dtype() != DType::f32)
      throw Error(std::string("[adamw] no CUDA kernel for ") + dtype_name(slot.param->dtype()) + " (f32 only)");
    const int64_t n = slot.param->numel();
    if (n == 0) continue;
    const int k = group.count++;
    group.w[k] = mdata<float>(*slot.param);
    group.g[k] = cdata<float>(*slot.grad);
    group.m[k] = mdata<float>(*slot.m);
    group.v[k] = mdata<float>(*slot.v);
    group.copy[k] = slot.copy ? mdata<kernels::bf16>(*slot.copy) : nullptr;
    group.n[k] = n;
    group.first_block[k + 1] = group.first_block[k] + blocks_for(n);
    if (group.count == kAdamWGroup) launch();
  }
  launch();
}

void sgd_momentum_step(Tensor& param, const Tensor& grad, Tensor& buf, const kernels::SGDScalars& s) {
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_float("sgd", param.dtype(), [&]<class T>() {
    const kernels::SGDElement<T> e = kernels::SGDElement<T>::of(s);
    sgd_momentum_kernel<<<blocks_for(n), kBlock, 0, stream_for(param)>>>(
        mdata<T>(param), cdata<T>(grad), e.use_momentum ? mdata<T>(buf) : nullptr, e, n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

namespace {

// true for f64, false for f32, else dispatch_float's error naming op
bool is_f64(const char* op, DType t) {
  bool f64 = false;
  dispatch_float(op, t, [&]<class T>() { f64 = std::is_same_v<T, double>; });
  return f64;
}

}  // namespace

void sum_squares_chunks(const std::vector<const Tensor*>& xs, Tensor& out) {
  const cudaStream_t stream = stream_for(out);
  ClipGroup group{};
  auto launch = [&] {
    sum_squares_chunks_kernel<<<group.blocks(), 32 * kChunkWarps, 0, stream>>>(group, mdata<double>(out));
    TG_CUDA_CHECK_LAUNCH();
    group = ClipGroup{};
  };
  int64_t at = 0;
  for (const Tensor* x : xs) {
    const int64_t n = x->numel(), chunks = kernels::sum_squares_chunk_count(n);
    if (n == 0) continue;
    const auto blocks = static_cast<unsigned>((chunks + kChunkWarps - 1) / kChunkWarps);
    if (group.add(x->raw_data(), n, is_f64("sum_squares_chunks", x->dtype()), at, blocks)) launch();
    at += chunks;
  }
  if (group.count > 0) launch();
}

namespace {

// norm = sqrt(sumsq), factor = max_norm / (norm + 1e-6) below 1 (or NaN), else 1: one thread
__global__ void clip_factor_kernel(const double* sumsq, double max_norm, double* norm, double* factor) {
  const double total = sqrt(*sumsq), coefficient = max_norm / (total + 1e-6);
  *norm = total;
  *factor = coefficient >= 1.0 ? 1.0 : coefficient;
}

}  // namespace

void clip_factor(const Tensor& sumsq, double max_norm, Tensor& norm, Tensor& factor) {
  clip_factor_kernel<<<1, 1, 0, stream_for(sumsq)>>>(cdata<double>(sumsq), max_norm, mdata<double>(norm),
                                                     mdata<double>(factor));
  TG_CUDA_CHECK_LAUNCH();
}

namespace {

void scale_many_with(const std::vector<Tensor*>& xs, double s, const double* factor) {
  ClipGroup group{};
  cudaStream_t stream = nullptr;
  auto launch = [&] {
    scale_many_kernel<<<group.blocks(), kBlock, 0, stream>>>(group, static_cast<float>(s), s, factor);
    TG_CUDA_CHECK_LAUNCH();
    group = ClipGroup{};
  };
  for (Tensor* x : xs) {
    const int64_t n = x->numel();
    if (n == 0) continue;
    stream = stream_for(*x);
    if (group.add(x->raw_data(), n, is_f64("scale_many", x->dtype()), 0, blocks_for(n))) launch();
  }
  if (group.count > 0) launch();
}

}  // namespace

void scale_many(const std::vector<Tensor*>& xs, double s) { scale_many_with(xs, s, nullptr); }
void scale_many_by(const std::vector<Tensor*>& xs, const Tensor& factor) {
  scale_many_with(xs, 0.0, cdata<double>(factor));
}

}  // namespace tapegrad::cuda
