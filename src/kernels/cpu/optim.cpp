// CPU kernels of the stateful optimizers and gradient transforms: SGD with momentum, and the sum of
// squares and scaling clip_grad_norm runs (one tensor, or many in turn). The element math is
// optim_ops.hpp's, shared with src/cuda/optim.cu.
//
// Rule: a thread's range of elements (or of lanes) is computed exactly as one thread computes the
// whole loop, so the bits do not depend on the thread count.
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

// Note [sum of squares order] (optim_ops.hpp): lanes in double, then a pairwise tree. A thread
// takes a range of lanes and walks the rows of L elements through it, so its partial sums stay in
// cache whatever L is.
void sum_squares(const Tensor& x, Tensor& out, int64_t slot) {
  const int64_t n = x.numel(), lanes = kernels::sum_squares_lanes(n), rows = (n + lanes - 1) / lanes;
  std::vector<double> acc(static_cast<size_t>(lanes), 0.0);
  dispatch_float("sum_squares", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    const int64_t elements = chunk_for(n, sizeof(T));  // a chunk's worth of elements, in lanes
    const int64_t chunk = elements >= n ? lanes : std::max<int64_t>(1, elements / std::max<int64_t>(rows, 1));
    parallel_for(lanes, chunk, [&](int64_t begin, int64_t end) {
      double* a = acc.data();
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = X + r * lanes;
        const int64_t stop = std::min(end, n - r * lanes);  // the last row may be short
        for (int64_t l = begin; l < stop; ++l) {
          const double v = static_cast<double>(row[l]);
          a[l] = a[l] + v * v;
        }
      }
    });
  });
  for (int64_t stride = 1; stride < lanes; stride *= 2)
    for (int64_t l = 0; l < lanes; l += 2 * stride) acc[static_cast<size_t>(l)] += acc[static_cast<size_t>(l + stride)];
  static_cast<double*>(out.raw_data())[slot] = acc[0];
}

// The multi-tensor forms: the single-tensor kernels on each tensor in turn.
void sum_squares_many(const std::vector<const Tensor*>& xs, Tensor& out) {
  for (size_t i = 0; i < xs.size(); ++i) sum_squares(*xs[i], out, static_cast<int64_t>(i));
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
