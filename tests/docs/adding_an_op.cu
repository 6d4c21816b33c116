// docs/adding-an-op.md's functor, compiled for the device as the page shows it: a kernel that
// loads what the functor's backward reads, as src/cuda/elementwise.cu's does. Built, not run: a
// CUDA build fails here if the page's example stops compiling with nvcc.
#include "tapegrad/kernels/unary_ops.hpp"

namespace tapegrad::kernels {
#include "adding_an_op_functor.inc"
}  // namespace tapegrad::kernels

namespace docs_example {
template <class F, class T>
__global__ void unary_backward(const T* x, const T* y, const T* dy, T* dx, long n) {
  const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const T read = F::backward_reads_y ? y[i] : x[i];
  dx[i] = F::backward_reads_y ? F::backward(T(0), read, dy[i]) : F::backward(read, F::forward(read), dy[i]);
}
}  // namespace docs_example

template __global__ void docs_example::unary_backward<tapegrad::kernels::Softsign, float>(const float*, const float*, const float*,
                                                                             float*, long);
template __global__ void docs_example::unary_backward<tapegrad::kernels::Softsign, double>(const double*, const double*,
                                                                              const double*, double*, long);
