// CUDA elementwise kernels: fill, unary ops and their backward, binary ops, scale.
//
// Rule: element i is computed from elements i only, the unary ops by the very functor the CPU
// loop runs (src/kernels/unary_ops.hpp), so an output may alias an input and the results equal
// the CPU's bit for bit, except where a functor calls f32 exp/log/tanh or f64 tanh, which are
// CUDA's own functions (within a few ulp), and f64 exp and log, correctly rounded here and the C
// library's on the CPU (Note [exp and log on each device]).
#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/kernels/unary_ops.hpp"

namespace tapegrad::cuda {

// ----------------------------------------------------------------------------
// CUDA kernels

// out (n,) = value
template <class T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  chain_start();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = value;
}

// out (n,) = scalar[0] / divisor, in double, rounded once to T
template <class T>
__global__ void fill_from_scalar_kernel(T* out, const T* scalar, double divisor, int64_t n) {
  const T value = static_cast<T>(static_cast<double>(scalar[0]) / divisor);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = value;
}

// y (n,) = F::forward(x): the op's functor (unary_ops.hpp), the CPU loop's expression
template <class F, class T>
__global__ void unary_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = F::forward(x[i]);
}

// dx (n,) = F::backward(x, y, dy), given x and y = f(x)
template <class F, class T>
__global__ void unary_backward_kernel(const T* x, const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dx[i] = F::backward(x[i], y[i], dy[i]);
}

// out (n,) = a op b
template <class T>
__global__ void binary_kernel(Binary op, const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    switch (op) {
      case Binary::add: out[i] = a[i] + b[i]; break;
      case Binary::sub: out[i] = a[i] - b[i]; break;
      case Binary::mul: out[i] = a[i] * b[i]; break;
      case Binary::div: out[i] = a[i] / b[i]; break;
      default: break;
    }
  }
}

// y (n,) = x * s
template <class T>
__global__ void scale_kernel(const T* x, T s, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[i] * s;
}

// ----------------------------------------------------------------------------
// kernel launchers

void fill(Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float("fill", out.dtype(), [&]<class T>() {
    launch_chained(fill_kernel<T>, blocks_for(n), kBlock, stream_for(out), mdata<T>(out), static_cast<T>(value), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float("fill_from_scalar", out.dtype(), [&]<class T>() {
    fill_from_scalar_kernel<<<blocks_for(n), kBlock, 0, stream_for(out)>>>(mdata<T>(out), cdata<T>(scalar), divisor, n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void unary(Unary op, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  kernels::visit_unary(op, [&]<class F>() {
    dispatch_float(F::name, x.dtype(), [&]<class T>() {
      unary_kernel<F, T><<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), mdata<T>(y), n);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  kernels::visit_unary(op, [&]<class F>() {
    dispatch_float(F::name, x.dtype(), [&]<class T>() {
      unary_backward_kernel<F, T><<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), cdata<T>(y), cdata<T>(dy),
                                                                               mdata<T>(dx), n);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

// Equal shapes: add, sub, mul, div over flat ranges; anything else walks (strided.cu).
void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (!(a.shape() == b.shape()) || op > Binary::div) return binary_walk(op, a, b, out);
  const int64_t n = a.numel();
  if (n == 0) return;
  dispatch_float(kernels::binary_name(op), a.dtype(), [&]<class T>() {
    binary_kernel<<<blocks_for(n), kBlock, 0, stream_for(a)>>>(op, cdata<T>(a), cdata<T>(b), mdata<T>(out), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void scale(const Tensor& x, double s, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float("scale", x.dtype(), [&]<class T>() {
    scale_kernel<<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), static_cast<T>(s), mdata<T>(y), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tapegrad::cuda
