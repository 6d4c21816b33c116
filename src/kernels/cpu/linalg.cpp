// CPU matrix kernels and reductions. f64 sums are correctly rounded (exact_sum, like math.fsum);
// f32 sums accumulate in double in index order and round once. Large ones split over the
// intra-op threads by output rows or columns (parallel_for): each output element's sum stays whole,
// in its order, on one thread, so the bits do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"

namespace tapegrad::cpu {

namespace {

// Sum of n values at x[0], x[stride], ...: exact for f64, double-accumulated for f32.
template <class T>
T row_sum(const T* x, size_t n, size_t stride) {
  if constexpr (std::is_same_v<T, double>) {
    return exact_sum(x, n, stride);
  } else {
    double acc = 0.0;
    for (size_t i = 0; i < n; ++i) acc += x[i * stride];
    return static_cast<T>(acc);
  }
}

}  // namespace

void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out) {
  // out (n, m) = op(a) (n, k) @ op(b) (k, m); a is stored (n, k) or, transposed, (k, n).
  const int64_t n = out.dim(0), m = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  const int64_t lda = a.dim(1), ldb = b.dim(1);
  dispatch_float("matmul", a.dtype(), [&]<class T>() {
    const T* A = static_cast<const T*>(a.raw_data());
    const T* B = static_cast<const T*>(b.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    auto at = [&](int64_t i, int64_t p) { return ta ? A[p * lda + i] : A[i * lda + p]; };
    auto bt = [&](int64_t p, int64_t j) { return tb ? B[j * ldb + p] : B[p * ldb + j]; };
    // Output rows split over the threads: about 16K multiply-adds a chunk, from 64K in all.
    const int64_t row_work = std::max<int64_t>(1, m * k);
    const int64_t rows = n * row_work < 65536 ? n : std::max<int64_t>(1, 16384 / row_work);
    parallel_for(n, rows, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, double>) {
        // Each cell: the products rounded to double, then one correctly rounded sum (the
        // reference's math.fsum(a[i][p] * b[p][j] for p in range(k))).
        std::vector<double> heap;
        double stack[64];
        double* prod = stack;
        if (k > 64) {
          heap.resize(static_cast<size_t>(k));
          prod = heap.data();
        }
        for (int64_t i = begin; i < end; ++i)
          for (int64_t j = 0; j < m; ++j) {
            for (int64_t p = 0; p < k; ++p) prod[p] = at(i, p) * bt(p, j);
            O[i * m + j] = exact_sum(prod, static_cast<size_t>(k));
          }
      } else {
        // f32: accumulate in double over p in order, round once (deterministic on every run).
        std::vector<double> acc(static_cast<size_t>(m));
        for (int64_t i = begin; i < end; ++i) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t p = 0; p < k; ++p) {
            const double aip = at(i, p);
            if (!tb) {
              const T* brow = B + p * ldb;
              for (int64_t j = 0; j < m; ++j) acc[static_cast<size_t>(j)] += aip * brow[j];
            } else {
              for (int64_t j = 0; j < m; ++j) acc[static_cast<size_t>(j)] += aip * B[j * ldb + p];
            }
          }
          for (int64_t j = 0; j < m; ++j) O[i * m + j] = static_cast<T>(acc[static_cast<size_t>(j)]);
        }
      }
    });
  });
}

void transpose(const Tensor& x, Tensor& out) {
  const int64_t n = x.dim(0), m = x.dim(1);
  dispatch_float("transpose", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) O[j * n + i] = X[i * m + j];
  });
}

void add_row(const Tensor& x, const Tensor& b, Tensor& out) {
  const int64_t n = x.dim(0), m = x.dim(1);
  dispatch_float("add_row", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    const T* Bv = static_cast<const T*>(b.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    parallel_for(n, chunk_for(n, m * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < m; ++j) O[i * m + j] = X[i * m + j] + Bv[j];
    });
  });
}

void sum_rows(const Tensor& x, Tensor& out) {
  const int64_t n = x.dim(0), m = x.dim(1);
  dispatch_float("sum_rows", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    // columns split over the threads, each column's sum whole on one
    parallel_for(m, chunk_for(m, n * static_cast<int64_t>(sizeof(T)), Work::arithmetic), [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) O[j] = row_sum(X + j, static_cast<size_t>(n), static_cast<size_t>(m));
    });
  });
}

void sum_all(const Tensor& x, Tensor& out) {
  dispatch_float("sum", x.dtype(), [&]<class T>() {
    *static_cast<T*>(out.raw_data()) = row_sum(static_cast<const T*>(x.raw_data()), static_cast<size_t>(x.numel()), 1);
  });
}

void mean_all(const Tensor& x, Tensor& out) {
  dispatch_float("mean", x.dtype(), [&]<class T>() {
    T s = row_sum(static_cast<const T*>(x.raw_data()), static_cast<size_t>(x.numel()), 1);
    *static_cast<T*>(out.raw_data()) = s / static_cast<T>(x.numel());
  });
}

}  // namespace tapegrad::cpu
