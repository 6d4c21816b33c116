// CPU row kernels: gather and its scatter backward, softmax, cross-entropy.
//
// Note [cross-entropy arithmetic]
// f64 follows the tiny step's reference exactly: p = exp(v - max) / fsum(exp(row - max)) and
// loss = -log(p[t]), so its trace matches byte for byte. f32 (bob) computes the loss as
// spec/bob.md writes it, logsumexp(row) - row[t], accumulating the exponentials in double: it
// stays finite where p[t] would underflow to 0. Both give dlogits = ((p - onehot) / B) * g.
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/dispatch.hpp"
#include "ops/cpu/exact_sum.hpp"

namespace tapegrad::cpu {

namespace {

template <class I>
int64_t checked_index(const char* op, const I* ids, int64_t i, int64_t rows, const Shape& table_shape) {
  int64_t r = static_cast<int64_t>(ids[i]);
  if (r < 0 || r >= rows)
    throw Error(std::string("[") + op + "] index " + std::to_string(r) + " at position " + std::to_string(i) +
                " is out of range for a table of " + std::to_string(rows) + " rows (shape " + table_shape.str() + ")");
  return r;
}

// Softmax of one row of m values; returns the row's max and the sum of exponentials.
template <class T>
void softmax_row(const T* x, T* y, int64_t m, double* top_out, double* total_out) {
  T top = x[0];
  for (int64_t j = 1; j < m; ++j) top = x[j] > top ? x[j] : top;
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t j = 0; j < m; ++j) y[j] = std::exp(x[j] - top);
    double total = exact_sum(y, static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j) y[j] = y[j] / total;
    *total_out = total;
  } else {
    double total = 0.0;
    for (int64_t j = 0; j < m; ++j) {
      y[j] = std::exp(x[j] - top);
      total += y[j];
    }
    for (int64_t j = 0; j < m; ++j) y[j] = static_cast<T>(y[j] / total);
    *total_out = total;
  }
  *top_out = top;
}

}  // namespace

void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t rows = table.dim(0), d = table.dim(1), b = ids.numel();
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(table.dtype());
  dispatch_index("gather", ids.dtype(), [&]<class I>() {
    const I* id = static_cast<const I*>(ids.raw_data());
    const char* src = static_cast<const char*>(table.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t i = 0; i < b; ++i) {
      int64_t r = checked_index("gather", id, i, rows, table.shape());
      std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(r) * row_bytes, row_bytes);
    }
  });
}

void scatter_rows(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite) {
  const int64_t nrows = dst.dim(0), d = dst.dim(1), b = ids.numel();
  dispatch_float("gather_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("gather_backward", ids.dtype(), [&]<class I>() {
      const I* id = static_cast<const I*>(ids.raw_data());
      const T* src = static_cast<const T*>(rows.raw_data());
      T* out = static_cast<T*>(dst.raw_data());
      for (int64_t i = 0; i < b; ++i) {  // in index order: deterministic, and the last write wins
        int64_t r = checked_index("gather_backward", id, i, nrows, dst.shape());
        T* o = out + r * d;
        const T* s = src + i * d;
        if (overwrite) std::memcpy(o, s, static_cast<size_t>(d) * sizeof(T));
        else for (int64_t j = 0; j < d; ++j) o[j] = o[j] + s[j];
      }
    });
  });
}

void softmax_rows(const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0), m = x.dim(1);
  dispatch_float("softmax", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* Y = static_cast<T*>(y.raw_data());
    double top, total;
    for (int64_t i = 0; i < n; ++i) softmax_row(X + i * m, Y + i * m, m, &top, &total);
  });
}

void softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = y.dim(0), m = y.dim(1);
  dispatch_float("softmax_backward", y.dtype(), [&]<class T>() {
    const T* Y = static_cast<const T*>(y.raw_data());
    const T* dY = static_cast<const T*>(dy.raw_data());
    T* dX = static_cast<T*>(dx.raw_data());
    std::vector<T> prod(static_cast<size_t>(m));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) prod[static_cast<size_t>(j)] = dY[i * m + j] * Y[i * m + j];
      double dot;
      if constexpr (std::is_same_v<T, double>) dot = exact_sum(prod.data(), prod.size());
      else { dot = 0.0; for (T p : prod) dot += p; }
      for (int64_t j = 0; j < m; ++j) dX[i * m + j] = Y[i * m + j] * (dY[i * m + j] - static_cast<T>(dot));
    }
  });
}

void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses) {
  const int64_t b = logits.dim(0), v = logits.dim(1);
  dispatch_float("cross_entropy", logits.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      const T* X = static_cast<const T*>(logits.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      T* P = static_cast<T*>(probs.raw_data());
      T* L = static_cast<T*>(losses.raw_data());
      for (int64_t i = 0; i < b; ++i) {
        int64_t ti = static_cast<int64_t>(t[i]);
        if (ti < 0 || ti >= v)
          throw Error("[cross_entropy] target " + std::to_string(ti) + " at position " + std::to_string(i) +
                      " is out of range for " + std::to_string(v) + " classes (logits " + logits.shape().str() + ")");
        double top, total;
        softmax_row(X + i * v, P + i * v, v, &top, &total);
        if constexpr (std::is_same_v<T, double>) L[i] = -std::log(P[i * v + ti]);
        else L[i] = static_cast<T>(std::log(total) + top - static_cast<double>(X[i * v + ti]));
      }
    });
  });
}

void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits) {
  const int64_t b = probs.dim(0), v = probs.dim(1);
  const bool per_row = dloss.numel() != 1;
  dispatch_float("cross_entropy_backward", probs.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy_backward", targets.dtype(), [&]<class I>() {
      const T* P = static_cast<const T*>(probs.raw_data());
      const I* t = static_cast<const I*>(targets.raw_data());
      const T* g = static_cast<const T*>(dloss.raw_data());
      T* D = static_cast<T*>(dlogits.raw_data());
      const T div = static_cast<T>(divisor);
      for (int64_t i = 0; i < b; ++i) {
        const T gi = per_row ? g[i] : g[0];
        for (int64_t j = 0; j < v; ++j) {
          const T onehot = j == static_cast<int64_t>(t[i]) ? T(1) : T(0);
          D[i * v + j] = ((P[i * v + j] - onehot) / div) * gi;
        }
      }
    });
  });
}

}  // namespace tapegrad::cpu
