// CUDA optimizer updates, in place: SGD and the AdamW of spec/bob.md.
//
// Rule: per element, the CPU kernel's arithmetic in its order (src/ops/cpu/elementwise.cpp),
// rounded after every operation (--fmad=false), with the scalars the CPU derives computed the
// same way on the host; so parameters and moments equal the CPU's bit for bit.
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.hpp"

namespace tapegrad::cuda {

// ----------------------------------------------------------------------------
// CUDA kernels

// param (n,) = param - lr * grad
template <class T>
__global__ void sgd_kernel(T* param, const T* grad, T lr, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    param[i] = param[i] - lr * grad[i];
}

// w, m, v (n,) updated from g (n,), fp32, left to right as spec/bob.md writes it:
//   w = w * (1 - lr*wd);  m = b1*m + (1 - b1)*g;  v = b2*v + (1 - b2)*g*g
//   w = w - step_size * (m / (sqrt(v) / bc2_sqrt + eps))
__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, int64_t n, float decay, float beta1,
                             float one_minus_b1, float beta2, float one_minus_b2, float step_size, float bc2_sqrt,
                             float eps) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float wi = w[i] * decay;
    const float mi = beta1 * m[i] + one_minus_b1 * g[i];
    const float vi = beta2 * v[i] + one_minus_b2 * g[i] * g[i];
    wi = wi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
  }
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

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s) {
  if (param.dtype() != DType::f32)
    throw Error(std::string("[adamw] no CUDA kernel for ") + dtype_name(param.dtype()) + " (f32 only)");
  const int64_t n = param.numel();
  if (n == 0) return;
  const float decay = 1.0f - s.lr * s.weight_decay;  // as the CPU computes them: fp32, one rounding each
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  adamw_kernel<<<blocks_for(n), kBlock, 0, stream_for(param)>>>(
      mdata<float>(param), cdata<float>(grad), mdata<float>(m), mdata<float>(v), n, decay, s.beta1, one_minus_b1,
      s.beta2, one_minus_b2, s.step_size, s.bc2_sqrt, s.eps);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tapegrad::cuda
