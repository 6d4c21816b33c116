// CUDA row kernels: gather and its scatter backward, softmax and its backward, cross-entropy and
// its backward. The CPU versions (src/ops/cpu/rows.cpp) are the reference; Note [cross-entropy
// arithmetic] there says why f64 and f32 compute the loss differently.
//
// Rules:
// - f64 rows: one thread per row, the CPU's arithmetic exactly (cr_exp, ExactSum, cr_log), so
//   probabilities and losses equal the CPU's bit for bit.
// - f32 rows: one warp per row; each lane accumulates its columns in double in order, then a
//   fixed butterfly adds the lanes: deterministic, and off from the CPU only through expf.
// - The gather's backward runs one thread per column, walking the ids in order: no atomics, the
//   CPU's order of additions, so the CPU's bits; a repeated id accumulates (overwrite: last wins).
// - An id or target out of range is recorded (Note [kernel errors] in memory.cu) and its access
//   skipped; the host reports it at the next synchronization.
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.hpp"
#include "cuda/exact_sum.cuh"
#include "ops/cr_math.hpp"

namespace tapegrad::cuda {

// ----------------------------------------------------------------------------
// CUDA kernels

constexpr int kWarp = 32;

// A lane's double, summed over the warp in a fixed order (the same bits on every run).
__device__ inline double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// out (B, d) = table (V, d)[ids (B,)], element by element (E = the element's bytes: any dtype).
template <class E, class I>
__global__ void gather_kernel(const E* table, const I* ids, E* out, int64_t b, int64_t d, int64_t rows,
                              ErrorSite site) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < b * d; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / d, col = e % d;
    const int64_t r = static_cast<int64_t>(ids[i]);
    if (r < 0 || r >= rows) {
      if (col == 0) record_error(site, ErrorKind::index_out_of_range, i, r);
      continue;
    }
    out[e] = table[r * d + col];
  }
}

// dst (V, d)[ids[i]] += rows (B, d)[i] for i = 0..B-1 in order (overwrite: =); one thread per column.
template <class T, class I>
__global__ void scatter_kernel(T* dst, const I* ids, const T* rows, int64_t b, int64_t d, int64_t nrows,
                               bool overwrite, ErrorSite site) {
  for (int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; col < d; col += int64_t{gridDim.x} * blockDim.x) {
    for (int64_t i = 0; i < b; ++i) {
      const int64_t r = static_cast<int64_t>(ids[i]);
      if (r < 0 || r >= nrows) {
        if (col == 0) record_error(site, ErrorKind::index_out_of_range, i, r);
        continue;
      }
      T& o = dst[r * d + col];
      o = overwrite ? rows[i * d + col] : o + rows[i * d + col];
    }
  }
}

// One f64 row of m values: y = exp(x - max) / fsum(exp(x - max)). Returns false when the sum ran
// out of partials.
__device__ inline bool softmax_row_f64(const double* x, double* y, int64_t m) {
  double top = x[0];
  for (int64_t j = 1; j < m; ++j) top = x[j] > top ? x[j] : top;
  ExactSum total;
  for (int64_t j = 0; j < m; ++j) {
    y[j] = cr_exp(x[j] - top);
    total.add(y[j]);
  }
  const double t = total.result();
  for (int64_t j = 0; j < m; ++j) y[j] = y[j] / t;
  return !total.out_of_partials;
}

// One f32 row of m values, by the lanes of a warp; returns (max, sum of exponentials in double).
__device__ inline void softmax_row_f32(const float* x, float* y, int64_t m, float* top_out, double* total_out) {
  const int lane = threadIdx.x % kWarp;
  float top = x[0];
  for (int64_t j = lane; j < m; j += kWarp) top = x[j] > top ? x[j] : top;
  top = warp_max(top);
  double part = 0.0;
  for (int64_t j = lane; j < m; j += kWarp) {
    y[j] = expf(x[j] - top);
    part += y[j];
  }
  const double total = warp_sum(part);
  for (int64_t j = lane; j < m; j += kWarp) y[j] = static_cast<float>(y[j] / total);
  *top_out = top;
  *total_out = total;
}

// y (n, m) = softmax of each row of x, f64: one thread per row.
__global__ void softmax_f64_kernel(const double* x, double* y, int64_t n, int64_t m, ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    if (!softmax_row_f64(x + i * m, y + i * m, m)) record_error(site, ErrorKind::sum_out_of_partials, i, ExactSum::kPartials);
}

// y (n, m) = softmax of each row of x, f32: one warp per row.
__global__ void softmax_f32_kernel(const float* x, float* y, int64_t n, int64_t m) {
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarp;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; i < n; i += warps) {
    float top;
    double total;
    softmax_row_f32(x + i * m, y + i * m, m, &top, &total);
  }
}

// dx (n, m) = y * (dy - sum_j dy*y) per row, f64: one thread per row, the dot correctly rounded.
__global__ void softmax_backward_f64_kernel(const double* y, const double* dy, double* dx, int64_t n, int64_t m,
                                            ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double* Y = y + i * m;
    const double* dY = dy + i * m;
    ExactSum dot;
    for (int64_t j = 0; j < m; ++j) dot.add(dY[j] * Y[j]);
    if (dot.out_of_partials) record_error(site, ErrorKind::sum_out_of_partials, i, ExactSum::kPartials);
    const double d = dot.result();
    for (int64_t j = 0; j < m; ++j) dx[i * m + j] = Y[j] * (dY[j] - d);
  }
}

// The same in f32: one warp per row, the f32 products accumulated in double.
__global__ void softmax_backward_f32_kernel(const float* y, const float* dy, float* dx, int64_t n, int64_t m) {
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; i < n; i += warps) {
    const float* Y = y + i * m;
    const float* dY = dy + i * m;
    double part = 0.0;
    for (int64_t j = lane; j < m; j += kWarp) part += dY[j] * Y[j];
    const float d = static_cast<float>(warp_sum(part));
    for (int64_t j = lane; j < m; j += kWarp) dx[i * m + j] = Y[j] * (dY[j] - d);
  }
}

// probs (B, V) = softmax(logits), losses (B,) = -log(probs[i, t_i]), f64: one thread per row.
template <class I>
__global__ void cross_entropy_f64_kernel(const double* logits, const I* targets, double* probs, double* losses,
                                         int64_t b, int64_t v, ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < b; i += int64_t{gridDim.x} * blockDim.x) {
    if (!softmax_row_f64(logits + i * v, probs + i * v, v))
      record_error(site, ErrorKind::sum_out_of_partials, i, ExactSum::kPartials);
    const int64_t t = static_cast<int64_t>(targets[i]);
    if (t >= 0 && t < v) {
      losses[i] = -cr_log(probs[i * v + t]);
    } else {
      record_error(site, ErrorKind::target_out_of_range, i, t);
      losses[i] = NAN;
    }
  }
}

// probs (B, V) = softmax(logits), losses (B,) = log(sum exp(z - max)) + max - z[t_i], f32: one warp per row.
template <class I>
__global__ void cross_entropy_f32_kernel(const float* logits, const I* targets, float* probs, float* losses, int64_t b,
                                         int64_t v, ErrorSite site) {
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; i < b; i += warps) {
    float top;
    double total;
    softmax_row_f32(logits + i * v, probs + i * v, v, &top, &total);
    if (lane == 0) {
      const int64_t t = static_cast<int64_t>(targets[i]);
      if (t >= 0 && t < v) {
        losses[i] = static_cast<float>(cr_log(total) + top - static_cast<double>(logits[i * v + t]));
      } else {
        record_error(site, ErrorKind::target_out_of_range, i, t);
        losses[i] = NAN;
      }
    }
  }
}

// dlogits (B, V) = ((probs - onehot(t)) / divisor) * g, g = dloss[0] or dloss[i] (per_row).
template <class T, class I>
__global__ void cross_entropy_backward_kernel(const T* probs, const I* targets, const T* dloss, bool per_row, T divisor,
                                              T* dlogits, int64_t b, int64_t v) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < b * v; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / v, j = e % v;
    const T g = per_row ? dloss[i] : dloss[0];
    const T onehot = j == static_cast<int64_t>(targets[i]) ? T(1) : T(0);
    dlogits[e] = ((probs[e] - onehot) / divisor) * g;
  }
}

// ----------------------------------------------------------------------------
// kernel launchers

namespace {

// Blocks of 256 threads holding 8 rows each, for the one-warp-per-row kernels.
unsigned row_blocks(int64_t rows) { return blocks_for(rows * kWarp); }

}  // namespace

void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t rows = table.dim(0), d = table.dim(1), b = ids.numel();
  if (b * d == 0) return;
  DeviceContext& ctx = context(table);
  const ErrorSite site = ctx.error_site("gather", rows, d);
  dispatch_index("gather", ids.dtype(), [&]<class I>() {
    auto launch = [&]<class E>() {
      gather_kernel<<<blocks_for(b * d), kBlock, 0, ctx.stream>>>(cdata<E>(table), cdata<I>(ids), mdata<E>(out), b, d,
                                                                 rows, site);
      TG_CUDA_CHECK_LAUNCH();
    };
    switch (dtype_size(table.dtype())) {  // rows are copied as raw elements, whatever their dtype
      case 8: launch.template operator()<uint64_t>(); break;
      case 4: launch.template operator()<uint32_t>(); break;
      case 2: launch.template operator()<uint16_t>(); break;
      default: TG_CHECK(false, "a dtype of 2, 4 or 8 bytes");
    }
  });
}

void scatter_rows(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite) {
  const int64_t nrows = dst.dim(0), d = dst.dim(1), b = ids.numel();
  if (b * d == 0) return;
  DeviceContext& ctx = context(dst);
  dispatch_float("gather_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("gather_backward", ids.dtype(), [&]<class I>() {
      scatter_kernel<<<blocks_for(d, 128), 128, 0, ctx.stream>>>(mdata<T>(dst), cdata<I>(ids), cdata<T>(rows), b, d,
                                                                nrows, overwrite,
                                                                ctx.error_site("gather_backward", nrows, d));
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void softmax_rows(const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0), m = x.dim(1);
  if (n * m == 0) return;
  DeviceContext& ctx = context(x);
  dispatch_float("softmax", x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      softmax_f64_kernel<<<blocks_for(n, 64), 64, 0, ctx.stream>>>(cdata<double>(x), mdata<double>(y), n, m,
                                                                   ctx.error_site("softmax", 0, 0));
    } else {
      softmax_f32_kernel<<<row_blocks(n), kBlock, 0, ctx.stream>>>(cdata<float>(x), mdata<float>(y), n, m);
    }
    TG_CUDA_CHECK_LAUNCH();
  });
}

void softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = y.dim(0), m = y.dim(1);
  if (n * m == 0) return;
  DeviceContext& ctx = context(y);
  dispatch_float("softmax_backward", y.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      softmax_backward_f64_kernel<<<blocks_for(n, 64), 64, 0, ctx.stream>>>(
          cdata<double>(y), cdata<double>(dy), mdata<double>(dx), n, m, ctx.error_site("softmax_backward", 0, 0));
    } else {
      softmax_backward_f32_kernel<<<row_blocks(n), kBlock, 0, ctx.stream>>>(cdata<float>(y), cdata<float>(dy),
                                                                           mdata<float>(dx), n, m);
    }
    TG_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses) {
  const int64_t b = logits.dim(0), v = logits.dim(1);
  if (b * v == 0) return;
  DeviceContext& ctx = context(logits);
  const ErrorSite site = ctx.error_site("cross_entropy", b, v);
  dispatch_float("cross_entropy", logits.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      if constexpr (std::is_same_v<T, double>) {
        cross_entropy_f64_kernel<<<blocks_for(b, 64), 64, 0, ctx.stream>>>(
            cdata<double>(logits), cdata<I>(targets), mdata<double>(probs), mdata<double>(losses), b, v, site);
      } else {
        cross_entropy_f32_kernel<<<row_blocks(b), kBlock, 0, ctx.stream>>>(
            cdata<float>(logits), cdata<I>(targets), mdata<float>(probs), mdata<float>(losses), b, v, site);
      }
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits) {
  const int64_t b = probs.dim(0), v = probs.dim(1);
  if (b * v == 0) return;
  const bool per_row = dloss.numel() != 1;
  dispatch_float("cross_entropy_backward", probs.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy_backward", targets.dtype(), [&]<class I>() {
      cross_entropy_backward_kernel<<<blocks_for(b * v), kBlock, 0, stream_for(probs)>>>(
          cdata<T>(probs), cdata<I>(targets), cdata<T>(dloss), per_row, static_cast<T>(divisor), mdata<T>(dlogits), b,
          v);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace tapegrad::cuda
