// CPU matrix kernels and reductions. Matrix products go through OpenBLAS (Note [BLAS threads]);
// matmul_fsum's products and the other f64 sums are correctly rounded (exact_sum, like math.fsum);
// f32 sums accumulate in double in index order and round once. Large ones split over the
// intra-op threads by output rows or columns (parallel_for): each output element's sum stays whole,
// in its order, on one thread, so the bits do not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/matmul_plan.hpp"

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

// Note [BLAS threads]
// OpenBLAS runs single-threaded (set before every product, in case a program changed it), and a
// product's parallelism is tapegrad's own: the kernel cuts each GEMM of its plan into tiles of
// out's rows and columns, and parallel_for deals the tiles, with the batch's matrices, to the
// intra-op threads, one BLAS call each. Two pools on the same cores would take turns: tapegrad's
// workers spin for a while after a loop and OpenBLAS's after a call (sched_yield), so each
// product or kernel following the other would share its cores with spinning threads; with one
// pool, set_num_threads and TAPEGRAD_NUM_THREADS govern every kernel, products included. And the
// results must not depend on the thread count (parallel.hpp's rule): OpenBLAS's own threads give
// other bits than one thread for most shapes (its threaded driver cuts the work by the count), and
// its small-matrix kernels are chosen by a call's sizes. So the tiles depend on the product's
// shape alone, each tile is the same BLAS call whichever thread runs it, and a product gives the
// same bits with 1 thread or 64. The cost is a tile's packing of its own panels of a and b: tiles
// are at least 128 rows (512 where b's panel is large) by the whole of m up to 1024 columns, and
// products below 2^22 multiply-adds are one tile (docs/perf-cpu.md, "CPU matrix products", has what
// it costs against OpenBLAS's own threads).

namespace {

void keep_blas_single_threaded() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// out (rows, cols) = op(a) @ op(b) (+ out when accumulate), a GEMM of plan p cut to one tile: the
// pointers are the tile's corners, the row lengths the plan's.
template <class T>
void gemm(const kernels::MatmulPlan& p, int64_t rows, int64_t cols, const T* a, const T* b, T* out, bool accumulate) {
  const CBLAS_TRANSPOSE ta = p.ta ? CblasTrans : CblasNoTrans, tb = p.tb ? CblasTrans : CblasNoTrans;
  const int n = static_cast<int>(rows), m = static_cast<int>(cols), k = static_cast<int>(p.k);
  const int lda = static_cast<int>(p.lda), ldb = static_cast<int>(p.ldb), ldo = static_cast<int>(p.m);
  if constexpr (std::is_same_v<T, double>)
    cblas_dgemm(CblasRowMajor, ta, tb, n, m, k, 1.0, a, lda, b, ldb, accumulate ? 1.0 : 0.0, out, ldo);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, n, m, k, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, out, ldo);
}

// How one GEMM of a plan is cut into tiles of out: from its shape alone (Note [BLAS threads]).
struct Tiling {
  int64_t rows, cols, row_tiles, col_tiles;
  int64_t count() const { return row_tiles * col_tiles; }
};

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

Tiling tiling_of(const kernels::MatmulPlan& p, int64_t element_bytes) {
  constexpr int64_t kTileCols = 1024;
  const double macs = static_cast<double>(p.n) * static_cast<double>(p.m) * static_cast<double>(p.k);
  if (macs < 4194304.0) return {p.n, p.m, 1, 1};
  // columns: blocks of up to 1024. Rows: every tile packs its own panel of b (k x its columns), so
  // tiles take 512 rows where that panel passes 1 MiB (about half a core's L2), else 256; below
  // twice that, two tiles from 256 rows on (128 rows at least).
  const int64_t want_cols = (p.m + kTileCols - 1) / kTileCols;
  const int64_t cols = round_up((p.m + want_cols - 1) / want_cols, 16);
  const bool big_panel = static_cast<double>(p.k) * static_cast<double>(std::min(cols, p.m)) *
                             static_cast<double>(element_bytes) > 1048576.0;
  const int64_t tile_rows = big_panel ? 512 : 256;
  const int64_t want_rows = p.n < 256 ? 1 : p.n < 2 * tile_rows ? 2 : (p.n + tile_rows - 1) / tile_rows;
  const int64_t rows = round_up((p.n + want_rows - 1) / want_rows, 16);
  return {rows, cols, (p.n + rows - 1) / rows, (p.m + cols - 1) / cols};
}

struct Offsets {
  int64_t a = 0, b = 0, out = 0;
};

// The batch axes of a plan that out keeps (its matrices) or sums over.
struct Axes {
  std::array<size_t, kernels::MatmulPlan::kMaxBatch> axis{};
  int count = 0;
  int64_t products = 1;
};

// Where the GEMM at flat index i of `axes` (outermost first, row-major) starts in a, b and out.
Offsets offsets_at(const kernels::MatmulPlan& p, const Axes& axes, int64_t i) {
  Offsets o;
  for (int j = axes.count - 1; j >= 0; --j) {
    const size_t ax = axes.axis[static_cast<size_t>(j)];
    const int64_t at = i % p.size[ax];
    i /= p.size[ax];
    o.a += at * p.stride_a[ax];
    o.b += at * p.stride_b[ax];
    o.out += at * p.stride_out[ax];
  }
  return o;
}

}  // namespace

void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, bool accumulate) {
  const kernels::MatmulPlan p = kernels::plan_matmul("matmul", a, ta, b, tb, out);
  if (p.empty()) return;
  if (a.dtype() == DType::bf16) {  // bf16 operands into f32: their f32 widenings' product (exact products)
    Tensor wa = Tensor::empty(a.shape(), DType::f32, a.device()), wb = Tensor::empty(b.shape(), DType::f32, b.device());
    cast(a, wa);
    cast(b, wb);
    if (out.dtype() == DType::f32) return matmul(wa, ta, wb, tb, out, accumulate);
    Tensor wide = Tensor::empty(out.shape(), DType::f32, out.device());  // into bf16: the f32 result, rounded once
    if (accumulate) cast(out, wide);
    matmul(wa, ta, wb, tb, wide, accumulate);
    cast(wide, out);
    return;
  }
  if (p.k == 0 || p.products() == 0) {  // empty sums: zeros (nothing to add)
    if (!accumulate) std::memset(out.raw_data(), 0, out.nbytes());
    return;
  }
  keep_blas_single_threaded();
  Axes kept, summed;
  for (int i = 0; i < p.batch; ++i) {
    Axes& axes = p.stride_out[static_cast<size_t>(i)] != 0 ? kept : summed;
    axes.axis[static_cast<size_t>(axes.count++)] = static_cast<size_t>(i);
    axes.products *= p.size[static_cast<size_t>(i)];
  }
  const Tiling tiles = tiling_of(p, static_cast<int64_t>(dtype_size(a.dtype())));
  // Items: (out matrix, tile) pairs, each summing its products over `summed` in order. About 2^18
  // multiply-adds a chunk, from 2^20 in all.
  const int64_t items = kept.products * tiles.count();
  const double item_macs = static_cast<double>(tiles.rows) * static_cast<double>(tiles.cols) *
                           static_cast<double>(p.k) * static_cast<double>(summed.products);
  const int64_t chunk = item_macs * static_cast<double>(items) < 1048576.0
                            ? items
                            : std::max<int64_t>(1, static_cast<int64_t>(262144.0 / item_macs));
  dispatch_float("matmul", a.dtype(), [&]<class T>() {
    const T* A = static_cast<const T*>(a.raw_data());
    const T* B = static_cast<const T*>(b.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    parallel_for(items, chunk, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const Offsets matrix = offsets_at(p, kept, item / tiles.count());
        const int64_t tile = item % tiles.count();
        const int64_t r0 = tile / tiles.col_tiles * tiles.rows, c0 = tile % tiles.col_tiles * tiles.cols;
        const int64_t rows = std::min(tiles.rows, p.n - r0), cols = std::min(tiles.cols, p.m - c0);
        for (int64_t s = 0; s < summed.products; ++s) {
          const Offsets o = offsets_at(p, summed, s);
          gemm<T>(p, rows, cols, A + matrix.a + o.a + (p.ta ? r0 : r0 * p.lda),
                  B + matrix.b + o.b + (p.tb ? c0 * p.ldb : c0), O + matrix.out + r0 * p.m + c0,
                  s > 0 || accumulate);
        }
      }
    });
  });
}

void matmul_fsum(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out) {
  // out (n, m) = op(a) (n, k) @ op(b) (k, m); a is stored (n, k) or, transposed, (k, n).
  const int64_t n = out.dim(0), m = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  const int64_t lda = a.dim(1), ldb = b.dim(1);
  const double* A = static_cast<const double*>(a.raw_data());
  const double* B = static_cast<const double*>(b.raw_data());
  double* O = static_cast<double*>(out.raw_data());
  auto at = [&](int64_t i, int64_t p) { return ta ? A[p * lda + i] : A[i * lda + p]; };
  auto bt = [&](int64_t p, int64_t j) { return tb ? B[j * ldb + p] : B[p * ldb + j]; };
  // Output rows split over the threads: about 16K multiply-adds a chunk, from 64K in all.
  const int64_t row_work = std::max<int64_t>(1, m * k);
  const int64_t rows = n * row_work < 65536 ? n : std::max<int64_t>(1, 16384 / row_work);
  parallel_for(n, rows, [&](int64_t begin, int64_t end) {
    // Each cell: the products rounded to double, then one correctly rounded sum (the reference's
    // math.fsum(a[i][p] * b[p][j] for p in range(k))).
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
      if constexpr (std::is_same_v<T, double>) {
        for (int64_t j = begin; j < end; ++j) O[j] = row_sum(X + j, static_cast<size_t>(n), static_cast<size_t>(m));
      } else {
        // row_sum's order (rows in order, in double) for up to 256 columns at a time, reading the
        // rows' runs of them rather than one column down the rows: the same bits, in cache order
        constexpr int64_t kColumns = 256;
        double acc[kColumns];
        for (int64_t j0 = begin; j0 < end; j0 += kColumns) {
          const int64_t width = std::min(kColumns, end - j0);
          std::fill(acc, acc + width, 0.0);
          for (int64_t i = 0; i < n; ++i) {
            const T* row = X + i * m + j0;
            for (int64_t j = 0; j < width; ++j) acc[j] += static_cast<double>(row[j]);
          }
          for (int64_t j = 0; j < width; ++j) O[j0 + j] = static_cast<T>(acc[j]);
        }
      }
    });
  });
}

namespace {

// The double sum of x[0..n) in 16 running sums, element j into sum j % 16, then those 16 left to
// right: the same additions on every CPU path and thread count (one thread), and no chain of n
// dependent additions (ops::sum's f32 forward).
double sum_in_lanes(const float* x, size_t n) {
  constexpr size_t kLanes = 16;
  double acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k) acc[k] += static_cast<double>(x[i + k]);
  for (size_t k = 0; i + k < n; ++k) acc[k] += static_cast<double>(x[i + k]);
  double total = 0.0;
  for (double a : acc) total += a;
  return total;
}

}  // namespace

// f64: exact (row_sum); f32: sum_in_lanes of each block of 2^16 elements (the blocks over the
// threads, one range of them each; their bounds depend on n alone), the blocks' sums then added in
// order. (mean_all keeps
// row_sum's left-to-right f32 order: the losses bob reports go through it.)
void sum_all(const Tensor& x, Tensor& out) {
  dispatch_float("sum", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    const int64_t n = x.numel();
    if constexpr (std::is_same_v<T, float>) {
      constexpr int64_t kBlock = int64_t{1} << 16;
      const int64_t blocks = (n + kBlock - 1) / kBlock;
      std::vector<double> partial(static_cast<size_t>(blocks));
      parallel_for(blocks, range_per_thread(blocks, 1), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b)
          partial[static_cast<size_t>(b)] =
              sum_in_lanes(X + b * kBlock, static_cast<size_t>(std::min(kBlock, n - b * kBlock)));
      });
      double total = 0.0;
      for (double p : partial) total += p;
      *static_cast<T*>(out.raw_data()) = static_cast<float>(total);
    } else {
      *static_cast<T*>(out.raw_data()) = row_sum(X, static_cast<size_t>(n), 1);
    }
  });
}

void mean_all(const Tensor& x, Tensor& out) {
  dispatch_float("mean", x.dtype(), [&]<class T>() {
    T s = row_sum(static_cast<const T*>(x.raw_data()), static_cast<size_t>(x.numel()), 1);
    *static_cast<T*>(out.raw_data()) = s / static_cast<T>(x.numel());
  });
}

}  // namespace tapegrad::cpu
