// CUDA attention kernels: scaled dot-product attention, forward and backward. The CPU versions
// (src/kernels/cpu/attention.cpp) are the reference; Note [attention arithmetic] there gives the
// formulas and their order.
//
// Rules:
// - f32 with head sizes d, dv <= 128: the flash kernels of Note [flash attention]. f32 arithmetic
//   with explicit fused multiply-adds (the build contracts nothing by itself) and CUDA's expf and
//   logf: within f32's reach of the CPU's double arithmetic, not its bits. Every sum runs in a
//   fixed order and there are no atomics, so every run gives the same bits.
// - f64, and f32 with a larger head: the reference kernels, a block per row, in the CPU's
//   arithmetic (ExactSum, cr_exp and cr_log for f64; double sums in index order for f32), so they
//   match the CPU to the ulps where glibc's exp and log differ from the correctly rounded ones.
// - An f64 sum that runs out of ExactSum's partials is recorded (Note [kernel errors] in memory.cu).
#include <climits>
#include <cstdlib>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/attention.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/cuda/exact_sum.cuh"
#include "tapegrad/kernels/cr_math.hpp"

namespace tapegrad::cuda {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// ----------------------------------------------------------------------------
// CUDA kernels: the flash kernels (f32)

// Note [flash attention]
// A block takes one (b, h) and a tile of 64 query rows (forward, dQ) or 64 key rows (dK and dV);
// its 256 threads are a 16 x 16 grid, thread (ty, tx) owning rows 4ty..4ty+3 of the tile and, of
// a (64, 64) tile of scores, columns tx, tx + 16, tx + 32, tx + 48 (so the 16 lanes that share a
// row are one half-warp: its reductions are 4 shuffles). The other operand streams through
// shared memory 64 rows at a time, padded to D + 4 floats a row (conflict-free float4 reads),
// D = 64 or 128, the head sizes rounded up, zeros in the padding.
// - forward: S = scale Q K^T for each key tile, masked (keys past Tk, and above the diagonal when
//   causal); the online softmax keeps each row's running max m and sum l, rescales the output
//   rows by exp(m_old - m_new) and adds P V (P through shared memory). At the end O = acc / l and
//   lse = m + log(l). No (Tq, Tk) matrix exists anywhere.
// - backward: delta = rowsum(dO * O) first (a thread a row). Then, per key tile, with K and V
//   resident: for each query tile P^T = exp(scale K Q^T - lse), dV += P^T dO, dS^T = P^T * (V dO^T
//   - delta), dK += dS^T Q. And per query tile, with Q and dO resident: dQ += dS K over the key
//   tiles. P and dS are recomputed in both kernels, by the same operations in the same order, so
//   they are the same bits; the price of no atomics is two products more than one kernel would
//   make (7 tile products to 5), saved where dS fits a scratch (Note [dS kept]).
// - causal: a query tile stops at the diagonal tile and a key tile starts at it; the longest tiles
//   are launched first.
constexpr int kTile = 64;           // query rows, and keys, per tile
constexpr int kFlashThreads = 256;  // 16 x 16
constexpr int kFlashMaxHead = 128;
constexpr int kLdP = kTile + 4;     // row stride of a (64, 64) tile of scores in shared memory

template <int D>
struct Flash {
  static constexpr int ld = D + 4;          // row stride of a (64, D) tile in shared memory, floats
  static constexpr int tile = kTile * ld;   // floats of one (64, D) tile
  static constexpr int cols = D / 16;       // output columns per thread: col(c) = 64 (c / 4) + 4 tx + c % 4
};

// Bytes of shared memory for `tiles` (64, D) tiles and one (64, 64) tile of scores.
template <int D>
constexpr size_t flash_shared_bytes(int tiles) {
  return sizeof(float) * (static_cast<size_t>(tiles) * Flash<D>::tile + kTile * kLdP);
}

__device__ inline int thread_row() { return static_cast<int>(threadIdx.x) / 16; }  // ty
__device__ inline int thread_col() { return static_cast<int>(threadIdx.x) % 16; }  // tx

template <int D>
__device__ inline int out_col(int c) {
  return 64 * (c / 4) + 4 * thread_col() + c % 4;
}

__device__ inline float half_warp_max(float x) {
  for (int offset = 8; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ inline float half_warp_sum(float x) {
  for (int offset = 8; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ inline float component(const float4& x, int u) { return u == 0 ? x.x : u == 1 ? x.y : u == 2 ? x.z : x.w; }

// dst (64, D) in shared memory = rows [0, n) of src (w <= D columns a row, rows `ld` apart),
// zeros elsewhere.
template <int D>
__device__ void load_tile(float* dst, const float* src, int64_t n, int w, int64_t ld_src) {
  constexpr int ld = Flash<D>::ld;
  if (w % 4 == 0 && ld_src % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {  // rows of whole float4s
    const int w4 = w / 4;
    for (int e = threadIdx.x; e < kTile * D / 4; e += kFlashThreads) {
      const int r = e / (D / 4), c4 = e % (D / 4);
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < n && c4 < w4) x = reinterpret_cast<const float4*>(src + int64_t{r} * ld_src)[c4];
      *reinterpret_cast<float4*>(dst + r * ld + 4 * c4) = x;
    }
  } else {
    for (int e = threadIdx.x; e < kTile * D; e += kFlashThreads) {
      const int r = e / D, c = e % D;
      dst[r * ld + c] = r < n && c < w ? src[int64_t{r} * ld_src + c] : 0.f;
    }
  }
}

// Rows [t0, t0 + 64) of head hi of operand x (w columns) into a shared (64, D) tile.
template <int D>
__device__ void load_rows(float* dst, const float* x, const kernels::HeadRows& at, int64_t H, int64_t hi, int64_t t0,
                          int64_t T, int w) {
  load_tile<D>(dst, x + row_at(at, H, hi, t0), std::min<int64_t>(kTile, T - t0), w, at.row);
}

// s[i][j] += A[4ty + i] . B[tx + 16j] over the D columns of two (64, D) tiles, in column order.
template <int D>
__device__ void tile_dots(const float* A, const float* B, float (&s)[4][4]) {
  constexpr int ld = Flash<D>::ld;
  const float* a_rows = A + 4 * thread_row() * ld;
  const float* b_rows = B + thread_col() * ld;
#pragma unroll 4
  for (int c = 0; c < D; c += 4) {
    float4 a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(a_rows + i * ld + c);
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const float4*>(b_rows + 16 * j * ld + c);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = fmaf(a[i].x, b[j].x, s[i][j]);
        s[i][j] = fmaf(a[i].y, b[j].y, s[i][j]);
        s[i][j] = fmaf(a[i].z, b[j].z, s[i][j]);
        s[i][j] = fmaf(a[i].w, b[j].w, s[i][j]);
      }
  }
}

// acc[i][c] += sum_k P[4ty + i][k] B[k][col(c)] over k < 64, in k order: P a (64, 64) tile of
// scores, B a (64, D) tile.
template <int D>
__device__ void tile_pv(const float* P, const float* B, float (&acc)[4][Flash<D>::cols]) {
  constexpr int ld = Flash<D>::ld;
  const float* p_rows = P + 4 * thread_row() * kLdP;
  const float* b_cols = B + 4 * thread_col();
#pragma unroll 2
  for (int k = 0; k < kTile; k += 4) {
    float4 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = *reinterpret_cast<const float4*>(p_rows + i * kLdP + k);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
#pragma unroll
      for (int g = 0; g < D / 64; ++g) {
        const float4 b = *reinterpret_cast<const float4*>(b_cols + (k + u) * ld + 64 * g);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float pu = component(p[i], u);
          acc[i][4 * g + 0] = fmaf(pu, b.x, acc[i][4 * g + 0]);
          acc[i][4 * g + 1] = fmaf(pu, b.y, acc[i][4 * g + 1]);
          acc[i][4 * g + 2] = fmaf(pu, b.z, acc[i][4 * g + 2]);
          acc[i][4 * g + 3] = fmaf(pu, b.w, acc[i][4 * g + 3]);
        }
      }
    }
  }
}

// out (B, H, Tq, dv), lse (B*H, Tq) from q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv), each
// through its layout; a block per (b, h) and 64 query rows (Note [flash attention]).
template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(const float* q, const float* k, const float* v, float* out, float* lse,
                         const kernels::AttentionLayout at, bool causal, float scale, int64_t tiles) {
  const int64_t tq = at.Tq, tk = at.Tk, H = at.H;
  const int d = static_cast<int>(at.d), dv = static_cast<int>(at.dv);
  extern __shared__ float4 shared4[];
  float* Qs = reinterpret_cast<float*>(shared4);
  float* Ks = Qs + Flash<D>::tile;
  float* Vs = Ks + Flash<D>::tile;
  float* Ps = Vs + Flash<D>::tile;
  const int ty = thread_row(), tx = thread_col();
  const TileOf tile = tile_of(tiles, causal, kTile);
  const int64_t q0 = tile.first, hi = tile.head;
  load_rows<D>(Qs, q, at.q, H, hi, q0, tq, d);
  float m[4], l[4], acc[4][Flash<D>::cols];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < Flash<D>::cols; ++c) acc[i][c] = 0.f;
  }
  const int64_t keys = causal ? std::min<int64_t>(tk, q0 + kTile) : tk;
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    __syncthreads();  // the last tile's readers are done
    load_rows<D>(Ks, k, at.k, H, hi, k0, tk, d);
    load_rows<D>(Vs, v, at.v, H, hi, k0, tk, dv);
    __syncthreads();
    float s[4][4] = {};
    tile_dots<D>(Qs, Ks, s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = q0 + 4 * ty + i;
      float top = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t key = k0 + tx + 16 * j;
        s[i][j] = key < tk && (!causal || key <= row) ? s[i][j] * scale : -INFINITY;
        top = fmaxf(top, s[i][j]);
      }
      // finite: every row (padding rows too) sees key 0 in the first tile
      const float m_new = fmaxf(m[i], half_warp_max(top));
      const float alpha = expf(m[i] - m_new);  // 0 at the first tile
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = expf(s[i][j] - m_new);
        sum += s[i][j];
      }
      l[i] = l[i] * alpha + half_warp_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < Flash<D>::cols; ++c) acc[i][c] *= alpha;
#pragma unroll
      for (int j = 0; j < 4; ++j) Ps[(4 * ty + i) * kLdP + tx + 16 * j] = s[i][j];
    }
    __syncthreads();
    tile_pv<D>(Ps, Vs, acc);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = q0 + 4 * ty + i;
    if (row >= tq) continue;
    float* o = out + row_at(at.out, H, hi, row);
#pragma unroll
    for (int c = 0; c < Flash<D>::cols; ++c)
      if (out_col<D>(c) < dv) o[out_col<D>(c)] = acc[i][c] / l[i];
    if (tx == 0) lse[hi * tq + row] = m[i] + logf(l[i]);
  }
}

// delta (rows,) = rowsum(dout * out) over dv columns, a thread a row: fused multiply-adds in
// column order, tile_dots' arithmetic, so that where out = v exactly (a row that sees one key)
// dP - delta is exactly 0, as on the CPU (Note [attention arithmetic]). Stored in the f64 scratch.
__global__ void flash_delta_kernel(const float* out, const float* dout, double* delta, const kernels::AttentionLayout at) {
  const int64_t rows = at.B * at.H * at.Tq;
  for (int64_t row = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; row < rows; row += int64_t{gridDim.x} * blockDim.x) {
    const int64_t at_row = row_at(at.out, at.H, row / at.Tq, row % at.Tq);  // dout shares out's layout
    const float *g = dout + at_row, *o = out + at_row;
    float s = 0.f;
    int c = 0;
    if (reinterpret_cast<uintptr_t>(g) % 16 == 0 && reinterpret_cast<uintptr_t>(o) % 16 == 0)
      for (; c + 4 <= at.dv; c += 4) {  // the same order, four columns a load
        const float4 a = *reinterpret_cast<const float4*>(g + c), b = *reinterpret_cast<const float4*>(o + c);
        s = fmaf(a.x, b.x, s);
        s = fmaf(a.y, b.y, s);
        s = fmaf(a.z, b.z, s);
        s = fmaf(a.w, b.w, s);
      }
    for (; c < at.dv; ++c) s = fmaf(g[c], o[c], s);
    delta[row] = s;
  }
}

// dk (B, H, Tk, d), dv (B, H, Tk, dv) through their layouts: a block per (b, h) and 64 keys, K and
// V resident, the query tiles streaming (Note [flash attention]).
// Two blocks a multiprocessor where their shared memory allows (D = 64): at most 128 registers a
// thread, which this kernel's two sets of accumulators would otherwise pass.
template <int D>
__global__ void __launch_bounds__(kFlashThreads, D == 64 ? 2 : 1)
    flash_dkdv_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                      const double* delta, float* dk, float* dv_out, const kernels::AttentionLayout at, bool causal,
                      float scale, int64_t tiles, float* ds_out, int64_t query_tiles) {
  const int64_t tq = at.Tq, tk = at.Tk, H = at.H;
  const int d = static_cast<int>(at.d), dv = static_cast<int>(at.dv);
  extern __shared__ float4 shared4[];
  __shared__ float lse_s[kTile], delta_s[kTile];
  float* Ks = reinterpret_cast<float*>(shared4);
  float* Vs = Ks + Flash<D>::tile;
  float* Qs = Vs + Flash<D>::tile;
  float* Gs = Qs + Flash<D>::tile;  // dout
  float* Ps = Gs + Flash<D>::tile;  // P^T, then dS^T
  const int ty = thread_row(), tx = thread_col();
  const TileOf tile = tile_of(tiles, false, kTile);  // causal: the first key tiles see the most queries
  const int64_t k0 = tile.first, hi = tile.head;
  load_rows<D>(Ks, k, at.k, H, hi, k0, tk, d);
  load_rows<D>(Vs, v, at.v, H, hi, k0, tk, dv);
  float gk[4][Flash<D>::cols] = {}, gv[4][Flash<D>::cols] = {};
  for (int64_t q0 = causal ? k0 : 0; q0 < tq; q0 += kTile) {
    __syncthreads();  // the last tile's readers are done
    const int64_t nq = std::min<int64_t>(kTile, tq - q0);
    load_rows<D>(Qs, q, at.q, H, hi, q0, tq, d);
    load_rows<D>(Gs, dout, at.out, H, hi, q0, tq, dv);
    if (threadIdx.x < kTile) {
      lse_s[threadIdx.x] = threadIdx.x < nq ? lse[hi * tq + q0 + threadIdx.x] : 0.f;
      delta_s[threadIdx.x] = threadIdx.x < nq ? static_cast<float>(delta[hi * tq + q0 + threadIdx.x]) : 0.f;
    }
    __syncthreads();
    // whether the thread's key i sees its query j
    auto sees = [&](int i, int j) {
      const int64_t key = k0 + 4 * ty + i, query = q0 + tx + 16 * j;
      return key < tk && query < tq && (!causal || key <= query);
    };
    float p[4][4] = {}, ds[4][4] = {};
    tile_dots<D>(Ks, Qs, p);   // K[key] . Q[query]
    tile_dots<D>(Vs, Gs, ds);  // V[key] . dO[query] = dP^T
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        p[i][j] = sees(i, j) ? expf(p[i][j] * scale - lse_s[tx + 16 * j]) : 0.f;
        Ps[(4 * ty + i) * kLdP + tx + 16 * j] = p[i][j];
      }
    __syncthreads();
    tile_pv<D>(Ps, Gs, gv);  // dV += P^T dO
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) ds[i][j] = p[i][j] * (ds[i][j] - delta_s[tx + 16 * j]);
    __syncthreads();  // P^T read by all
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) Ps[(4 * ty + i) * kLdP + tx + 16 * j] = ds[i][j];
    if (ds_out) {  // the tile of dS^T for flash_dq_from_ds_kernel (Note [dS kept]): 0 where unseen, as there
      float* kept = ds_out + ((hi * tiles + k0 / kTile) * query_tiles + q0 / kTile) * (kTile * kTile);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) kept[(4 * ty + i) * kTile + tx + 16 * j] = sees(i, j) ? ds[i][j] : 0.f;
    }
    __syncthreads();
    tile_pv<D>(Ps, Qs, gk);  // dK += dS^T Q (times scale at the end)
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t key = k0 + 4 * ty + i;
    if (key >= tk) continue;
#pragma unroll
    for (int c = 0; c < Flash<D>::cols; ++c) {
      const int col = out_col<D>(c);
      if (col < d) dk[row_at(at.dk, H, hi, key) + col] = gk[i][c] * scale;
      if (col < dv) dv_out[row_at(at.dv_, H, hi, key) + col] = gv[i][c];
    }
  }
}

// dq's rows [q0, q0 + 64) of head hi = the thread's accumulators times scale.
template <int D>
__device__ void store_dq(float* dq, kernels::HeadRows rows, int64_t H, int64_t tq, int d, int64_t hi, int64_t q0,
                         const float (&gq)[4][Flash<D>::cols], float scale) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = q0 + 4 * thread_row() + i;
    if (row >= tq) continue;
#pragma unroll
    for (int c = 0; c < Flash<D>::cols; ++c)
      if (out_col<D>(c) < d) dq[row_at(rows, H, hi, row) + out_col<D>(c)] = gq[i][c] * scale;
  }
}

// dq (B, H, Tq, d) through its layout: a block per (b, h) and 64 query rows, Q and dO resident,
// the key tiles streaming (Note [flash attention]).
template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    flash_dq_kernel(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                    const double* delta, float* dq, const kernels::AttentionLayout at, bool causal, float scale,
                    int64_t tiles) {
  const int64_t tq = at.Tq, tk = at.Tk, H = at.H;
  const int d = static_cast<int>(at.d), dv = static_cast<int>(at.dv);
  extern __shared__ float4 shared4[];
  float* Qs = reinterpret_cast<float*>(shared4);
  float* Gs = Qs + Flash<D>::tile;  // dout
  float* Ks = Gs + Flash<D>::tile;
  float* Vs = Ks + Flash<D>::tile;
  float* Ps = Vs + Flash<D>::tile;  // dS
  const int ty = thread_row(), tx = thread_col();
  const TileOf tile = tile_of(tiles, causal, kTile);
  const int64_t q0 = tile.first, hi = tile.head;
  load_rows<D>(Qs, q, at.q, H, hi, q0, tq, d);
  load_rows<D>(Gs, dout, at.out, H, hi, q0, tq, dv);
  float lse_r[4], delta_r[4], gq[4][Flash<D>::cols] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = q0 + 4 * ty + i;
    lse_r[i] = row < tq ? lse[hi * tq + row] : 0.f;
    delta_r[i] = row < tq ? static_cast<float>(delta[hi * tq + row]) : 0.f;
  }
  const int64_t keys = causal ? std::min<int64_t>(tk, q0 + kTile) : tk;
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    __syncthreads();  // the last tile's readers are done
    load_rows<D>(Ks, k, at.k, H, hi, k0, tk, d);
    load_rows<D>(Vs, v, at.v, H, hi, k0, tk, dv);
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    tile_dots<D>(Qs, Ks, s);
    tile_dots<D>(Gs, Vs, dp);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t row = q0 + 4 * ty + i, key = k0 + tx + 16 * j;
        const bool seen = row < tq && key < tk && (!causal || key <= row);
        Ps[(4 * ty + i) * kLdP + tx + 16 * j] = seen ? expf(s[i][j] * scale - lse_r[i]) * (dp[i][j] - delta_r[i]) : 0.f;
      }
    __syncthreads();
    tile_pv<D>(Ps, Ks, gq);  // dQ += dS K (times scale at the end)
  }
  store_dq<D>(dq, at.dq, H, tq, d, hi, q0, gq, scale);
}

// Note [dS kept]
// flash_dq_kernel recomputes S and dP to get dS, two products of its three. Where the whole of dS
// fits a scratch of kKeptBytes, flash_dkdv_kernel stores each (64, 64) tile of dS^T it made and
// flash_dq_from_ds_kernel reads them back: dQ = scale dS K, one product. The tiles hold the bits
// flash_dq_kernel would have computed (the same operations on the same operands, 0 where a key is
// unseen), and dQ sums them over the keys in the same order, so either way gives the same dq.
// TAPEGRAD_ATTENTION_KEPT_BYTES=N sets another bound (0: never keep), for the tests that compare the two.
constexpr size_t kKeptBytes = size_t{256} << 20;

double kept_bound() {
  const char* env = std::getenv("TAPEGRAD_ATTENTION_KEPT_BYTES");
  return env && *env ? std::strtod(env, nullptr) : static_cast<double>(kKeptBytes);
}

// dq (B, H, Tq, d) through its layout from the kept tiles of dS^T (Note [dS kept]): a block per
// (b, h) and 64 query rows, the key tiles streaming with their tiles of dS.
template <int D>
__global__ void __launch_bounds__(kFlashThreads)
    flash_dq_from_ds_kernel(const float* k, const float* ds, float* dq, const kernels::AttentionLayout at, bool causal,
                            float scale, int64_t tiles, int64_t key_tiles) {
  extern __shared__ float4 shared4[];
  float* Ks = reinterpret_cast<float*>(shared4);
  float* Ps = Ks + Flash<D>::tile;  // dS, a row per query
  const int ty = thread_row();
  const int64_t tq = at.Tq, tk = at.Tk, H = at.H;
  const int d = static_cast<int>(at.d);
  const TileOf tile = tile_of(tiles, causal, kTile);
  const int64_t q0 = tile.first, hi = tile.head;
  float gq[4][Flash<D>::cols] = {};
  const int64_t keys = causal ? std::min<int64_t>(tk, q0 + kTile) : tk;
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    __syncthreads();  // the last tile's readers are done
    load_rows<D>(Ks, k, at.k, H, hi, k0, tk, d);
    const float* kept = ds + ((hi * key_tiles + k0 / kTile) * tiles + q0 / kTile) * (kTile * kTile);
    for (int e = threadIdx.x; e < kTile * kTile; e += kFlashThreads) Ps[(e % kTile) * kLdP + e / kTile] = kept[e];
    __syncthreads();
    tile_pv<D>(Ps, Ks, gq);  // dQ += dS K (times scale at the end)
  }
  store_dq<D>(dq, at.dq, H, tq, d, hi, q0, gq, scale);
}

// ----------------------------------------------------------------------------
// CUDA kernels: the reference kernels (f64; f32 with a head over 128)

// Note [reference attention kernels]
// The CPU's loops (cpu/attention.cpp) with a block per row: the threads compute a chunk of 128
// scores (or probabilities) into shared memory at a time, and the sums that cross the chunk are
// added in index order by the thread that owns them: the row's normaliser by thread 0, an output
// column by its thread. Each pass recomputes the scores it needs, so nothing of size Tk is
// stored. A sum is the CPU's sum_of: correctly rounded for f64, in double in order for f32.
constexpr int kRefThreads = 128;

template <class T>
struct RefSum;
template <>
struct RefSum<double> {
  ExactSum sum;
  __device__ void add(double x) { sum.add(x); }
  __device__ double result() const { return sum.result(); }
  __device__ bool ok() const { return !sum.out_of_partials; }
};
template <>
struct RefSum<float> {
  double sum = 0.0;
  __device__ void add(double x) { sum += x; }
  __device__ double result() const { return sum; }
  __device__ bool ok() const { return true; }
};

// a . b over n, in the CPU's arithmetic; clears ok when the sum ran out of partials.
template <class T>
__device__ double ref_dot(const T* a, const T* b, int64_t n, bool& ok) {
  RefSum<T> s;
  for (int64_t c = 0; c < n; ++c) s.add(static_cast<double>(a[c]) * b[c]);
  ok = ok && s.ok();
  return s.result();
}

// The sizes and inputs every reference kernel reads: q (heads, Tq, d), k (heads, Tk, d), v (heads, Tk, dv).
template <class T>
struct RefArgs {
  const T *q, *k, *v;
  int64_t heads, tq, tk, d, dv;
  bool causal;
  double scale;
  ErrorSite site;
  // (q_i . k_j) * scale for query row i and key j of head h
  __device__ double score(int64_t h, int64_t i, int64_t j, bool& ok) const {
    return ref_dot(q + (h * tq + i) * d, k + (h * tk + j) * d, d, ok) * scale;
  }
};

// out (heads, Tq, dv) and lse (heads, Tq): a block per query row.
template <class T>
__global__ void __launch_bounds__(kRefThreads) attention_forward_ref_kernel(RefArgs<T> a, T* out, T* lse) {
  __shared__ double chunk[kRefThreads];  // a chunk's exponentials or probabilities
  __shared__ double top_of[kRefThreads];
  __shared__ double total_of_row;
  const int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < a.heads * a.tq; row += gridDim.x) {
    const int64_t h = row / a.tq, i = row % a.tq, keys = a.causal ? i + 1 : a.tk;
    const T* vh = a.v + h * a.tk * a.dv;
    bool ok = true;
    double top = -INFINITY;  // the row's max score
    for (int64_t j = t; j < keys; j += kRefThreads) {
      const double s = a.score(h, i, j, ok);
      top = s > top ? s : top;
    }
    top_of[t] = top;
    __syncthreads();
    for (int half = kRefThreads / 2; half > 0; half /= 2) {
      if (t < half && top_of[t + half] > top_of[t]) top_of[t] = top_of[t + half];
      __syncthreads();
    }
    top = top_of[0];
    RefSum<T> total;  // thread 0's: the exponentials in key order
    for (int64_t j0 = 0; j0 < keys; j0 += kRefThreads) {
      if (j0 + t < keys) chunk[t] = cr_exp(a.score(h, i, j0 + t, ok) - top);
      __syncthreads();
      if (t == 0)
        for (int64_t u = 0; u < std::min<int64_t>(kRefThreads, keys - j0); ++u) total.add(chunk[u]);
      __syncthreads();
    }
    if (t == 0) {
      total_of_row = total.result();
      ok = ok && total.ok();
    }
    __syncthreads();
    const double l = total_of_row;
    for (int64_t c0 = 0; c0 < a.dv; c0 += kRefThreads) {  // thread t owns column c0 + t
      const int64_t c = c0 + t;
      RefSum<T> acc;
      for (int64_t j0 = 0; j0 < keys; j0 += kRefThreads) {
        if (j0 + t < keys) chunk[t] = cr_exp(a.score(h, i, j0 + t, ok) - top) / l;
        __syncthreads();
        if (c < a.dv)
          for (int64_t u = 0; u < std::min<int64_t>(kRefThreads, keys - j0); ++u) acc.add(chunk[u] * vh[(j0 + u) * a.dv + c]);
        __syncthreads();
      }
      ok = ok && acc.ok();
      if (c < a.dv) out[row * a.dv + c] = static_cast<T>(acc.result());
    }
    if (t == 0) lse[row] = static_cast<T>(top + cr_log(l));
    if (!ok) record_error(a.site, ErrorKind::sum_out_of_partials, row, ExactSum::kPartials);
    __syncthreads();  // shared memory is the next row's
  }
}

// delta (heads, Tq) = rowsum(dout * out) and dq (heads, Tq, d): a block per query row.
template <class T>
__global__ void __launch_bounds__(kRefThreads)
    attention_dq_ref_kernel(RefArgs<T> a, const T* out, const T* dout, const T* lse, double* delta, T* dq) {
  __shared__ double chunk[kRefThreads];  // a chunk's dS
  __shared__ double delta_of_row;
  const int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < a.heads * a.tq; row += gridDim.x) {
    const int64_t h = row / a.tq, i = row % a.tq, keys = a.causal ? i + 1 : a.tk;
    const T* gi = dout + row * a.dv;
    const T* kh = a.k + h * a.tk * a.d;
    bool ok = true;
    if (t == 0) {
      delta_of_row = delta[row] = ref_dot(gi, out + row * a.dv, a.dv, ok);
    }
    __syncthreads();
    const double d_i = delta_of_row, lse_i = lse[row];
    for (int64_t c0 = 0; c0 < a.d; c0 += kRefThreads) {
      const int64_t c = c0 + t;
      RefSum<T> acc;
      for (int64_t j0 = 0; j0 < keys; j0 += kRefThreads) {
        const int64_t j = j0 + t;
        if (j < keys) {
          const double p = cr_exp(a.score(h, i, j, ok) - lse_i);
          chunk[t] = p * (ref_dot(gi, a.v + (h * a.tk + j) * a.dv, a.dv, ok) - d_i);
        }
        __syncthreads();
        if (c < a.d)
          for (int64_t u = 0; u < std::min<int64_t>(kRefThreads, keys - j0); ++u) acc.add(chunk[u] * kh[(j0 + u) * a.d + c]);
        __syncthreads();
      }
      ok = ok && acc.ok();
      if (c < a.d) dq[row * a.d + c] = static_cast<T>(acc.result() * a.scale);
    }
    if (!ok) record_error(a.site, ErrorKind::sum_out_of_partials, row, ExactSum::kPartials);
    __syncthreads();
  }
}

// dk (heads, Tk, d) and dv (heads, Tk, dv): a block per key row, after attention_dq_ref_kernel
// wrote delta.
template <class T>
__global__ void __launch_bounds__(kRefThreads) attention_dkdv_ref_kernel(RefArgs<T> a, const T* dout, const T* lse,
                                                                         const double* delta, T* dk, T* dv) {
  __shared__ double chunk_p[kRefThreads], chunk_ds[kRefThreads];
  const int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < a.heads * a.tk; row += gridDim.x) {
    const int64_t h = row / a.tk, j = row % a.tk, first = a.causal ? j : 0;  // the queries that see key j
    const T* vj = a.v + row * a.dv;
    bool ok = true;
    for (int64_t c0 = 0; c0 < a.d || c0 < a.dv; c0 += kRefThreads) {
      const int64_t c = c0 + t;
      RefSum<T> acc_v, acc_k;
      for (int64_t i0 = first; i0 < a.tq; i0 += kRefThreads) {
        const int64_t i = i0 + t;
        if (i < a.tq) {
          const int64_t r = h * a.tq + i;
          const double p = cr_exp(a.score(h, i, j, ok) - static_cast<double>(lse[r]));
          chunk_p[t] = p;
          chunk_ds[t] = p * (ref_dot(dout + r * a.dv, vj, a.dv, ok) - delta[r]);
        }
        __syncthreads();
        const int64_t n = std::min<int64_t>(kRefThreads, a.tq - i0);
        const int64_t r0 = h * a.tq + i0;
        if (c < a.dv)
          for (int64_t u = 0; u < n; ++u) acc_v.add(chunk_p[u] * dout[(r0 + u) * a.dv + c]);
        if (c < a.d)
          for (int64_t u = 0; u < n; ++u) acc_k.add(chunk_ds[u] * a.q[(r0 + u) * a.d + c]);
        __syncthreads();
      }
      ok = ok && acc_v.ok() && acc_k.ok();
      if (c < a.dv) dv[row * a.dv + c] = static_cast<T>(acc_v.result());
      if (c < a.d) dk[row * a.d + c] = static_cast<T>(acc_k.result() * a.scale);
    }
    if (!ok) record_error(a.site, ErrorKind::sum_out_of_partials, row, ExactSum::kPartials);
  }
}

// ----------------------------------------------------------------------------
// kernel launchers

struct Sizes {
  int64_t heads, tq, tk, d, dv;
  Sizes(const Tensor& q, const Tensor& v)
      : heads(q.dim(0) * q.dim(1)), tq(q.dim(2)), tk(v.dim(2)), d(q.dim(3)), dv(v.dim(3)) {}
  explicit Sizes(const kernels::AttentionLayout& at) : heads(at.B * at.H), tq(at.Tq), tk(at.Tk), d(at.d), dv(at.dv) {}
  // The flash kernels' D (64 or 128) for f32 or bf16 heads that fit, else 0 (the reference kernels;
  // bf16 has no other kernels).
  int flash_head(DType t) const {
    if ((t != DType::f32 && t != DType::bf16) || d > kFlashMaxHead || dv > kFlashMaxHead) return 0;
    return d <= 64 && dv <= 64 ? 64 : 128;
  }
};

unsigned ref_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 20)); }

// The grid of a flash launch over `rows` rows of every head: a block per (head, tile of 64).
unsigned flash_grid(const Sizes& n, int64_t rows, int64_t* tiles) {
  *tiles = (rows + kTile - 1) / kTile;
  if (*tiles > 0 && n.heads > INT_MAX / *tiles)
    throw Error(std::string("[") + kOp + "] " + std::to_string(n.heads) + " heads of " + std::to_string(rows) +
                " rows are more tiles of 64 than one CUDA launch takes (2^31 - 1)");
  return static_cast<unsigned>(n.heads * *tiles);
}

// The kernel may take `bytes` of dynamic shared memory, and the multiprocessor gives shared memory
// all of its carve-out, so that as many blocks fit as the registers allow.
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
}

template <int D>
void flash_forward(const Sizes& n, const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionLayout& at,
                   bool causal, double scale, Tensor& out, Tensor& lse) {
  int64_t tiles = 0;
  const unsigned grid = flash_grid(n, n.tq, &tiles);
  const size_t bytes = flash_shared_bytes<D>(3);
  allow_shared(flash_forward_kernel<D>, bytes);
  flash_forward_kernel<D><<<grid, kFlashThreads, bytes, stream_for(q)>>>(
      cdata<float>(q), cdata<float>(k), cdata<float>(v), mdata<float>(out), mdata<float>(lse), at, causal,
      static_cast<float>(scale), tiles);
  TG_CUDA_CHECK_LAUNCH();
}

template <int D>
void flash_backward(const Sizes& n, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& dout, const Tensor& lse, const kernels::AttentionLayout& at, bool causal,
                    double scale, Tensor& delta, Tensor& dq, Tensor& dk, Tensor& dv) {
  const cudaStream_t stream = stream_for(q);
  const float s = static_cast<float>(scale);
  if (n.tq > 0) {
    flash_delta_kernel<<<blocks_for(n.heads * n.tq, 128), 128, 0, stream>>>(cdata<float>(out), cdata<float>(dout),
                                                                            mdata<double>(delta), at);
    TG_CUDA_CHECK_LAUNCH();
  }
  const size_t bytes = flash_shared_bytes<D>(4);
  const int threads = kFlashThreads;
  int64_t key_tiles = 0, query_tiles = 0;
  const unsigned key_grid = flash_grid(n, n.tk, &key_tiles);
  const unsigned query_grid = n.tq > 0 ? flash_grid(n, n.tq, &query_tiles) : 0;
  // dS kept for the dq kernel when it fits (Note [dS kept]); the counts are bounded by the grids'
  const double kept_bytes = static_cast<double>(n.heads) * static_cast<double>(key_tiles) *
                            static_cast<double>(query_tiles) * (kTile * kTile * sizeof(float));
  Tensor kept;
  if (n.tq > 0 && kept_bytes <= kept_bound())
    kept = Tensor::empty(Shape{n.heads * key_tiles * query_tiles * kTile * kTile}, DType::f32, q.device());
  auto dkdv = [&](auto kernel) {
    allow_shared(kernel, bytes);
    kernel<<<key_grid, threads, bytes, stream>>>(cdata<float>(q), cdata<float>(k), cdata<float>(v), cdata<float>(dout),
                                                 cdata<float>(lse), cdata<double>(delta), mdata<float>(dk),
                                                 mdata<float>(dv), at, causal, s, key_tiles,
                                                 kept.defined() ? mdata<float>(kept) : nullptr, query_tiles);
    TG_CUDA_CHECK_LAUNCH();
  };
  dkdv(flash_dkdv_kernel<D>);
  if (n.tq == 0) return;
  if (kept.defined()) {  // one product over the kept f32 tiles, whichever kernel made them
    const size_t kept_shared = flash_shared_bytes<D>(1);
    allow_shared(flash_dq_from_ds_kernel<D>, kept_shared);
    flash_dq_from_ds_kernel<D><<<query_grid, kFlashThreads, kept_shared, stream>>>(
        cdata<float>(k), cdata<float>(kept), mdata<float>(dq), at, causal, s, query_tiles, key_tiles);
    TG_CUDA_CHECK_LAUNCH();
    return;
  }
  auto dq_kernel = [&](auto kernel) {
    allow_shared(kernel, bytes);
    kernel<<<query_grid, threads, bytes, stream>>>(cdata<float>(q), cdata<float>(k), cdata<float>(v), cdata<float>(dout),
                                                   cdata<float>(lse), cdata<double>(delta), mdata<float>(dq), at, causal,
                                                   s, query_tiles);
    TG_CUDA_CHECK_LAUNCH();
  };
  dq_kernel(flash_dq_kernel<D>);
}

template <class T>
RefArgs<T> ref_args(const Sizes& n, const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                    const char* op) {
  return {cdata<T>(q), cdata<T>(k), cdata<T>(v), n.heads, n.tq, n.tk, n.d, n.dv, causal, scale,
          context(q).error_site(op, n.tq, n.tk)};
}

}  // namespace

bool attention_takes_layout(DType dtype, const kernels::AttentionLayout& at) {
  return Sizes(at).flash_head(dtype) != 0;
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionLayout& at,
                       bool causal, double scale, Tensor& out, Tensor& lse, kernels::AttentionProducts products) {
  const Sizes n(at);
  if (n.heads * n.tq == 0) return;
  const int D = n.flash_head(q.dtype());
  if (D && (products == kernels::AttentionProducts::bf16 || q.dtype() == DType::bf16))  // Note [bf16 flash attention]
    return flash_bf16_forward(q, k, v, at, D, causal, scale, out, lse);
  switch (D) {
    case 64: return flash_forward<64>(n, q, k, v, at, causal, scale, out, lse);
    case 128: return flash_forward<128>(n, q, k, v, at, causal, scale, out, lse);
    default: throw Error(std::string("[") + kOp + "] no CUDA kernel takes this layout (f32 heads up to 128 do)");
  }
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const kernels::AttentionLayout& at, bool causal, double scale,
                        Tensor& delta, Tensor& dq, Tensor& dk, Tensor& dv, kernels::AttentionProducts products) {
  const Sizes n(at);
  if (n.heads == 0) return;
  const int D = n.flash_head(q.dtype());
  if (D && (products == kernels::AttentionProducts::bf16 || q.dtype() == DType::bf16))  // delta: their own f32 scratch
    return flash_bf16_backward(q, k, v, out, dout, lse, at, D, causal, scale, dq, dk, dv);
  switch (D) {
    case 64: return flash_backward<64>(n, q, k, v, out, dout, lse, at, causal, scale, delta, dq, dk, dv);
    case 128: return flash_backward<128>(n, q, k, v, out, dout, lse, at, causal, scale, delta, dq, dk, dv);
    default: throw Error(std::string("[") + kOp + "] no CUDA kernel takes this layout (f32 heads up to 128 do)");
  }
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, Tensor& out,
                       Tensor& lse) {
  const Sizes n(q, v);
  if (n.heads * n.tq == 0) return;
  if (n.flash_head(q.dtype()))
    return cuda::attention_forward(q, k, v, kernels::AttentionLayout::contiguous(q.dim(0), q.dim(1), n.tq, n.tk, n.d, n.dv),
                             causal, scale, out, lse);
  dispatch_float(kOp, q.dtype(), [&]<class T>() {
    attention_forward_ref_kernel<T><<<ref_blocks(n.heads * n.tq), kRefThreads, 0, stream_for(q)>>>(
        ref_args<T>(n, q, k, v, causal, scale, kOp), mdata<T>(out), mdata<T>(lse));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, bool causal, double scale, Tensor& delta, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  const Sizes n(q, v);
  if (n.heads == 0) return;
  if (n.flash_head(q.dtype()))
    return cuda::attention_backward(q, k, v, out, dout, lse,
                              kernels::AttentionLayout::contiguous(q.dim(0), q.dim(1), n.tq, n.tk, n.d, n.dv), causal,
                              scale, delta, dq, dk, dv);
  const char* op = "scaled_dot_product_attention_backward";
  dispatch_float(op, q.dtype(), [&]<class T>() {
    const RefArgs<T> a = ref_args<T>(n, q, k, v, causal, scale, op);
    const cudaStream_t stream = stream_for(q);
    if (n.tq > 0) {
      attention_dq_ref_kernel<T><<<ref_blocks(n.heads * n.tq), kRefThreads, 0, stream>>>(
          a, cdata<T>(out), cdata<T>(dout), cdata<T>(lse), mdata<double>(delta), mdata<T>(dq));
      TG_CUDA_CHECK_LAUNCH();
    }
    if (n.tk > 0) {
      attention_dkdv_ref_kernel<T><<<ref_blocks(n.heads * n.tk), kRefThreads, 0, stream>>>(
          a, cdata<T>(dout), cdata<T>(lse), cdata<double>(delta), mdata<T>(dk), mdata<T>(dv));
      TG_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace tapegrad::cuda
