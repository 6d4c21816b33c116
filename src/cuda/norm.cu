// CUDA kernels of layer_norm, rms_norm and dropout. The CPU versions (src/kernels/cpu/norm.cpp)
// are the reference; Note [norm arithmetic] there gives both devices' arithmetic.
//
// Rules:
// - f64 rows: one thread per row, the CPU's expressions with ExactSum, so mean, rstd, y and dx equal
//   the CPU's bit for bit; dweight and dbias are sum_rows (correctly rounded) of dy * xhat and dy.
// - f32 rows: one warp per row; each lane adds its columns (lane, lane + 32, ...) in double in
//   order, then a fixed butterfly adds the lanes: deterministic; off from the CPU only through the
//   order of those sums. dweight and dbias: in the backward's own pass where they fit shared
//   memory (Note [norm backward blocks]), else in a kernel of their own (Note [norm column
//   blocks]); either way blocks of rows sum their columns in fixed orders, then each column's
//   block sums are added in block order, so no atomics.
// - bf16 (autocast, Note [bf16 activations] in src/ops/autocast.hpp): an f32 x may be normalised
//   into a bf16 y (the f32 value rounded once, as a cast after it would), and the backward then
//   reads a bf16 dy (each element widened exactly); x, the statistics, dx and the sums stay f32.
// - dropout: one thread per block of four elements, running the CPU's Philox (philox.hpp): the
//   same mask and the same bits as the CPU.
// - Sums that run out of ExactSum's partials are recorded (Note [kernel errors] in memory.cu).
#include <type_traits>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/cuda/exact_sum.cuh"
#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/kernels/philox.hpp"

namespace tapegrad::cuda {

namespace {

// ----------------------------------------------------------------------------
// CUDA kernels

constexpr int kNormWarp = 32;

// A lane's double summed over the warp by a fixed butterfly (the same bits on every run).
__device__ inline double lanes_sum(double v) {
  for (int offset = kNormWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The arguments every norm kernel takes; x, mean and rstd are (n, m), (n,), (n,). A null pointer
// is an absent tensor (no weight, no bias, no mean for rms_norm, a gradient not wanted). IO is the
// type of y and dy: T, or bf16 for f32 rows under autocast.
template <class T, class IO = T>
struct NormRows {
  const T* x;
  const IO* dy;
  const T* w;
  const T* b;
  IO* y;   // forward
  T* dx;   // backward
  T* mean;
  T* rstd;
  int64_t n, m;
  double eps;
  bool centered;         // layer_norm; else rms_norm
  bool dx_adds = false;  // backward: dx += the row's dx (Note [adding into a gradient] in graph.cpp)
};

template <class T, class IO>
__device__ inline T xhat_of(const NormRows<T, IO>& a, T x, T mean, T rstd) {
  return a.centered ? (x - mean) * rstd : x * rstd;
}

template <class T, class IO>
__device__ inline T affine(const NormRows<T, IO>& a, T v, int64_t j) {
  if (a.w) v = v * a.w[j];
  if (a.b) v = v + a.b[j];
  return v;
}

// Note [the add before a norm]
// A transformer's residual stream is added to and then normalised: sum = a + r, y = norm(sum)
// (kernels::add_norm_rows). Apart, the add writes sum and the norm reads it back from memory; here
// the norm's warp makes its row's sum first (each lane its columns, a + r in f32 with r widened
// exactly, as binary(add) does), writes it, and its later passes read the lane's own writes back,
// from the cache. The sums are those of the add kernel and the rest is the norm kernel's code, so
// the bits are those of the two kernels in turn. RowSum<void> is the plain norm.
template <class R>
struct RowSum {
  const float* a;
  const R* r;
  float* sum;  // = the NormRows' x
};
template <>
struct RowSum<void> {};

// y (n, m) and mean, rstd (n,), f32: one warp per row; with R, its row of x made first as a + r.
template <class IO, class R = void>
__global__ void norm_forward_f32_kernel(NormRows<float, IO> a, RowSum<R> add = {}) {
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kNormWarp;
  const int lane = threadIdx.x % kNormWarp;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kNormWarp; i < a.n; i += warps) {
    if constexpr (!std::is_void_v<R>) {
      const float* u = add.a + i * a.m;
      const R* r = add.r + i * a.m;
      float* s = add.sum + i * a.m;
      for (int64_t j = lane; j < a.m; j += kNormWarp) s[j] = u[j] + kernels::convert<float>(r[j]);
    }
    const float* x = a.x + i * a.m;
    double mean = 0.0;
    if (a.centered) {
      double part = 0.0;
      for (int64_t j = lane; j < a.m; j += kNormWarp) part += static_cast<double>(x[j]);
      mean = lanes_sum(part) / static_cast<double>(a.m);
    }
    double part = 0.0;
    for (int64_t j = lane; j < a.m; j += kNormWarp) {
      const double d = static_cast<double>(x[j]) - mean;
      part += d * d;
    }
    const double var = lanes_sum(part) / static_cast<double>(a.m);
    const float mean_t = static_cast<float>(mean), rstd_t = static_cast<float>(1.0 / sqrt(var + a.eps));
    IO* y = a.y + i * a.m;
    for (int64_t j = lane; j < a.m; j += kNormWarp)
      y[j] = kernels::convert<IO>(affine(a, xhat_of(a, x[j], mean_t, rstd_t), j));
    if (lane == 0) {
      if (a.mean) a.mean[i] = mean_t;
      a.rstd[i] = rstd_t;
    }
  }
}

// The same in f64: one thread per row, correctly rounded sums (the CPU's bits).
__global__ void norm_forward_f64_kernel(NormRows<double> a, ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.n; i += int64_t{gridDim.x} * blockDim.x) {
    const double* x = a.x + i * a.m;
    double mean = 0.0;
    bool out_of_partials = false;
    if (a.centered) {
      ExactSum s;
      for (int64_t j = 0; j < a.m; ++j) s.add(x[j]);
      out_of_partials = s.out_of_partials;
      mean = s.result() / static_cast<double>(a.m);
    }
    ExactSum q;
    for (int64_t j = 0; j < a.m; ++j) {
      const double d = x[j] - mean;
      q.add(d * d);
    }
    if (out_of_partials || q.out_of_partials) record_error(site, ErrorKind::sum_out_of_partials, i, ExactSum::kPartials);
    const double rstd = 1.0 / sqrt(q.result() / static_cast<double>(a.m) + a.eps);
    double* y = a.y + i * a.m;
    for (int64_t j = 0; j < a.m; ++j) y[j] = affine(a, xhat_of(a, x[j], mean, rstd), j);
    if (a.mean) a.mean[i] = mean;
    a.rstd[i] = rstd;
  }
}

// The end of the backward kernels' column sums: the block's warps' f32 rows of sums (warps, m) in
// shared memory, added in warp order in double, written as the block's partial sums (blocks, m).
__device__ inline void block_column_sums(const float* sums_w, const float* sums_b, int warps, int64_t m,
                                         double* partial_w, double* partial_b) {
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const int64_t at = int64_t{blockIdx.x} * m + j;
    if (sums_w) {
      double acc = 0.0;
      for (int k = 0; k < warps; ++k) acc += static_cast<double>(sums_w[int64_t{k} * m + j]);
      partial_w[at] = acc;
    }
    if (sums_b) {
      double acc = 0.0;
      for (int k = 0; k < warps; ++k) acc += static_cast<double>(sums_b[int64_t{k} * m + j]);
      partial_b[at] = acc;
    }
  }
}

// Note [norm backward blocks]
// The f32 backward, dx and the column sums in one pass. Block b takes rows_per_warp rows for each
// of its warps, warp w rows (b W + w) rows_per_warp on, one at a time in order; a row is two
// passes of its warp over it: the sums of g = dy * w and g * xhat (each lane its columns in
// double, then lanes_sum), then dx = rstd * ((g - mean(g)) - xhat * mean(g * xhat)) (rms_norm:
// without the mean(g) term). When dweight or dbias is wanted, the second pass also adds dy * xhat
// (and dy), rounded to f32, into the warp's own row of shared memory in f32 (each lane owns its
// columns: no two threads write a word), in row order; then the block adds its warps' rows in warp
// order in double and writes them as its partial sums (blocks, m), which sum_chunks_kernel adds in
// block order. With rows_per_warp = 4, a warp's f32 sums have the CPU's groups of four rows (Note
// [norm backward arithmetic] in cpu/norm.cpp); every order follows from the shape. This reads x
// and dy once for dx and the sums together. Where the warps' rows do not fit shared memory, the
// sums run in norm_columns_f32_kernel instead (Note [norm column blocks]).
constexpr int kBackwardWarps = 8, kBackwardRowsPerWarp = 4;

template <class IO>
__global__ void norm_backward_f32_kernel(NormRows<float, IO> a, int rows_per_warp, double* partial_w,
                                         double* partial_b) {
  extern __shared__ float columns[];  // (warps, m) sums of dy * xhat where wanted, then (warps, m) of dy
  const int warps = blockDim.x / kNormWarp, warp = threadIdx.x / kNormWarp, lane = threadIdx.x % kNormWarp;
  float* const sums_w = partial_w ? columns : nullptr;
  float* const sums_b = partial_b ? columns + (partial_w ? int64_t{warps} * a.m : 0) : nullptr;
  float* const cw = sums_w ? sums_w + int64_t{warp} * a.m : nullptr;
  float* const cb = sums_b ? sums_b + int64_t{warp} * a.m : nullptr;
  for (int64_t j = lane; j < a.m; j += kNormWarp) {
    if (cw) cw[j] = 0.0f;
    if (cb) cb[j] = 0.0f;
  }
  const int64_t first = (int64_t{blockIdx.x} * warps + warp) * rows_per_warp;
  const int64_t last = first + rows_per_warp < a.n ? first + rows_per_warp : a.n;
  for (int64_t i = first; i < last; ++i) {
    const float* x = a.x + i * a.m;
    const IO* dy = a.dy + i * a.m;
    const float mean = a.centered ? a.mean[i] : 0.0f, rstd = a.rstd[i];
    float mean_g = 0.0f, mean_gx = 0.0f;
    if (a.dx) {
      double part_g = 0.0, part_gx = 0.0;
      for (int64_t j = lane; j < a.m; j += kNormWarp) {
        const float d = kernels::convert<float>(dy[j]), g = a.w ? d * a.w[j] : d;
        part_g += static_cast<double>(g);
        part_gx += static_cast<double>(g * xhat_of(a, x[j], mean, rstd));  // the f32 product, as the CPU's
      }
      const double sum_g = a.centered ? lanes_sum(part_g) : 0.0, sum_gx = lanes_sum(part_gx);
      mean_g = static_cast<float>(sum_g / static_cast<double>(a.m));
      mean_gx = static_cast<float>(sum_gx / static_cast<double>(a.m));
    }
    float* dx = a.dx ? a.dx + i * a.m : nullptr;
    for (int64_t j = lane; j < a.m; j += kNormWarp) {
      const float d = kernels::convert<float>(dy[j]), g = a.w ? d * a.w[j] : d, xhat = xhat_of(a, x[j], mean, rstd);
      if (dx) {
        const float v = a.centered ? rstd * ((g - mean_g) - xhat * mean_gx) : rstd * (g - xhat * mean_gx);
        dx[j] = a.dx_adds ? dx[j] + v : v;
      }
      if (cw) cw[j] += d * xhat;
      if (cb) cb[j] += d;
    }
  }
  if (!partial_w && !partial_b) return;  // the whole block's choice
  __syncthreads();
  block_column_sums(sums_w, sums_b, warps, a.m, partial_w, partial_b);
}

// Note [norm backward in registers]
// norm_backward_f32_kernel's work for rows of at most 128 K columns, m a multiple of 4 (a GPT's
// 768): each lane keeps its columns of the row in registers, in chunks of four (lane l has chunks
// l, l + 32, ..., up to K of them), read by one 16-byte load of x and one 16- or 8-byte load of dy
// each, where the general kernel reads x and dy twice a row, four bytes at a time. The row's two
// sums, dx and the column sums then run on the registers (the warp's column sums in shared memory,
// four columns a 16-byte access). The column sums add in the general kernel's order (f32 down a
// warp's rows in row order, the warps in double in warp order); the row sums add a lane's columns
// in another order (in double), so dx may differ from the general kernel's in a last bit. Each
// order is fixed by the shape: the same bits every run.
template <class IO>
__device__ inline void load4(const IO* p, int64_t quad, float (&v)[4]) {
  if constexpr (std::is_same_v<IO, float>) {
    const float4 q = reinterpret_cast<const float4*>(p)[quad];
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    const uint2 q = reinterpret_cast<const uint2*>(p)[quad];  // four bf16, widened exactly
    v[0] = __uint_as_float(q.x << 16), v[1] = __uint_as_float(q.x & 0xffff0000u);
    v[2] = __uint_as_float(q.y << 16), v[3] = __uint_as_float(q.y & 0xffff0000u);
  }
}

template <class IO>
__device__ inline void store4(IO* p, int64_t quad, const float (&v)[4]) {
  if constexpr (std::is_same_v<IO, float>) {
    reinterpret_cast<float4*>(p)[quad] = make_float4(v[0], v[1], v[2], v[3]);
  } else {  // each rounded to bf16 as kernels::convert rounds it
    reinterpret_cast<uint2*>(p)[quad] = make_uint2(kernels::pack_bf16x2(v[0], v[1]), kernels::pack_bf16x2(v[2], v[3]));
  }
}

// Note [norm forward in registers]
// norm_forward_f32_kernel's work for rows of at most 128 K columns, m a multiple of 4: each lane
// reads its chunks of four columns once (16-byte loads; with R the sum a + r made and written
// first), keeps them in registers for the mean, the variance and y, and writes y four columns at a
// time, where the general kernel reads its row three times, four bytes at a time. The sums add a
// lane's columns in another order than the general kernel's (in double), so y, mean and rstd may
// differ from its in a last bit; the sum a + r has its bits (one f32 add, r widened exactly).
template <class IO, class R, int K>
__global__ void norm_forward_f32_quads_kernel(NormRows<float, IO> a, RowSum<R> add) {
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kNormWarp, quads = a.m / 4;
  const int lane = threadIdx.x % kNormWarp;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kNormWarp; i < a.n; i += warps) {
    float x[K][4];
    double part = 0.0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t q = lane + int64_t{k} * kNormWarp;
      if (q >= quads) continue;
      if constexpr (!std::is_void_v<R>) {
        float r[4];
        load4(add.a + i * a.m, q, x[k]);
        load4(add.r + i * a.m, q, r);
#pragma unroll
        for (int e = 0; e < 4; ++e) x[k][e] = x[k][e] + r[e];
        store4(add.sum + i * a.m, q, x[k]);
      } else {
        load4(a.x + i * a.m, q, x[k]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) part += static_cast<double>(x[k][e]);
    }
    const double mean = a.centered ? lanes_sum(part) / static_cast<double>(a.m) : 0.0;
    part = 0.0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (lane + int64_t{k} * kNormWarp >= quads) continue;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const double d = static_cast<double>(x[k][e]) - mean;
        part += d * d;
      }
    }
    const double var = lanes_sum(part) / static_cast<double>(a.m);
    const float mean_t = static_cast<float>(mean), rstd_t = static_cast<float>(1.0 / sqrt(var + a.eps));
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t q = lane + int64_t{k} * kNormWarp;
      if (q >= quads) continue;
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = affine(a, xhat_of(a, x[k][e], mean_t, rstd_t), 4 * q + e);
      store4(a.y + i * a.m, q, v);
    }
    if (lane == 0) {
      if (a.mean) a.mean[i] = mean_t;
      a.rstd[i] = rstd_t;
    }
  }
}

template <class IO, int K>
__global__ void __launch_bounds__(kBackwardWarps * kNormWarp)
    norm_backward_f32_quads_kernel(NormRows<float, IO> a, int rows_per_warp, double* partial_w, double* partial_b) {
  extern __shared__ float4 quads_shared[];  // (warps, m) sums of dy * xhat where wanted, then (warps, m) of dy
  float* const columns = reinterpret_cast<float*>(quads_shared);
  const int warps = blockDim.x / kNormWarp, warp = threadIdx.x / kNormWarp, lane = threadIdx.x % kNormWarp;
  const int64_t quads = a.m / 4;
  float* const sums_w = partial_w ? columns : nullptr;
  float* const sums_b = partial_b ? columns + (partial_w ? int64_t{warps} * a.m : 0) : nullptr;
  float4* const cw = sums_w ? reinterpret_cast<float4*>(sums_w + int64_t{warp} * a.m) : nullptr;
  float4* const cb = sums_b ? reinterpret_cast<float4*>(sums_b + int64_t{warp} * a.m) : nullptr;
  for (int64_t q = lane; q < quads; q += kNormWarp) {
    if (cw) cw[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (cb) cb[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // g = dy * w (dy where there is no weight), w read again where it is used: the cache holds it
  auto g_of = [&](int64_t q, const float (&d)[4], float (&g)[4]) {
    float w[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    if (a.w) load4(a.w, q, w);
#pragma unroll
    for (int e = 0; e < 4; ++e) g[e] = a.w ? d[e] * w[e] : d[e];
  };
  const int64_t first = (int64_t{blockIdx.x} * warps + warp) * rows_per_warp;
  const int64_t last = first + rows_per_warp < a.n ? first + rows_per_warp : a.n;
  for (int64_t i = first; i < last; ++i) {
    const float mean = a.centered ? a.mean[i] : 0.0f, rstd = a.rstd[i];
    float xhat[K][4], d[K][4];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t q = lane + int64_t{k} * kNormWarp;
      if (q >= quads) continue;
      load4(a.x + i * a.m, q, xhat[k]);
      load4(a.dy + i * a.m, q, d[k]);
#pragma unroll
      for (int e = 0; e < 4; ++e) xhat[k][e] = xhat_of(a, xhat[k][e], mean, rstd);
    }
    if (a.dx) {
      double part_g = 0.0, part_gx = 0.0;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t q = lane + int64_t{k} * kNormWarp;
        if (q >= quads) continue;
        float g[4];
        g_of(q, d[k], g);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          part_g += static_cast<double>(g[e]);
          part_gx += static_cast<double>(g[e] * xhat[k][e]);  // the f32 product, as the CPU's
        }
      }
      const double sum_g = a.centered ? lanes_sum(part_g) : 0.0, sum_gx = lanes_sum(part_gx);
      const float mean_g = static_cast<float>(sum_g / static_cast<double>(a.m));
      const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(a.m));
      float4* dx = reinterpret_cast<float4*>(a.dx + i * a.m);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t q = lane + int64_t{k} * kNormWarp;
        if (q >= quads) continue;
        float g[4], v[4];
        g_of(q, d[k], g);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          v[e] = a.centered ? rstd * ((g[e] - mean_g) - xhat[k][e] * mean_gx) : rstd * (g[e] - xhat[k][e] * mean_gx);
        if (a.dx_adds) {
          const float4 prior = dx[q];
          v[0] = prior.x + v[0], v[1] = prior.y + v[1], v[2] = prior.z + v[2], v[3] = prior.w + v[3];
        }
        dx[q] = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t q = lane + int64_t{k} * kNormWarp;
      if (q >= quads) continue;
      if (cw) {
        float4 c = cw[q];
        c.x += d[k][0] * xhat[k][0], c.y += d[k][1] * xhat[k][1], c.z += d[k][2] * xhat[k][2], c.w += d[k][3] * xhat[k][3];
        cw[q] = c;
      }
      if (cb) {
        float4 c = cb[q];
        c.x += d[k][0], c.y += d[k][1], c.z += d[k][2], c.w += d[k][3];
        cb[q] = c;
      }
    }
  }
  if (!partial_w && !partial_b) return;  // the whole block's choice
  __syncthreads();
  block_column_sums(sums_w, sums_b, warps, a.m, partial_w, partial_b);
}

// dx (n, m) when dx is set, and prod (n, m) = dy * xhat when prod is set, f64: one thread per row.
__global__ void norm_backward_f64_kernel(NormRows<double> a, double* prod, ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.n; i += int64_t{gridDim.x} * blockDim.x) {
    const double* x = a.x + i * a.m;
    const double* dy = a.dy + i * a.m;
    const double mean = a.centered ? a.mean[i] : 0.0, rstd = a.rstd[i];
    if (a.dx) {
      ExactSum sum_g, sum_gx;
      for (int64_t j = 0; j < a.m; ++j) {
        const double g = a.w ? dy[j] * a.w[j] : dy[j];
        if (a.centered) sum_g.add(g);
        sum_gx.add(g * xhat_of(a, x[j], mean, rstd));
      }
      if (sum_g.out_of_partials || sum_gx.out_of_partials)
        record_error(site, ErrorKind::sum_out_of_partials, i, ExactSum::kPartials);
      const double mean_g = sum_g.result() / static_cast<double>(a.m);
      const double mean_gx = sum_gx.result() / static_cast<double>(a.m);
      double* dx = a.dx + i * a.m;
      for (int64_t j = 0; j < a.m; ++j) {
        const double g = a.w ? dy[j] * a.w[j] : dy[j], xhat = xhat_of(a, x[j], mean, rstd);
        const double v = a.centered ? rstd * ((g - mean_g) - xhat * mean_gx) : rstd * (g - xhat * mean_gx);
        dx[j] = a.dx_adds ? dx[j] + v : v;
      }
    }
    if (prod)
      for (int64_t j = 0; j < a.m; ++j) prod[i * a.m + j] = dy[j] * xhat_of(a, x[j], mean, rstd);
  }
}

// Note [norm column blocks]
// dweight and dbias in f32 where the backward's blocks cannot sum them (Note [norm backward
// blocks]: rows too long for shared memory): block (x, y) of the grid takes 32 columns (x) and one chunk of
// rows_per_chunk rows (y); its 8 rows of threads take every 8th row of the chunk, in order, and
// add dy * xhat (and dy) in double; a fixed tree adds the 8, and the block writes the chunk's sums.
// A second kernel adds each column's chunk sums in chunk order. Every sum has one fixed order.
constexpr int kColumnTile = 32, kColumnRows = 8;

template <class IO>
__global__ void norm_columns_f32_kernel(NormRows<float, IO> a, int64_t rows_per_chunk, double* partial_w,
                                        double* partial_b) {
  __shared__ double sums[2][kColumnRows][kColumnTile];
  const int64_t j = blockIdx.x * int64_t{kColumnTile} + threadIdx.x;
  const int64_t chunk = blockIdx.y, first = chunk * rows_per_chunk;
  const int64_t last = first + rows_per_chunk < a.n ? first + rows_per_chunk : a.n;
  double acc_w = 0.0, acc_b = 0.0;
  if (j < a.m) {
    for (int64_t i = first + threadIdx.y; i < last; i += kColumnRows) {
      const float dy = kernels::convert<float>(a.dy[i * a.m + j]);
      const float xhat = xhat_of(a, a.x[i * a.m + j], a.centered ? a.mean[i] : 0.0f, a.rstd[i]);
      acc_w += static_cast<double>(dy * xhat);  // the f32 product, as the CPU's
      acc_b += static_cast<double>(dy);
    }
  }
  sums[0][threadIdx.y][threadIdx.x] = acc_w;
  sums[1][threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  for (int half = kColumnRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      sums[0][threadIdx.y][threadIdx.x] += sums[0][threadIdx.y + half][threadIdx.x];
      sums[1][threadIdx.y][threadIdx.x] += sums[1][threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < a.m) {
    if (partial_w) partial_w[chunk * a.m + j] = sums[0][0][threadIdx.x];
    if (partial_b) partial_b[chunk * a.m + j] = sums[1][0][threadIdx.x];
  }
}

// out (m,) = the chunks' partial sums (chunks, m) added down each column, rounded to f32: thread
// (x, y) of a 32 x 32 block adds chunks y, y + 32, ... of column 32 blockIdx.x + x in order, in
// double, then a fixed tree adds the 32 sums (one order for every run).
constexpr int kChunkLanes = 32;

__global__ void sum_chunks_kernel(const double* partial, int64_t chunks, int64_t m, float* out) {
  __shared__ double sums[kChunkLanes][kChunkLanes + 1];
  const int64_t j = int64_t{blockIdx.x} * kChunkLanes + threadIdx.x;
  double acc = 0.0;
  if (j < m)
    for (int64_t c = threadIdx.y; c < chunks; c += kChunkLanes) acc += partial[c * m + j];
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int half = kChunkLanes / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) sums[threadIdx.y][threadIdx.x] += sums[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < m) out[j] = static_cast<float>(sums[0][threadIdx.x]);
}

// y = x * m(word), one thread per block of four elements (Note [dropout stream] in ops/fused/dropout.cpp).
template <class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, uint64_t seed, uint64_t offset, uint64_t threshold,
                               T scale) {
  const int64_t groups = n / 4 + (n % 4 != 0);
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < groups; q += int64_t{gridDim.x} * blockDim.x) {
    const kernels::PhiloxBlock r = kernels::philox_block(seed, offset + static_cast<uint64_t>(q));
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * q + k;
      if (i < n) y[i] = x[i] * kernels::dropout_multiplier(r.w[k], threshold, scale);
    }
  }
}

// ----------------------------------------------------------------------------
// kernel launchers

const char* norm_name(kernels::Norm kind) { return kind == kernels::Norm::layer ? "layer_norm" : "rms_norm"; }

template <class T>
const T* cdata_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}
template <class T>
T* mdata_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// y (forward) or dy and dx (backward) as the kernels take them; the other undefined.
template <class T, class IO>
NormRows<T, IO> rows_of(kernels::Norm kind, const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& b,
                        const Tensor& y, const Tensor& dx, const Tensor& mean, const Tensor& rstd, double eps) {
  const int64_t m = x.shape()[x.ndim() - 1];
  return {cdata<T>(x),          cdata_or_null<IO>(dy), cdata_or_null<T>(w), cdata_or_null<T>(b),
          mdata_or_null<IO>(y), mdata_or_null<T>(dx),  mdata_or_null<T>(mean), mdata<T>(rstd),
          m == 0 ? 0 : x.numel() / m, m, eps, kind == kernels::Norm::layer};
}

unsigned warp_row_blocks(int64_t rows) { return blocks_for(rows * kNormWarp); }

// f(T, IO) for x's dtype T and y's (or dy's) IO: T, or bf16 for f32 rows (autocast's).
template <class F>
void dispatch_rows(kernels::Norm kind, const Tensor& x, const Tensor& io, F&& f) {
  if (io.dtype() == DType::bf16) {
    TG_CHECK(x.dtype() == DType::f32, "[norm] a bf16 y or dy goes with f32 rows");
    return f.template operator()<float, kernels::bf16>();
  }
  TG_CHECK(io.dtype() == x.dtype(), "[norm] y or dy has x's dtype");
  dispatch_float(norm_name(kind), x.dtype(), [&]<class T>() { f.template operator()<T, T>(); });
}

// dweight and dbias of f32 rows by norm_columns_f32_kernel (Note [norm column blocks]) into the
// partial sums' (chunks, m) halves.
template <class IO>
void columns_apart(const NormRows<float, IO>& a, double* partial_w, double* partial_b, int64_t chunks,
                      int64_t rows_per_chunk, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.m + kColumnTile - 1) / kColumnTile), static_cast<unsigned>(chunks)),
      block(kColumnTile, kColumnRows);
  norm_columns_f32_kernel<<<grid, block, 0, stream>>>(a, rows_per_chunk, partial_w, partial_b);
  TG_CUDA_CHECK_LAUNCH();
}

template <class IO>
void backward_f32(const NormRows<float, IO>& a, Tensor& dweight, Tensor& dbias, const Tensor& x,
                  cudaStream_t stream) {
  const int sums = (dweight.defined() ? 1 : 0) + (dbias.defined() ? 1 : 0);
  const int64_t row_bytes = a.m * static_cast<int64_t>(sizeof(float)) * sums;
  // the most warps a block whose warps' rows fit 48 KiB of shared memory (Note [norm backward blocks])
  int warps = kBackwardWarps;
  while (warps > 0 && int64_t{warps} * row_bytes > 48 * 1024) warps /= 2;
  const bool fused = sums > 0 && warps > 0;
  if (!fused) warps = kBackwardWarps;
  const int rows_per_warp = fused ? kBackwardRowsPerWarp : 1;
  const int64_t rows_per_block = int64_t{warps} * rows_per_warp;
  const int64_t blocks = (a.n + rows_per_block - 1) / rows_per_block;
  TG_CHECK(blocks <= 0x7fffffff && (a.m + kChunkLanes - 1) / kChunkLanes <= 0x7fffffff, "[norm] rows fit a grid");
  // the chunks whose partial sums meet in sum_chunks_kernel: the backward's blocks, or the column
  // kernel's chunks of 256 rows (enough blocks to fill the device, gridDim.y <= 65535)
  const int64_t column_rows = std::max<int64_t>(256, (a.n + 65534) / 65535);
  const int64_t chunks = sums == 0 ? 0 : fused ? blocks : (a.n + column_rows - 1) / column_rows;
  Tensor partial;
  double *partial_w = nullptr, *partial_b = nullptr;
  if (sums > 0) {
    partial = Tensor::empty(Shape{sums * chunks, a.m}, DType::f64, x.device());
    partial_w = dweight.defined() ? mdata<double>(partial) : nullptr;
    partial_b = dbias.defined() ? mdata<double>(partial) + (partial_w ? chunks * a.m : 0) : nullptr;
  }
  if (a.dx || fused) {
    const size_t shared = fused ? static_cast<size_t>(int64_t{warps} * row_bytes) : 0;
    const dim3 grid(static_cast<unsigned>(blocks)), block(static_cast<unsigned>(warps * kNormWarp));
    double *pw = fused ? partial_w : nullptr, *pb = fused ? partial_b : nullptr;
    // rows in registers (Note [norm backward in registers]) where they are whole 16-byte quads
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const int64_t quads_per_lane = (a.m / 4 + kNormWarp - 1) / kNormWarp;
    const bool quads = a.m % 4 == 0 && quads_per_lane <= 8 && aligned(a.x) && aligned(a.dy) &&
                       (!a.w || aligned(a.w)) && (!a.dx || aligned(a.dx));
    auto launch = [&]<int K>() {
      norm_backward_f32_quads_kernel<IO, K><<<grid, block, shared, stream>>>(a, rows_per_warp, pw, pb);
    };
    if (!quads) norm_backward_f32_kernel<IO><<<grid, block, shared, stream>>>(a, rows_per_warp, pw, pb);
    else if (quads_per_lane <= 2) launch.template operator()<2>();
    else if (quads_per_lane <= 4) launch.template operator()<4>();
    else if (quads_per_lane <= 6) launch.template operator()<6>();
    else launch.template operator()<8>();
    TG_CUDA_CHECK_LAUNCH();
  }
  if (sums == 0) return;
  if (!fused) columns_apart(a, partial_w, partial_b, chunks, column_rows, stream);
  const dim3 grid(static_cast<unsigned>((a.m + kChunkLanes - 1) / kChunkLanes)), block(kChunkLanes, kChunkLanes);
  if (partial_w) {
    sum_chunks_kernel<<<grid, block, 0, stream>>>(partial_w, chunks, a.m, mdata<float>(dweight));
    TG_CUDA_CHECK_LAUNCH();
  }
  if (partial_b) {
    sum_chunks_kernel<<<grid, block, 0, stream>>>(partial_b, chunks, a.m, mdata<float>(dbias));
    TG_CUDA_CHECK_LAUNCH();
  }
}

// The f32 forward: rows in registers where they are whole 16-byte quads (Note [norm forward in
// registers]), else the general kernel.
template <class IO, class R>
void forward_f32(const NormRows<float, IO>& a, const RowSum<R>& add, cudaStream_t stream) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t quads_per_lane = (a.m / 4 + kNormWarp - 1) / kNormWarp;
  bool quads = a.m % 4 == 0 && quads_per_lane <= 8 && aligned(a.x) && aligned(a.y) && (!a.w || aligned(a.w)) &&
               (!a.b || aligned(a.b));
  if constexpr (!std::is_void_v<R>) quads = quads && aligned(add.a) && aligned(add.r) && aligned(add.sum);
  auto launch = [&]<int K>() {
    norm_forward_f32_quads_kernel<IO, R, K><<<warp_row_blocks(a.n), kBlock, 0, stream>>>(a, add);
  };
  if (!quads) norm_forward_f32_kernel<IO, R><<<warp_row_blocks(a.n), kBlock, 0, stream>>>(a, add);
  else if (quads_per_lane <= 2) launch.template operator()<2>();
  else if (quads_per_lane <= 4) launch.template operator()<4>();
  else if (quads_per_lane <= 6) launch.template operator()<6>();
  else launch.template operator()<8>();
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void norm_rows(kernels::Norm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
               Tensor& mean, Tensor& rstd) {
  DeviceContext& ctx = context(x);
  dispatch_rows(kind, x, y, [&]<class T, class IO>() {
    const NormRows<T, IO> a = rows_of<T, IO>(kind, x, Tensor(), weight, bias, y, Tensor(), mean, rstd, eps);
    if (a.n == 0) return;
    if constexpr (std::is_same_v<T, double>) {
      norm_forward_f64_kernel<<<blocks_for(a.n, 64), 64, 0, ctx.stream>>>(a, ctx.error_site(norm_name(kind), 0, 0));
      TG_CUDA_CHECK_LAUNCH();
    } else {
      forward_f32(a, RowSum<void>{}, ctx.stream);
    }
  });
}

void add_norm_rows(kernels::Norm kind, const Tensor& a, const Tensor& r, const Tensor& weight, const Tensor& bias,
                   double eps, Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  TG_CHECK(a.dtype() == DType::f32 && sum.dtype() == DType::f32 && (r.dtype() == DType::f32 || r.dtype() == DType::bf16),
           "[add_norm_rows] f32 a and sum, f32 or bf16 r");
  DeviceContext& ctx = context(a);
  dispatch_rows(kind, sum, y, [&]<class T, class IO>() {
    if constexpr (std::is_same_v<T, float>) {
      const NormRows<float, IO> rows = rows_of<float, IO>(kind, sum, Tensor(), weight, bias, y, Tensor(), mean, rstd, eps);
      if (rows.n == 0) return;
      auto launch = [&]<class R>() {
        forward_f32(rows, RowSum<R>{cdata<float>(a), cdata<R>(r), mdata<float>(sum)}, ctx.stream);
      };
      if (r.dtype() == DType::bf16) launch.template operator()<kernels::bf16>();
      else launch.template operator()<float>();
    }
  });
}

void norm_rows_backward(kernels::Norm kind, const Tensor& dy, const Tensor& x, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias,
                        bool dx_adds) {
  DeviceContext& ctx = context(x);
  dispatch_rows(kind, x, dy, [&]<class T, class IO>() {
    NormRows<T, IO> a = rows_of<T, IO>(kind, x, dy, weight, Tensor(), Tensor(), dx, mean, rstd, 0.0);
    a.dx_adds = dx_adds && dx.defined();
    if (a.n == 0) {  // no rows: the sums over rows are zeros
      if (dweight.defined()) dweight.zero_();
      if (dbias.defined()) dbias.zero_();
      return;
    }
    if constexpr (std::is_same_v<T, double>) {
      Tensor prod;
      if (dweight.defined()) prod = Tensor::empty(Shape{a.n, a.m}, DType::f64, x.device());
      if (dx.defined() || prod.defined()) {
        norm_backward_f64_kernel<<<blocks_for(a.n, 64), 64, 0, ctx.stream>>>(a, mdata_or_null<double>(prod),
                                                                             ctx.error_site(norm_name(kind), 0, 0));
        TG_CUDA_CHECK_LAUNCH();
      }
      if (dweight.defined()) sum_rows(prod, dweight);
      if (dbias.defined()) sum_rows(dy.reshape(Shape{a.n, a.m}), dbias);
    } else {
      backward_f32(a, dweight, dbias, x, ctx.stream);
    }
  });
}

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const uint64_t threshold = kernels::dropout_threshold(p);
  const int64_t groups = n / 4 + (n % 4 != 0);
  dispatch_float("dropout", x.dtype(), [&]<class T>() {
    const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    dropout_kernel<T><<<blocks_for(groups), kBlock, 0, stream_for(x)>>>(cdata<T>(x), mdata<T>(y), n, seed, offset,
                                                                         threshold, scale);
    TG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tapegrad::cuda
