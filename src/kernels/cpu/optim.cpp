// CPU kernels of the stateful optimizers and gradient transforms: SGD with momentum, and the sum of
// squares and scaling clip_grad_norm runs (one tensor, or many in turn). The element math is
// optim_ops.hpp's, shared with src/cuda/optim.cu.
//
// Rule: a thread's range of elements (or of lanes) is computed exactly as one thread computes the
// whole loop, so the bits do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"

namespace tapegrad::cpu {

void sgd_momentum_step(Tensor& param, const Tensor& grad, Tensor& buf, const kernels::SGDScalars& s) {
  dispatch_float("sgd", param.dtype(), [&]<class T>() {
    const kernels::SGDElement<T> e = kernels::SGDElement<T>::of(s);
    T* p = static_cast<T*>(param.raw_data());
    const T* g = static_cast<const T*>(grad.raw_data());
    T* b = e.use_momentum ? static_cast<T*>(buf.raw_data()) : nullptr;
    const int64_t n = param.numel();
    parallel_for(n, chunk_for(n, sizeof(T)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) e.update(p[i], g[i], b ? b + i : nullptr);
    });
  });
}

namespace {

// One chunk's sum of squares, n <= kSquaresChunk elements (Note [sum of squares order]).
template <class T>
double chunk_sum_of_squares(const T* x, int64_t n) {
  constexpr int64_t L = kernels::kSquaresLanes;
  double a[L] = {};
  const int64_t rows = n / L;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t l = 0; l < L; ++l) {
      const double v = static_cast<double>(x[r * L + l]);
      a[l] = a[l] + v * v;
    }
  for (int64_t l = 0; l < n - rows * L; ++l) {
    const double v = static_cast<double>(x[rows * L + l]);
    a[l] = a[l] + v * v;
  }
  for (int64_t stride = 1; stride < L; stride *= 2)
    for (int64_t l = 0; l < L; l += 2 * stride) a[l] = a[l] + a[l + stride];
  return a[0];
}

}  // namespace

// Chunks are independent: threads take whole chunks.
void sum_squares_chunks(const std::vector<const Tensor*>& xs, Tensor& out) {
  double* o = static_cast<double*>(out.raw_data());
  for (const Tensor* x : xs) {
    const int64_t n = x->numel(), chunks = kernels::sum_squares_chunk_count(n);
    dispatch_float("sum_squares_chunks", x->dtype(), [&]<class T>() {
      const T* X = static_cast<const T*>(x->raw_data());
      const int64_t per_task = std::max<int64_t>(1, chunk_for(n, sizeof(T), Work::arithmetic) / kernels::kSquaresChunk);
      parallel_for(chunks, per_task, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c)
          o[c] = chunk_sum_of_squares(X + c * kernels::kSquaresChunk, std::min(kernels::kSquaresChunk, n - c * kernels::kSquaresChunk));
      });
    });
    o += chunks;
  }
}

void scale_many(const std::vector<Tensor*>& xs, double s) {
  for (Tensor* x : xs) scale(*x, s, *x);
}

void scale_many_by(const std::vector<Tensor*>& xs, const Tensor& factor) {
  scale_many(xs, *static_cast<const double*>(factor.raw_data()));
}

void clip_factor(const Tensor& sumsq, double max_norm, Tensor& norm, Tensor& factor) {
  const double total = std::sqrt(*static_cast<const double*>(sumsq.raw_data()));
  const double coefficient = max_norm / (total + 1e-6);
  *static_cast<double*>(norm.raw_data()) = total;
  *static_cast<double*>(factor.raw_data()) = coefficient >= 1.0 ? 1.0 : coefficient;  // NaN stays NaN
}

}  // namespace tapegrad::cpu
