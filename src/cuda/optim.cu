// CUDA optimizer updates, in place: SGD, SGD with momentum, the AdamW of docs/bob.md, "Learner"
// (one launch for up to 16 parameters), and the sum of squares clip_grad_norm reads.
//
// Rule: per element, the CPU kernel's arithmetic in its order (src/kernels/cpu/elementwise.cpp),
// rounded after every operation (--fmad=false), with the scalars the CPU derives computed the
// same way on the host; so parameters and moments equal the CPU's bit for bit.
#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"

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
  int64_t n[kAdamWGroup];
  unsigned first_block[kAdamWGroup + 1];
  int count;
};

// For each parameter of the group, w, m, v (n,) updated from g (n,), fp32, left to right as
// docs/bob.md ("Learner") writes it:
//   w = w * (1 - lr*wd);  m = b1*m + (1 - b1)*g;  v = b2*v + (1 - b2)*g*g
//   w = w - step_size * (m / (sqrt(v) / bc2_sqrt + eps))
// step_scalars, when not null, holds (step_size, bc2_sqrt) in device memory (a captured graph's update).
__global__ void adamw_kernel(AdamWGroup group, float decay, float beta1, float one_minus_b1, float beta2,
                             float one_minus_b2, float step_size, float bc2_sqrt, float eps,
                             const float* step_scalars) {
  chain_start();
  if (step_scalars) {
    step_size = step_scalars[0];
    bc2_sqrt = step_scalars[1];
  }
  int k = 0;
  while (k + 1 < group.count && blockIdx.x >= group.first_block[k + 1]) ++k;
  float* w = group.w[k];
  const float* g = group.g[k];
  float* m = group.m[k];
  float* v = group.v[k];
  const int64_t n = group.n[k];
  const int64_t stride = int64_t{group.first_block[k + 1] - group.first_block[k]} * blockDim.x;
  for (int64_t i = (blockIdx.x - group.first_block[k]) * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    float wi = w[i] * decay;
    const float mi = beta1 * m[i] + one_minus_b1 * g[i];
    const float vi = beta2 * v[i] + one_minus_b2 * g[i] * g[i];
    wi = wi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
  }
}

// torch.optim.SGD's update, SGDElement's math (optim_ops.hpp): p, g, buf (n,); buf only with momentum
template <class T>
__global__ void sgd_momentum_kernel(T* param, const T* grad, T* buf, kernels::SGDElement<T> e, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    e.update(param[i], grad[i], buf ? buf + i : nullptr);
}

// Note [sum of squares order] (optim_ops.hpp). A thread is a lane: it adds the squares of
// x[lane], x[lane + lanes], ... in double; each block of kSquaresBlock lanes then adds its lanes
// pairwise into partials[block]. Threads past `lanes` hold +0.
constexpr int kSquaresBlock = 256;
constexpr int kSquaresPartials = 1024;  // sum_squares_lanes(n) / kSquaresBlock at most

// The pairwise tree over tree[0 .. blockDim.x) (a power of two), left operand first: tree[0] holds the sum.
__device__ inline void pairwise_tree(double* tree) {
  for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
    __syncthreads();
    if (threadIdx.x % (2 * stride) == 0) tree[threadIdx.x] = tree[threadIdx.x] + tree[threadIdx.x + stride];
  }
  __syncthreads();
}

template <class T>
__global__ void sum_squares_lanes_kernel(const T* x, int64_t n, int64_t lanes, double* partials) {
  __shared__ double tree[kSquaresBlock];
  const int64_t lane = blockIdx.x * int64_t{kSquaresBlock} + threadIdx.x;
  double acc = 0.0;
  if (lane < lanes)
    for (int64_t i = lane; i < n; i += lanes) {
      const double v = static_cast<double>(x[i]);
      acc = acc + v * v;
    }
  tree[threadIdx.x] = acc;
  pairwise_tree(tree);
  if (threadIdx.x == 0) partials[blockIdx.x] = tree[0];
}

// out[slot] = the pairwise tree over partials[0 .. count), padded with +0 to kSquaresPartials.
__global__ void sum_squares_partials_kernel(const double* partials, int count, double* out, int64_t slot) {
  __shared__ double tree[kSquaresPartials];
  tree[threadIdx.x] = static_cast<int>(threadIdx.x) < count ? partials[threadIdx.x] : 0.0;
  pairwise_tree(tree);
  if (threadIdx.x == 0) out[slot] = tree[0];
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
  const float decay = 1.0f - s.lr * s.weight_decay;  // as the CPU computes them: fp32, one rounding each
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  AdamWGroup group{};
  auto launch = [&] {
    if (group.count == 0) return;
    launch_chained(adamw_kernel, group.first_block[group.count], kBlock, stream_for(*slots[0].param), group, decay,
                   s.beta1, one_minus_b1, s.beta2, one_minus_b2, s.step_size, s.bc2_sqrt, s.eps, s.device_step_scalars);
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

void sum_squares(const Tensor& x, Tensor& out, int64_t slot) {
  const int64_t n = x.numel(), lanes = kernels::sum_squares_lanes(n);
  const int blocks = static_cast<int>(std::max<int64_t>(1, lanes / kSquaresBlock));
  Tensor partials = Tensor::empty(Shape{blocks}, DType::f64, x.device());
  const cudaStream_t stream = stream_for(x);
  dispatch_float("sum_squares", x.dtype(), [&]<class T>() {
    sum_squares_lanes_kernel<<<blocks, kSquaresBlock, 0, stream>>>(cdata<T>(x), n, lanes, mdata<double>(partials));
    TG_CUDA_CHECK_LAUNCH();
  });
  sum_squares_partials_kernel<<<1, kSquaresPartials, 0, stream>>>(cdata<double>(partials), blocks,
                                                                 mdata<double>(out), slot);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tapegrad::cuda
