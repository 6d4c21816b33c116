// CPU log-softmax rows and the library's cross-entropy over them (kernels.hpp, "log-softmax").
//
// Note [log-sum-exp rows]
// Every row is shifted by its largest element before the exponentials: lp = (x - m) - log(s),
// s = sum exp(x - m) accumulated in double, so no exponential overflows and s >= 1 never
// underflows; a loss -lp[t] is then exact to the dtype's precision however far the target logit
// is below the others (logits (0, -745) with target 1 give 745, where -log(softmax) gives inf).
// A row holding NaN or +inf, or all -inf, gives NaN everywhere, as PyTorch's log_softmax does.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>
#include <string>

#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"

namespace tapegrad::cpu {

namespace {

template <class T>
void log_softmax_row(const T* x, T* y, int64_t m) {
  T top = x[0];
  for (int64_t j = 1; j < m; ++j) top = x[j] > top || x[j] != x[j] ? x[j] : top;
  double s = 0.0;
  for (int64_t j = 0; j < m; ++j) s += static_cast<double>(std::exp(x[j] - top));
  const T log_s = static_cast<T>(std::log(s));
  for (int64_t j = 0; j < m; ++j) y[j] = (x[j] - top) - log_s;
}

template <class I>
bool ignored(I t, int64_t ignore_index) { return static_cast<int64_t>(t) == ignore_index; }

}  // namespace

void log_softmax_rows(const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0), m = x.dim(1);
  dispatch_float("log_softmax", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* Y = static_cast<T*>(y.raw_data());
    parallel_for(n, costly_rows_chunk(n, m * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) log_softmax_row(X + i * m, Y + i * m, m);
    });
  });
}

// dx = dy - exp(y) * sum(dy), per row
void log_softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = y.dim(0), m = y.dim(1);
  dispatch_float("log_softmax", y.dtype(), [&]<class T>() {
    const T* Y = static_cast<const T*>(y.raw_data());
    const T* dY = static_cast<const T*>(dy.raw_data());
    T* dX = static_cast<T*>(dx.raw_data());
    parallel_for(n, costly_rows_chunk(n, m * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        double s = 0.0;
        for (int64_t j = 0; j < m; ++j) s += static_cast<double>(dY[i * m + j]);
        const T total = static_cast<T>(s);
        for (int64_t j = 0; j < m; ++j) dX[i * m + j] = dY[i * m + j] - std::exp(Y[i * m + j]) * total;
      }
    });
  });
}

// losses (N,) = -lp[i, t_i], 0 where t_i == ignore_index; count () = the rows not ignored
void nll_rows(const Tensor& lp, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count) {
  const int64_t n = lp.dim(0), v = lp.dim(1);
  dispatch_float("cross_entropy", lp.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      const T* P = static_cast<const T*>(lp.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      T* L = static_cast<T*>(losses.raw_data());
      int64_t valid = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (ignored(t[i], ignore_index)) {
          L[i] = T(0);
          continue;
        }
        const int64_t ti = static_cast<int64_t>(t[i]);
        if (ti < 0 || ti >= v)
          throw Error("[cross_entropy] target " + std::to_string(ti) + " at position " + std::to_string(i) +
                      " is out of range for " + std::to_string(v) + " classes (logits " + lp.shape().str() + ")");
        L[i] = -P[i * v + ti];
        ++valid;
      }
      *static_cast<T*>(count.raw_data()) = static_cast<T>(valid);
    });
  });
}

// losses (N,) = -lp[i, t_i], dz (N, V) = exp(lp) - onehot(t_i) where defined, lp computed as
// log_softmax_row computes it (so the losses are nll_rows' bits, and dz nll_log_softmax_backward's
// with g = 1); 0 and zero rows where ignored; count () = the rows not ignored. bf16 logits are
// widened to f32, the losses f32.
void cross_entropy_rows(const Tensor& z, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count,
                        Tensor& dz) {
  const int64_t n = z.dim(0), v = z.dim(1);
  // Z: the logits' storage; T: the arithmetic's and the losses' dtype (f32 for bf16 logits)
  auto run = [&]<class Z, class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      const Z* ZZ = static_cast<const Z*>(z.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      T* L = static_cast<T*>(losses.raw_data());
      int64_t valid = 0;
      for (int64_t i = 0; i < n; ++i) {  // the targets first: a bad one is refused before any work
        if (ignored(t[i], ignore_index)) continue;
        const int64_t ti = static_cast<int64_t>(t[i]);
        if (ti < 0 || ti >= v)
          throw Error("[cross_entropy] target " + std::to_string(ti) + " at position " + std::to_string(i) +
                      " is out of range for " + std::to_string(v) + " classes (logits " + z.shape().str() + ")");
        ++valid;
      }
      auto rows = [&]<class G>(G* D) {  // D: dz's rows, or nullptr
        parallel_for(n, costly_rows_chunk(n, v * static_cast<int64_t>(sizeof(Z))), [&](int64_t begin, int64_t end) {
          std::vector<T> wide(std::is_same_v<Z, T> ? 0 : static_cast<size_t>(v));
          for (int64_t i = begin; i < end; ++i) {
            const T* x;
            if constexpr (std::is_same_v<Z, T>) {
              x = ZZ + i * v;
            } else {
              for (int64_t j = 0; j < v; ++j) wide[static_cast<size_t>(j)] = kernels::convert<T>(ZZ[i * v + j]);
              x = wide.data();
            }
            G* d = D ? D + i * v : nullptr;
            if (ignored(t[i], ignore_index)) {
              L[i] = T(0);
              if (d) std::fill(d, d + v, kernels::convert<G>(T(0)));
              continue;
            }
            T top = x[0];
            for (int64_t j = 1; j < v; ++j) top = x[j] > top || x[j] != x[j] ? x[j] : top;
            double s = 0.0;
            for (int64_t j = 0; j < v; ++j) s += static_cast<double>(std::exp(x[j] - top));
            const T log_s = static_cast<T>(std::log(s));
            const int64_t ti = static_cast<int64_t>(t[i]);
            L[i] = -((x[ti] - top) - log_s);
            if (!d) continue;
            for (int64_t j = 0; j < v; ++j) {
              const T p = std::exp((x[j] - top) - log_s);
              d[j] = kernels::convert<G>(j == ti ? p - T(1) : p);
            }
          }
        });
      };
      if (!dz.defined()) rows(static_cast<T*>(nullptr));
      else if (dz.dtype() == DType::bf16) rows(static_cast<kernels::bf16*>(dz.raw_data()));
      else rows(static_cast<T*>(dz.raw_data()));
      *static_cast<T*>(count.raw_data()) = static_cast<T>(valid);
    });
  };
  if (z.dtype() == DType::bf16) return run.template operator()<kernels::bf16, float>();
  dispatch_float("cross_entropy", z.dtype(), [&]<class T>() { run.template operator()<T, T>(); });
}

// dlogits (N, V) = g_i * (exp(lp) - onehot(t_i)), 0 rows where t_i == ignore_index (dlogits may be
// lp itself); g = dloss
// (shape ()) / divisor or dloss[i] / divisor (shape (N,)), divisor a () tensor (the count, for a mean) or
// undefined (1)
void nll_log_softmax_backward(const Tensor& lp, const Tensor& targets, int64_t ignore_index, const Tensor& dloss,
                              const Tensor& divisor, Tensor& dlogits) {
  const int64_t n = lp.dim(0), v = lp.dim(1);
  const bool per_row = dloss.numel() != 1;
  dispatch_float("cross_entropy_backward", lp.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy_backward", targets.dtype(), [&]<class I>() {
      const T* P = static_cast<const T*>(lp.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      const T* G = static_cast<const T*>(dloss.raw_data());
      const T div = divisor.defined() ? *static_cast<const T*>(divisor.raw_data()) : T(1);
      T* D = static_cast<T*>(dlogits.raw_data());
      parallel_for(n, costly_rows_chunk(n, v * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          T* d = D + i * v;
          if (ignored(t[i], ignore_index)) {
            for (int64_t j = 0; j < v; ++j) d[j] = T(0);
            continue;
          }
          const T g = (per_row ? G[i] : G[0]) / div;
          const T* p = P + i * v;  // may be d itself: p[ti] is read before the row is written
          const int64_t ti = static_cast<int64_t>(t[i]);
          const T target = (std::exp(p[ti]) - T(1)) * g;
          for (int64_t j = 0; j < v; ++j) d[j] = std::exp(p[j]) * g;
          d[ti] = target;
        }
      });
    });
  });
}

}  // namespace tapegrad::cpu
