// CUDA log-softmax rows and the library's cross-entropy over them: the contracts of
// src/kernels/cpu/log_softmax.cpp (Note [log-sum-exp rows] there), one block per row (a warp per
// row for short rows). The row
// sums run over the block's threads and a fixed tree, so they are deterministic, but not in the
// CPU's left-to-right order: results agree with the CPU's to rounding.
#include <atomic>
#include <type_traits>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/kernels/unary_ops.hpp"

namespace tapegrad::cuda {

namespace {

constexpr int kRowBlock = 256;

// The larger of a running max and x: a NaN wins (the running one first), a tie keeps the running one.
__device__ inline double max_nan(double acc, double x) { return acc != acc ? acc : x != x ? x : (x > acc ? x : acc); }

// The block's max (NaN wins) or sum of v, returned to every thread; `shared` holds kRowBlock doubles.
template <bool kMax>
__device__ double block_reduce(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kRowBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const double a = shared[threadIdx.x], b = shared[threadIdx.x + half];
      shared[threadIdx.x] = kMax ? (a != a || b != b ? (a != a ? a : b) : (a > b ? a : b)) : a + b;
    }
    __syncthreads();
  }
  const double r = shared[0];
  __syncthreads();
  return r;
}

template <class T>
__global__ void __launch_bounds__(kRowBlock) log_softmax_kernel(const T* x, T* y, int64_t m) {
  __shared__ double shared[kRowBlock];
  const T* row = x + blockIdx.x * m;
  T* out = y + blockIdx.x * m;
  double top = -INFINITY;
  for (int64_t j = threadIdx.x; j < m; j += kRowBlock) {
    const double v = row[j];
    top = max_nan(top, v);
  }
  const T t = static_cast<T>(block_reduce<true>(top, shared));
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += kRowBlock) s += static_cast<double>(kernels::exp_of(row[j] - t));
  const T log_s = static_cast<T>(kernels::log_of(block_reduce<false>(s, shared)));
  for (int64_t j = threadIdx.x; j < m; j += kRowBlock) out[j] = (row[j] - t) - log_s;
}

// Short rows (m <= kWarpRowMax, a character vocabulary's logits): a warp per row, kRowBlock / 32
// rows a block. Lane l takes j = l, l + 32, ... in order; the 32 partials meet in a fixed
// butterfly, so every lane holds the same result and every run gives the same bits.
constexpr int64_t kWarpRowMax = 1024;

__device__ inline double warp_max(double v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const double o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = max_nan(v, o);
  }
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__global__ void __launch_bounds__(kRowBlock) log_softmax_warp_kernel(const T* x, T* y, int64_t n, int64_t m) {
  const int64_t r = blockIdx.x * int64_t{kRowBlock / 32} + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (r >= n) return;  // the whole warp leaves together
  const T* row = x + r * m;
  T* out = y + r * m;
  double top = -INFINITY;
  for (int64_t j = lane; j < m; j += 32) {
    const double v = row[j];
    top = max_nan(top, v);
  }
  const T t = static_cast<T>(warp_max(top));
  double s = 0.0;
  for (int64_t j = lane; j < m; j += 32) s += static_cast<double>(kernels::exp_of(row[j] - t));
  const T log_s = static_cast<T>(kernels::log_of(warp_sum(s)));
  for (int64_t j = lane; j < m; j += 32) out[j] = (row[j] - t) - log_s;
}

template <class T>
__global__ void __launch_bounds__(kRowBlock) log_softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t m) {
  __shared__ double shared[kRowBlock];
  const int64_t base = blockIdx.x * m;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += kRowBlock) s += static_cast<double>(dy[base + j]);
  const T total = static_cast<T>(block_reduce<false>(s, shared));
  for (int64_t j = threadIdx.x; j < m; j += kRowBlock) dx[base + j] = dy[base + j] - kernels::exp_of(y[base + j]) * total;
}

// One thread per row; the count of rows not ignored is added with an atomic (an integer count:
// exact in any order).
template <class T, class I>
__global__ void nll_kernel(const T* lp, const I* targets, int64_t ignore_index, T* losses, unsigned long long* count,
                           int64_t n, int64_t v, ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = static_cast<int64_t>(targets[i]);
    if (t == ignore_index) {
      losses[i] = T(0);
      continue;
    }
    if (t < 0 || t >= v) {
      record_error(site, ErrorKind::target_out_of_range, i, t);
      losses[i] = T(0);
      continue;
    }
    losses[i] = -lp[i * v + t];
    atomicAdd(count, 1ull);
  }
}

template <class T>
__global__ void count_to_scalar_kernel(const unsigned long long* count, T* out) {
  *out = static_cast<T>(*count);
}

template <class T, class I>
__global__ void __launch_bounds__(kRowBlock) nll_log_softmax_backward_kernel(const T* lp, const I* targets,
                                                                             int64_t ignore_index, const T* dloss,
                                                                             bool per_row, const T* divisor, T* d,
                                                                             int64_t v) {
  const int64_t i = blockIdx.x;
  const int64_t t = static_cast<int64_t>(targets[i]);
  const bool skip = t == ignore_index || t < 0 || t >= v;
  const T g = skip ? T(0) : (per_row ? dloss[i] : dloss[0]) / (divisor ? *divisor : T(1));
  for (int64_t j = threadIdx.x; j < v; j += kRowBlock) {
    const T p = kernels::exp_of(lp[i * v + j]);
    d[i * v + j] = skip ? T(0) : (j == t ? p - T(1) : p) * g;
  }
}

// cross_entropy_rows: a row's running max and its sum of exp(x - max), in double, merged in a fixed
// order (a NaN max wins; a part with nothing above -inf adds nothing).
struct MaxSum {
  double m, s;
};
__device__ inline MaxSum merge(MaxSum a, MaxSum b) {
  const double m = max_nan(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0};
  return {m, (a.m == -INFINITY ? 0.0 : a.s * exp(a.m - m)) + (b.m == -INFINITY ? 0.0 : b.s * exp(b.m - m))};
}

// A thread's values x[0..count) into its running max and sum: the max of them first, then one
// rescale of the sum (when the max grew, or a NaN arrived), then their exps.
template <class T, int kCount>
__device__ inline void add_values(MaxSum& ms, const T (&x)[kCount]) {
  double m = ms.m;
#pragma unroll
  for (int k = 0; k < kCount; ++k) m = max_nan(m, static_cast<double>(x[k]));
  if (!(m == ms.m)) {
    ms.s = ms.m == -INFINITY ? 0.0 : ms.s * exp(ms.m - m);
    ms.m = m;
  }
  if (ms.m == -INFINITY) return;
#pragma unroll
  for (int k = 0; k < kCount; ++k) ms.s += static_cast<double>(kernels::exp_of(static_cast<T>(x[k] - ms.m)));
}

// exp(x) for cross_entropy_rows: f32 as exp2_approx(x log2 e) (about 2^-21 relative), f64
// correctly rounded.
__device__ inline float exp_fast(float x) { return exp2_approx(x * 1.4426950408889634f); }
template <class T>
__device__ inline T exp_row(T x) {
  if constexpr (sizeof(T) == 4) return exp_fast(x);
  else return kernels::exp_of(x);
}

// A thread's running max and sum over f32 logits, in f32 (the partial sums of a hundred values or
// so; the threads' parts meet in double), the NaNs remembered apart (fmaxf drops them).
struct MaxSumF {
  float m = -INFINITY, s = 0.f;
  bool nan = false;
  __device__ MaxSum wide() const { return {nan ? NAN : static_cast<double>(m), static_cast<double>(s)}; }
};
__device__ inline void add_values(MaxSumF& ms, const float (&x)[8]) {
  float m = ms.m;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    m = fmaxf(m, x[k]);
    ms.nan |= x[k] != x[k];
  }
  if (m > ms.m) {  // rescaled to the new max (exp(-inf) = 0 for the first)
    ms.s *= exp_fast(ms.m - m);
    ms.m = m;
  }
  if (ms.m == -INFINITY) return;
#pragma unroll
  for (int k = 0; k < 8; ++k) ms.s += exp_fast(x[k] - ms.m);
}

// Whether a row of f32 or bf16 logits reads four at a time: 4 | v and an aligned start.
template <class Z>
__device__ inline bool by_fours(const Z* x, int64_t v) {
  return sizeof(Z) <= 4 && v % 4 == 0 && reinterpret_cast<uintptr_t>(x) % (4 * sizeof(Z)) == 0;
}
// Four logits as stored (16 bytes of f32, 8 of bf16), and as f32.
template <class Z>
struct Four;
template <>
struct Four<float> {
  using type = float4;
};
template <>
struct Four<kernels::bf16> {
  using type = uint2;
};
template <class Z>
using four_t = typename Four<Z>::type;
__device__ inline float4 widen(float4 x) { return x; }
__device__ inline float4 widen(uint2 u) {
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}
// Logits [4j, 4j + 4) of a row: one 16-byte (f32) or 8-byte (bf16) load.
template <class Z>
__device__ inline four_t<Z> load_raw(const Z* x, int64_t j) { return reinterpret_cast<const four_t<Z>*>(x)[j]; }
template <class Z>
__device__ inline float4 load_four(const Z* x, int64_t j) { return widen(load_raw(x, j)); }

// The 16 bytes of logits at `raw` as f32: four f32 or eight bf16 (each widened exactly).
template <class Z>
__device__ inline void widen16(const uint4& raw, float (&x)[16 / sizeof(Z)]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (sizeof(Z) == 4) {
      x[k] = __uint_as_float(w[k]);
    } else {
      x[2 * k] = __uint_as_float(w[k] << 16);
      x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  }
}

// E f32 gradients stored as G (f32, or bf16 rounded as kernels::convert rounds), 8, 16 or 32
// bytes, by 8- or 16-byte writes.
template <class G, int E>
__device__ inline void store_words(G* dst, const float (&out)[E]) {
  constexpr int kWords = E * static_cast<int>(sizeof(G)) / 4;
  uint32_t w[kWords];
#pragma unroll
  for (int k = 0; k < kWords; ++k) {
    if constexpr (sizeof(G) == 4) w[k] = __float_as_uint(out[k]);
    else w[k] = kernels::pack_bf16x2(out[2 * k], out[2 * k + 1]);
  }
  if constexpr (kWords == 2) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else {
#pragma unroll
    for (int k = 0; k < kWords; k += 4) reinterpret_cast<uint4*>(dst)[k / 4] = make_uint4(w[k], w[k + 1], w[k + 2], w[k + 3]);
  }
}

// dz[j..j+4) from four logits, stored as one 8-byte (bf16) or 16-byte (f32) write.
template <class T, class G>
__device__ inline void store_four(G* dz, int64_t j, const float4& x, T top, T log_s, int64_t t) {
  static_assert(std::is_same_v<T, float>, "four at a time: f32 arithmetic");
  const float xs[4] = {x.x, x.y, x.z, x.w};
  float out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const T p = exp_row((static_cast<T>(xs[k]) - top) - log_s);
    out[k] = j + k == t ? p - T(1) : p;
  }
  store_words(dz + j, out);
}

// A row of v logits a group of R threads of a block of K (a warp, or the whole block): losses[i]
// and, when d is not null, the row of dz = softmax - onehot(t), as the CPU's cross_entropy_rows
// (Note [log-sum-exp rows]; its sums in double where the threads' parts meet). One read of the
// row for its max and sum (online: a thread rescales its sum when its max grows), one more to
// write dz. f32 and bf16 rows whose length is a multiple of 4 go four logits a load, two loads in
// flight a thread, a thread's sum in f32 (MaxSumF); other rows one logit at a time, in double.
// Z: the logits' storage; T: the arithmetic's and the losses' (f32 for bf16 logits). With R = K
// the warps' parts meet once, in thread 0, which hands the row's max and log-sum to the block
// through shared memory (every thread merging them in double made the same sums 16 times over).
//
// Note [a loss row kept in shared memory]
// kKeep (a block a row, dz wanted, the row whole 16-byte pieces of at most kKeptRowBytes): the
// block first copies its row into shared memory with cp.async, every thread all of its pieces at
// once, so the whole row (100 KB of bf16 in a GPT-2 head) is in flight together where loads into
// registers keep four a thread in flight; after a barrier the sums read the row there in the
// order of the kernel that reads device memory, and dz is made 16 bytes of logits a step. The
// logits leave device memory once, and the sums are those of the twice-reading kernel: the same
// bits (a test checks), since dz's elements do not depend on which thread makes them.
constexpr int kCeBlock = 512;
constexpr int64_t kKeptRowBytes = 112 << 10;  // two blocks a multiprocessor
template <class Z, class T, class G, class I, int R, int K, bool kKeep = false>
__global__ void __launch_bounds__(K)
    cross_entropy_rows_kernel(const Z* z, const I* targets, int64_t ignore_index, T* losses, G* d,
                              unsigned long long* count, int64_t n, int64_t v, ErrorSite site) {
  __shared__ MaxSum parts[K / 32];
  __shared__ T stats[2];               // R = K: the row's max and log-sum
  extern __shared__ uint4 kept_row[];  // kKeep: the row, v logits
  const int lane = static_cast<int>(threadIdx.x % R);
  const int64_t i = blockIdx.x * int64_t{K / R} + threadIdx.x / R;
  if (i >= n) return;  // a whole group leaves together (R = 32), or none does (R = K)
  const int64_t t = static_cast<int64_t>(targets[i]);
  const Z* x = z + i * v;
  G* dz = d ? d + i * v : nullptr;
  if (t == ignore_index || t < 0 || t >= v) {
    if (lane == 0) {
      losses[i] = T(0);
      if (t != ignore_index) record_error(site, ErrorKind::target_out_of_range, i, t);
    }
    if (dz)
      for (int64_t j = lane; j < v; j += R) dz[j] = kernels::convert<G>(T(0));
    return;
  }
  static_assert(!kKeep || sizeof(Z) <= 4, "kept rows are f32 or bf16");
  if constexpr (kKeep) {  // the row into shared memory, every piece in flight at once
    const auto* from = reinterpret_cast<const uint4*>(x);
    const int64_t pieces = v * static_cast<int64_t>(sizeof(Z)) / 16;
    for (int64_t c = threadIdx.x; c < pieces; c += K) cp_async16(kept_row + c, from + c);
    cp_async_wait_all();
    __syncthreads();
  }
  constexpr bool kFours = sizeof(Z) <= 4;  // f32 and bf16 rows may go four at a time
  const bool fours = kFours && by_fours(x, v) && (!dz || reinterpret_cast<uintptr_t>(dz) % (4 * sizeof(G)) == 0);
  MaxSum ms{-INFINITY, 0.0};
  if constexpr (kFours)
    if (fours) {  // f32 arithmetic (MaxSumF)
      const int64_t v4 = v / 4;
      MaxSumF f;
      [[maybe_unused]] const four_t<Z>* kept = reinterpret_cast<const four_t<Z>*>(kept_row);
#pragma unroll 2  // the next pair's loads issued before this pair's sums: four loads in flight
      for (int64_t j = lane; j < v4; j += 2 * R) {
        const bool second = j + R < v4;
        four_t<Z> ra, rb{};
        if constexpr (kKeep) {
          ra = kept[j];
          if (second) rb = kept[j + R];
        } else {
          ra = load_raw(x, j);
          if (second) rb = load_raw(x, j + R);
        }
        const float4 a = widen(ra), b = second ? widen(rb) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        const float vals[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        add_values(f, vals);
      }
      ms = f.wide();
    }
  if (!fours)
    for (int64_t j = lane; j < v; j += R) {
      const T vals[1] = {kernels::convert<T>(x[j])};
      add_values(ms, vals);
    }
  for (int offset = 16; offset > 0; offset /= 2)
    ms = merge(ms, MaxSum{__shfl_xor_sync(0xffffffffu, ms.m, offset), __shfl_xor_sync(0xffffffffu, ms.s, offset)});
  T top, log_s;
  if constexpr (R > 32) {  // the warps' parts, in warp order, by thread 0 for the block
    if (threadIdx.x % 32 == 0) parts[threadIdx.x / 32] = ms;
    __syncthreads();
    if (threadIdx.x == 0) {
      MaxSum all = parts[0];
      for (int w = 1; w < R / 32; ++w) all = merge(all, parts[w]);
      stats[0] = static_cast<T>(all.m);
      stats[1] = static_cast<T>(kernels::log_of(all.s));
    }
    __syncthreads();
    top = stats[0], log_s = stats[1];
  } else {
    top = static_cast<T>(ms.m), log_s = static_cast<T>(kernels::log_of(ms.s));
  }
  if (lane == 0) {
    losses[i] = -((kernels::convert<T>(x[t]) - top) - log_s);
    atomicAdd(count, 1ull);
  }
  if (!dz) return;
  if constexpr (kKeep) {  // 16 bytes of logits a step, E of them
    constexpr int E = 16 / static_cast<int>(sizeof(Z));
    const int64_t pieces = v * static_cast<int64_t>(sizeof(Z)) / 16;
    for (int64_t c = threadIdx.x; c < pieces; c += K) {
      float xs[E], out[E];
      widen16<Z>(kept_row[c], xs);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const T p = exp_row((static_cast<T>(xs[e]) - top) - log_s);
        out[e] = E * c + e == t ? p - T(1) : p;
      }
      store_words(dz + E * c, out);
    }
    return;
  }
  if constexpr (kFours)
    if (fours) {
      const int64_t v4 = v / 4;
      for (int64_t j = lane; j < v4; j += 2 * R) {
        const float4 a = load_four(x, j);
        if (j + R < v4) {
          const float4 b = load_four(x, j + R);
          store_four<T, G>(dz, 4 * (j + R), b, top, log_s, t);
        }
        store_four<T, G>(dz, 4 * j, a, top, log_s, t);
      }
      return;
    }
  for (int64_t j = lane; j < v; j += R) {
    const T p = exp_row((kernels::convert<T>(x[j]) - top) - log_s);
    dz[j] = kernels::convert<G>(j == t ? p - T(1) : p);
  }
}

std::atomic<bool> g_keep_rows{true};

// Whether a block-a-row launch keeps its row in shared memory (kKeep, Note [a loss row kept in
// shared memory]): dz wanted, f32 or bf16 rows of whole 16-byte pieces from 16-byte aligned
// storage, at most kKeptRowBytes, unless switched off. dz's row of v f32 or bf16 then splits into
// the pieces' 8, 16 or 32 bytes, each on its width's boundary.
template <class Z, class G>
bool keep_rows(const Tensor& z, const G* d, int64_t v) {
  if constexpr (sizeof(Z) > 4) {
    return false;
  } else {
    const int64_t bytes = v * static_cast<int64_t>(sizeof(Z));
    return g_keep_rows.load() && d && bytes % 16 == 0 && bytes <= kKeptRowBytes &&
           reinterpret_cast<uintptr_t>(z.raw_data()) % 16 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0;
  }
}

}  // namespace

void set_cross_entropy_kept_rows(bool keep) { g_keep_rows.store(keep); }

void cross_entropy_rows(const Tensor& z, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count,
                        Tensor& dz) {
  const int64_t n = z.dim(0), v = z.dim(1);
  DeviceContext& ctx = context(z);
  const ErrorSite site = ctx.error_site("cross_entropy", n, v);
  Tensor counter = Tensor::zeros(Shape{1}, DType::i64, z.device());
  auto* c = static_cast<unsigned long long*>(counter.raw_data());
  // Z: the logits' storage; T: the arithmetic's and the losses' (f32 for bf16 logits)
  auto run = [&]<class Z, class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      auto launch = [&]<class G>(G* d) {
        if (n == 0) return;
        if (v <= kWarpRowMax) {
          constexpr int64_t rows = kCeBlock / 32;
          cross_entropy_rows_kernel<Z, T, G, I, 32, kCeBlock>
              <<<static_cast<unsigned>((n + rows - 1) / rows), kCeBlock, 0, ctx.stream>>>(
                  cdata<Z>(z), cdata<I>(targets), ignore_index, mdata<T>(losses), d, c, n, v, site);
        } else if (keep_rows<Z>(z, d, v)) {
          if constexpr (sizeof(Z) <= 4) {  // f32 and bf16 rows only
            const auto kernel = cross_entropy_rows_kernel<Z, T, G, I, kCeBlock, kCeBlock, true>;
            const int bytes = static_cast<int>(v * static_cast<int64_t>(sizeof(Z)));
            TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
            TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));  // two fit
            kernel<<<static_cast<unsigned>(n), kCeBlock, bytes, ctx.stream>>>(
                cdata<Z>(z), cdata<I>(targets), ignore_index, mdata<T>(losses), d, c, n, v, site);
          }
        } else {
          cross_entropy_rows_kernel<Z, T, G, I, kCeBlock, kCeBlock><<<static_cast<unsigned>(n), kCeBlock, 0, ctx.stream>>>(
              cdata<Z>(z), cdata<I>(targets), ignore_index, mdata<T>(losses), d, c, n, v, site);
        }
        TG_CUDA_CHECK_LAUNCH();
      };
      if (!dz.defined()) launch(static_cast<T*>(nullptr));
      else if (dz.dtype() == DType::bf16) launch(static_cast<kernels::bf16*>(dz.raw_data()));
      else launch(mdata<T>(dz));
      count_to_scalar_kernel<T><<<1, 1, 0, ctx.stream>>>(c, mdata<T>(count));
      TG_CUDA_CHECK_LAUNCH();
    });
  };
  if (z.dtype() == DType::bf16) return run.template operator()<kernels::bf16, float>();
  dispatch_float("cross_entropy", z.dtype(), [&]<class T>() { run.template operator()<T, T>(); });
}

void log_softmax_rows(const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(0), m = x.dim(1);
  if (n == 0 || m == 0) return;
  dispatch_float("log_softmax", x.dtype(), [&]<class T>() {
    if (m <= kWarpRowMax) {
      constexpr int64_t rows = kRowBlock / 32;
      log_softmax_warp_kernel<T><<<static_cast<unsigned>((n + rows - 1) / rows), kRowBlock, 0, stream_for(x)>>>(
          cdata<T>(x), mdata<T>(y), n, m);
    } else {
      log_softmax_kernel<T><<<static_cast<unsigned>(n), kRowBlock, 0, stream_for(x)>>>(cdata<T>(x), mdata<T>(y), m);
    }
    TG_CUDA_CHECK_LAUNCH();
  });
}

void log_softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = y.dim(0), m = y.dim(1);
  if (n == 0 || m == 0) return;
  dispatch_float("log_softmax", y.dtype(), [&]<class T>() {
    log_softmax_backward_kernel<T><<<static_cast<unsigned>(n), kRowBlock, 0, stream_for(y)>>>(cdata<T>(y), cdata<T>(dy),
                                                                                              mdata<T>(dx), m);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void nll_rows(const Tensor& lp, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count) {
  const int64_t n = lp.dim(0), v = lp.dim(1);
  DeviceContext& ctx = context(lp);
  const ErrorSite site = ctx.error_site("cross_entropy", n, v);
  Tensor counter = Tensor::zeros(Shape{1}, DType::i64, lp.device());
  auto* c = static_cast<unsigned long long*>(counter.raw_data());
  dispatch_float("cross_entropy", lp.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
      if (n > 0) {
        nll_kernel<T, I><<<blocks_for(n), kBlock, 0, ctx.stream>>>(cdata<T>(lp), cdata<I>(targets), ignore_index,
                                                                   mdata<T>(losses), c, n, v, site);
        TG_CUDA_CHECK_LAUNCH();
      }
      count_to_scalar_kernel<T><<<1, 1, 0, ctx.stream>>>(c, mdata<T>(count));
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void nll_log_softmax_backward(const Tensor& lp, const Tensor& targets, int64_t ignore_index, const Tensor& dloss,
                              const Tensor& divisor, Tensor& dlogits) {
  const int64_t n = lp.dim(0), v = lp.dim(1);
  if (n == 0 || v == 0) return;
  dispatch_float("cross_entropy_backward", lp.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy_backward", targets.dtype(), [&]<class I>() {
      nll_log_softmax_backward_kernel<T, I><<<static_cast<unsigned>(n), kRowBlock, 0, stream_for(lp)>>>(
          cdata<T>(lp), cdata<I>(targets), ignore_index, cdata<T>(dloss), dloss.numel() != 1,
          divisor.defined() ? cdata<T>(divisor) : nullptr, mdata<T>(dlogits), v);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace tapegrad::cuda
