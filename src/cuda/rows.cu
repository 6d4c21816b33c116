// CUDA row kernels: gather and its scatter backward, softmax and its backward, cross-entropy and
// its backward. The CPU versions (src/kernels/cpu/rows.cpp) are the reference; Note [cross-entropy
// arithmetic] there says why f64 and f32 compute the loss differently.
//
// Rules:
// - f64 rows: one thread per row, the CPU's arithmetic exactly (cr_exp, ExactSum, cr_log), so
//   probabilities and losses equal the CPU's bit for bit.
// - f32 rows: one warp per row; each lane accumulates its columns in double in order, then a
//   fixed butterfly adds the lanes: deterministic, and off from the CPU only through expf (and,
//   in the f32 loss, CUDA's double log, within an ulp of the CPU's before the rounding to f32;
//   the loss feeds no gradient).
// - The gather's backward adds each destination row's contributions in increasing position, the
//   CPU's order, so the CPU's bits, with no atomics; a repeated id accumulates (overwrite: the last
//   wins). Small tables take a warp per destination row (Note [scatter by row]); up to 1024 ids,
//   each block ranks the ids in shared memory and a warp walks one run of equal ids for 32 columns
//   (Note [ranked scatter]); beyond that, a radix sort of the ids in global memory and a warp per
//   run (Note [sorted scatter]).
// - Keep kernels small: a kernel of hundreds of KB of unrolled code spends its time fetching
//   instructions (Note [scatter by row]).
// - An id or target out of range is recorded (Note [kernel errors] in memory.cu) and its access
//   skipped; the host reports it at the next synchronization.
#include <cub/device/device_radix_sort.cuh>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/cuda/exact_sum.cuh"
#include "tapegrad/kernels/cr_math.hpp"

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
  chain_start();
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

// Note [sorted scatter]
// Many ids into a large table (GPT-2's 16384 tokens into 50304 rows) fit neither the by-row kernel
// (rows * ids too large) nor the ranked one (ids sorted in one block's shared memory), and the
// column-serial kernel above walks all the ids for every column: 16384 dependent adds, 8 ms. So
// the positions are sorted by id in global memory (cub's radix sort of (id, position) pairs, which
// is stable: a run of equal ids keeps its positions in increasing order), and a warp takes each
// run that starts in its stretch of 64 sorted positions, for 32 columns, adding the run's rows in
// that order onto the destination row: the CPU's order, so its bits. A bad id sorts last (as the
// table's row count) and is skipped, recorded by the kernel that makes the keys.
constexpr int64_t kSortedStretch = 64;  // sorted positions a warp owns the runs of
constexpr int kSortedWarps = 8;         // warps a block
constexpr int64_t kSortedMaxIds = int64_t{65535} * kSortedWarps * kSortedStretch;  // grid.y's limit

// keys[i] = ids[i] (rows where out of range), positions[i] = i
template <class I>
__global__ void scatter_keys_kernel(const I* ids, uint32_t* keys, int32_t* positions, int64_t b, int64_t nrows,
                                    ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < b; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = static_cast<int64_t>(ids[i]);
    const bool ok = r >= 0 && r < nrows;
    if (!ok) record_error(site, ErrorKind::index_out_of_range, i, r);
    keys[i] = static_cast<uint32_t>(ok ? r : nrows);
    positions[i] = static_cast<int32_t>(i);
  }
}

// dst (V, d)[keys[k]] += rows (B, d)[positions[k]], the runs of equal keys in sorted order; warp w of
// the grid's y owns the runs starting in sorted positions [64 w, 64 w + 64), lane l column 32 x + l.
template <class T>
__global__ void scatter_sorted_kernel(T* dst, const uint32_t* keys, const int32_t* positions, const T* rows,
                                      int64_t b, int64_t d, int64_t nrows, bool overwrite) {
  const int64_t col = blockIdx.x * int64_t{kWarp} + threadIdx.x % kWarp;
  const int64_t first = (blockIdx.y * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp) * kSortedStretch;
  const int64_t last = first + kSortedStretch < b ? first + kSortedStretch : b;
  for (int64_t s = first; s < last; ++s) {
    const uint32_t key = keys[s];
    if ((s > 0 && keys[s - 1] == key) || key >= nrows) continue;  // not a run's start, or bad ids
    if (col >= d) continue;
    T& o = dst[int64_t{key} * d + col];
    T acc = o;
    for (int64_t k = s; k < b && keys[k] == key; ++k) {
      const T v = rows[int64_t{positions[k]} * d + col];
      acc = overwrite ? v : acc + v;
    }
    o = acc;
  }
}

// Note [ranked scatter]
// A scatter that walks all B ids for every column is B dependent loads long: for a batch of a few
// hundred ids that is most of a small training step (docs/cuda.md, "Measurements behind the
// source comments"). Sorting the positions by (id, position) puts each destination row's
// contributions in a run, in the order the CPU adds them; runs are independent, so a warp per
// (run, 32 columns) adds them in parallel and the sum is still the CPU's, bit for bit. B is small
// here (a batch), so each block sorts the ids itself, in shared memory, with no global workspace
// and no second launch (so the kernel can be captured in a graph):
// - the key of position i is id_i * 1024 + i in 32 bits (ids below 2^21, B <= 1024), so keys are
//   distinct and position i's rank is #{j : key_j < key_i}: B compares a thread, four keys a
//   shared-memory load;
// - a run starts where the sorted ids change; the warp that takes it finds its end 32 ranks at a
//   time (a ballot);
// - the time is the longest run's (a common id, such as the space in a batch of text): its warp
//   loads 64 rows (32 in f64) before adding them in order, so it waits for memory once per 64
//   rows, not once per row.
// Tables small enough for a warp per row take the kernel of Note [scatter by row] instead; larger
// batches or tables take the column-serial kernel above.
constexpr int kRankedScatterMax = 1024;                   // positions sorted in shared memory, at most
constexpr int64_t kRankedScatterRows = int64_t{1} << 21;  // table rows, at most (keys fit 32 bits)
constexpr int kRankedScatterCols = 32;                    // the columns of one warp: its lanes
template <class T>
constexpr int kRunChunk = 256 / sizeof(T);                // a run's rows loaded together, then added in order

// dst (V, d)[ids[i]] += rows (B, d)[i], B <= kRankedScatterMax, V <= kRankedScatterRows, each row's
// contributions in increasing i (overwrite: the last i wins). Blocks: x over 32-column tiles, y over
// the runs.
template <class T, class I>
__global__ void scatter_ranked_kernel(T* dst, const I* ids, const T* rows, int b, int64_t d, int64_t nrows,
                                      bool overwrite, ErrorSite site) {
  __shared__ __align__(16) uint32_t key[kRankedScatterMax];  // id * 1024 + position; a bad id as nrows
  __shared__ int order[kRankedScatterMax];                   // order[rank] = position
  __shared__ int row_of[kRankedScatterMax];                  // row_of[rank] = its id (nrows for a bad one)
  chain_start();
  const int b4 = (b + 3) / 4;  // keys in fours; the padding (all ones) is below no key
  for (int i = b + static_cast<int>(threadIdx.x); i < 4 * b4; i += blockDim.x) key[i] = 0xffffffffu;
  __syncthreads();
  for (int i = threadIdx.x; i < b; i += blockDim.x) {
    const int64_t r = static_cast<int64_t>(ids[i]);
    const bool ok = r >= 0 && r < nrows;
    if (!ok && blockIdx.x == 0 && blockIdx.y == 0) record_error(site, ErrorKind::index_out_of_range, i, r);
    key[i] = static_cast<uint32_t>((ok ? r : nrows) * kRankedScatterMax + i);
  }
  __syncthreads();
  // `share` neighbouring lanes rank one position, each counting a slice of the keys; shuffles add
  // the counts. Every thread makes the same trips, so the shuffles have all their lanes.
  int share = 1;
  while (share < kWarp && share * 2 * b <= static_cast<int>(blockDim.x)) share *= 2;
  const uint4* key4 = reinterpret_cast<const uint4*>(key);
  for (int base = 0; base < b; base += blockDim.x / share) {
    const int i = base + threadIdx.x / share;
    const uint32_t k = i < b ? key[i] : 0;
    int rank = 0;
    if (i < b) {
      for (int j = threadIdx.x % share; j < b4; j += share) {
        const uint4 q = key4[j];
        rank += (q.x < k) + (q.y < k) + (q.z < k) + (q.w < k);
      }
    }
    for (int offset = share / 2; offset > 0; offset /= 2) rank += __shfl_xor_sync(0xffffffffu, rank, offset, share);
    if (i < b && threadIdx.x % share == 0) {
      order[rank] = i;
      row_of[rank] = static_cast<int>(k / kRankedScatterMax);
    }
  }
  __syncthreads();
  const int warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t col = blockIdx.x * int64_t{kRankedScatterCols} + lane;
  // Warp w of the blocks in y takes the ranks w, w + W, ... and walks the runs that start there.
  for (int start = blockIdx.y * warps + warp; start < b; start += gridDim.y * warps) {
    const int r = row_of[start];
    if (r == nrows || (start > 0 && row_of[start - 1] == r)) continue;  // a bad id, or not a run's start
    int end = start + 1;  // the run's end: the lanes look 32 ranks ahead at a time
    for (;;) {
      const bool same = end + lane < b && row_of[end + lane] == r;
      const unsigned differ = __ballot_sync(0xffffffffu, !same);
      if (differ) {
        end += __ffs(differ) - 1;
        break;
      }
      end += kWarp;
    }
    // Lanes past the last column load the last column's values and store nothing: the whole warp
    // stays in the loop, as __syncwarp needs.
    const int64_t c = col < d ? col : d - 1;
    T* o = dst + int64_t{r} * d + c;
    T acc = *o;
    for (int p = start; p < end; p += kRunChunk<T>) {  // a chunk's loads in flight together, then its adds in order
      T x[kRunChunk<T>];
#pragma unroll
      for (int u = 0; u < kRunChunk<T>; ++u) x[u] = rows[int64_t{order[min(p + u, end - 1)]} * d + c];
      __syncwarp();  // keeps the compiler from moving each load down to its add: all are in flight at once
#pragma unroll
      for (int u = 0; u < kRunChunk<T>; ++u)
        if (p + u < end) acc = overwrite ? x[u] : acc + x[u];
    }
    if (col < d) *o = acc;
  }
}

// Note [scatter by row]
// For a small table (rows * B <= 2^22: a character table and a batch of 16384 ids, say) one warp
// per (destination row, 32 columns) has a shorter critical path still. Each block copies the ids
// into shared memory, 1024 at a time (and block (0, 0) records a bad one); each warp then finds its
// row's positions in increasing order, 32 ids a ballot: the hits of one ballot take their slots in
// the warp's buffer of 64 at once (n + the hits below them), and whenever 32 are buffered the warp
// loads those 32 rows of the gradient together and adds them in order: the CPU's sum, bit for
// bit. Every warp reads every id (hence the limit), nothing waits on another warp but for the
// next 1024 ids, and a row with k hits waits for memory ceil(k / 32) times. A row no id points at
// is left alone, or written as zeros into a fresh gradient.
//
// Keep this kernel small. An earlier version held the ids in registers and unrolled the walk over
// them: hundreds of KB of machine code, and the kernel spent most of its time fetching instructions,
// not loading or adding (docs/cuda.md, "Measurements behind the source comments", has the timings).
constexpr int kByRowChunk = 1024;                    // ids a block holds in shared memory at a time
constexpr int64_t kByRowMaxWork = int64_t{1} << 22;  // rows * B, at most
constexpr int kByRowWarps = 8;                       // warps (rows) a block

template <class T, class I>
__global__ void __launch_bounds__(kByRowWarps* kWarp)
    scatter_by_row_kernel(T* dst, const I* ids, const T* rows, int b, int64_t d, int64_t nrows, bool overwrite,
                          bool fresh, ErrorSite site) {
  __shared__ int id[kByRowChunk];                    // -1 for a bad id
  __shared__ int hits[kByRowWarps][2 * kWarp];       // a warp's buffered positions, in order
  chain_start();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = blockIdx.y * int64_t{kByRowWarps} + warp;
  const bool mine = r < nrows;  // the same in the whole warp; a warp past the last row only loads ids
  const int64_t col = blockIdx.x * int64_t{kWarp} + lane;
  const int64_t c = col < d ? col : d - 1;  // lanes past the last column load it and store nothing
  int* h = hits[warp];
  T acc = fresh || !mine ? T(0) : dst[r * d + c];
  bool touched = false;
  int n = 0;  // buffered positions (the same in every lane)
  auto add = [&](int count) {  // the first count <= 32 buffered rows: loads in flight together, then the adds in order
    T x[kWarp];
#pragma unroll
    for (int u = 0; u < kWarp; ++u)
      if (u < count) x[u] = rows[int64_t{h[u]} * d + c];
#pragma unroll
    for (int u = 0; u < kWarp; ++u)
      if (u < count) acc = overwrite ? x[u] : acc + x[u];
  };
  const unsigned below = (1u << lane) - 1;
#pragma unroll 1
  for (int first = 0; first < b; first += kByRowChunk) {
    const int len = min(kByRowChunk, b - first);
    __syncthreads();  // every warp is done with the previous ids
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
      const int64_t v = static_cast<int64_t>(ids[first + i]);
      const bool bad = v < 0 || v >= nrows;
      if (bad && blockIdx.x == 0 && blockIdx.y == 0) record_error(site, ErrorKind::index_out_of_range, first + i, v);
      id[i] = bad ? -1 : static_cast<int>(v);
    }
    __syncthreads();
    if (!mine) continue;
#pragma unroll 1
    for (int base = 0; base < len; base += kWarp) {
      const bool hit = base + lane < len && id[base + lane] == r;
      const unsigned match = __ballot_sync(0xffffffffu, hit);
      if (hit) h[n + __popc(match & below)] = first + base + lane;
      n += __popc(match);
      touched = touched || match != 0;
      __syncwarp();
      if (n >= kWarp) {
        add(kWarp);
        n -= kWarp;
        const int carried = h[kWarp + lane];
        __syncwarp();
        if (lane < n) h[lane] = carried;
        __syncwarp();
      }
    }
  }
  if (!mine) return;
  if (n > 0) add(n);
  if (col < d && (fresh || touched)) dst[r * d + col] = acc;
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
// Rows of up to kWarp * Cache values are read once into registers (one trip to memory instead of
// three); longer rows are read again at each pass. Both give the same bits. Cache is the smallest
// of 8 and 16 that holds the row: unrolled for 16, a 256-wide row runs twice the instructions it
// needs, and in a kernel this short the extra instructions show in its time (docs/cuda.md,
// "Measurements behind the source comments").
template <int Cache>
__device__ inline void softmax_row_f32(const float* x, float* y, int64_t m, float* top_out, double* total_out) {
  const int lane = threadIdx.x % kWarp;
  float top = x[0];
  if (m <= kWarp * Cache) {
    float cached[Cache];
#pragma unroll
    for (int k = 0; k < Cache; ++k) {
      const int64_t j = lane + int64_t{k} * kWarp;
      cached[k] = j < m ? x[j] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < Cache; ++k)
      if (lane + int64_t{k} * kWarp < m) top = cached[k] > top ? cached[k] : top;
    top = warp_max(top);
    double part = 0.0;
#pragma unroll
    for (int k = 0; k < Cache; ++k) {
      if (lane + int64_t{k} * kWarp < m) {
        cached[k] = expf(cached[k] - top);
        part += cached[k];
      }
    }
    const double total = warp_sum(part);
#pragma unroll
    for (int k = 0; k < Cache; ++k) {
      const int64_t j = lane + int64_t{k} * kWarp;
      if (j < m) y[j] = static_cast<float>(cached[k] / total);
    }
    *top_out = top;
    *total_out = total;
    return;
  }
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
constexpr int row_cache_for(int64_t m) { return m <= kWarp * 8 ? 8 : 16; }

// y (n, m) = softmax of each row of x, f64: one thread per row.
__global__ void softmax_f64_kernel(const double* x, double* y, int64_t n, int64_t m, ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    if (!softmax_row_f64(x + i * m, y + i * m, m)) record_error(site, ErrorKind::sum_out_of_partials, i, ExactSum::kPartials);
}

// y (n, m) = softmax of each row of x, f32: one warp per row.
template <int Cache>
__global__ void softmax_f32_kernel(const float* x, float* y, int64_t n, int64_t m) {
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarp;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; i < n; i += warps) {
    float top;
    double total;
    softmax_row_f32<Cache>(x + i * m, y + i * m, m, &top, &total);
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
// With `reduced` set, also reduced () = sum(losses) / divisor in sum_all's order (fixed_order_sum),
// by the block that finishes last (blocks_done counts them, and that block puts it back to 0).
template <class I, int Cache>
__global__ void cross_entropy_f32_kernel(const float* logits, const I* targets, float* probs, float* losses, int64_t b,
                                         int64_t v, ErrorSite site, float* reduced, float divisor,
                                         uint32_t* blocks_done) {
  chain_start();
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; i < b; i += warps) {
    // The target's logit is loaded first, so its trip to memory overlaps the row's.
    const int64_t t = lane == 0 ? static_cast<int64_t>(targets[i]) : 0;
    const float target_logit = lane == 0 && t >= 0 && t < v ? logits[i * v + t] : 0.0f;
    float top;
    double total;
    softmax_row_f32<Cache>(logits + i * v, probs + i * v, v, &top, &total);
    if (lane == 0) {
      if (t >= 0 && t < v) {
        losses[i] = static_cast<float>(log(total) + top - static_cast<double>(target_logit));
      } else {
        record_error(site, ErrorKind::target_out_of_range, i, t);
        losses[i] = NAN;
      }
    }
  }
  if (!reduced) return;
  __shared__ bool last;
  __threadfence();  // this thread's losses are visible to every block before the count says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  __shared__ double slots[kSumSlots];
  const double total = fixed_order_sum(losses, b, slots);
  if (threadIdx.x == 0) {
    reduced[0] = static_cast<float>(total) / divisor;
    *blocks_done = 0;
  }
}

// dlogits (B, V) = ((probs - onehot(t)) / divisor) * g, g = dloss[0] or dloss[i] (per_row).
template <class T, class I>
__global__ void cross_entropy_backward_kernel(const T* probs, const I* targets, const T* dloss, bool per_row, T divisor,
                                              T* dlogits, int64_t b, int64_t v) {
  chain_start();
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
      launch_chained(gather_kernel<E, I>, blocks_for(b * d), kBlock, ctx.stream, cdata<E>(table), cdata<I>(ids),
                     mdata<E>(out), b, d, rows, site);
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
      const ErrorSite site = ctx.error_site("gather_backward", nrows, d);
      if (nrows * b <= kByRowMaxWork) {
        const dim3 grid(static_cast<unsigned>((d + kWarp - 1) / kWarp),
                        static_cast<unsigned>((nrows + kByRowWarps - 1) / kByRowWarps));
        launch_chained(scatter_by_row_kernel<T, I>, grid, kByRowWarps * kWarp, ctx.stream, mdata<T>(dst), cdata<I>(ids),
                       cdata<T>(rows), static_cast<int>(b), d, nrows, overwrite, false, site);
      } else if (b <= kRankedScatterMax && nrows < kRankedScatterRows) {
        const dim3 grid(static_cast<unsigned>((d + kRankedScatterCols - 1) / kRankedScatterCols), 4);
        launch_chained(scatter_ranked_kernel<T, I>, grid, kBlock, ctx.stream, mdata<T>(dst), cdata<I>(ids),
                       cdata<T>(rows), static_cast<int>(b), d, nrows, overwrite, site);
      } else if (b <= kSortedMaxIds && nrows < (int64_t{1} << 32)) {  // Note [sorted scatter]
        Tensor keys = Tensor::empty(Shape{2 * b}, DType::i32, dst.device());
        Tensor positions = Tensor::empty(Shape{2 * b}, DType::i32, dst.device());
        uint32_t* key = mdata<uint32_t>(keys);
        int32_t* pos = mdata<int32_t>(positions);
        scatter_keys_kernel<<<blocks_for(b), kBlock, 0, ctx.stream>>>(cdata<I>(ids), key, pos, b, nrows, site);
        TG_CUDA_CHECK_LAUNCH();
        int bits = 1;
        while (bits < 32 && (int64_t{1} << bits) <= nrows) ++bits;  // keys up to nrows (a bad id's)
        size_t temp_bytes = 0;
        TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, key, key + b, pos, pos + b,
                                                      static_cast<int>(b), 0, bits, ctx.stream));
        Tensor temp = Tensor::empty(Shape{static_cast<int64_t>(temp_bytes) + 1}, DType::u8, dst.device());
        TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, key, key + b, pos, pos + b,
                                                      static_cast<int>(b), 0, bits, ctx.stream));
        const dim3 grid(static_cast<unsigned>((d + kWarp - 1) / kWarp),
                        static_cast<unsigned>((b + kSortedWarps * kSortedStretch - 1) / (kSortedWarps * kSortedStretch)));
        scatter_sorted_kernel<<<grid, kSortedWarps * kWarp, 0, ctx.stream>>>(mdata<T>(dst), key + b, pos + b,
                                                                              cdata<T>(rows), b, d, nrows, overwrite);
      } else {
        scatter_kernel<<<blocks_for(d, 128), 128, 0, ctx.stream>>>(mdata<T>(dst), cdata<I>(ids), cdata<T>(rows), b, d,
                                                                  nrows, overwrite, site);
      }
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

// Into a fresh gradient the by-row kernel also writes the zeros; where it does not apply, a memset
// and the plain scatter.
void scatter_rows_fresh(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite) {
  const int64_t nrows = dst.dim(0), d = dst.dim(1), b = ids.numel();
  if (b == 0 || nrows * b > kByRowMaxWork || d == 0) {
    dst.zero_();
    scatter_rows(dst, ids, rows, overwrite);
    return;
  }
  DeviceContext& ctx = context(dst);
  dispatch_float("gather_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("gather_backward", ids.dtype(), [&]<class I>() {
      const dim3 grid(static_cast<unsigned>((d + kWarp - 1) / kWarp),
                      static_cast<unsigned>((nrows + kByRowWarps - 1) / kByRowWarps));
      launch_chained(scatter_by_row_kernel<T, I>, grid, kByRowWarps * kWarp, ctx.stream, mdata<T>(dst), cdata<I>(ids),
                     cdata<T>(rows), static_cast<int>(b), d, nrows, overwrite, true,
                     ctx.error_site("gather_backward", nrows, d));
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
      auto* kernel = row_cache_for(m) == 8 ? softmax_f32_kernel<8> : softmax_f32_kernel<16>;
      kernel<<<row_blocks(n), kBlock, 0, ctx.stream>>>(cdata<float>(x), mdata<float>(y), n, m);
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
        launch_chained(row_cache_for(v) == 8 ? cross_entropy_f32_kernel<I, 8> : cross_entropy_f32_kernel<I, 16>,
                       row_blocks(b), kBlock, ctx.stream, cdata<float>(logits), cdata<I>(targets), mdata<float>(probs),
                       mdata<float>(losses), b, v, site, nullptr, 1.0f, nullptr);
      }
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void cross_entropy_reduced(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor& out,
                           bool mean) {
  const int64_t b = logits.dim(0), v = logits.dim(1);
  if (logits.dtype() != DType::f32 || b * v == 0) {  // f64: the exact sum is its own kernel
    cross_entropy(logits, targets, probs, losses);
    if (mean) mean_all(losses, out);
    else sum_all(losses, out);
    return;
  }
  DeviceContext& ctx = context(logits);
  const ErrorSite site = ctx.error_site("cross_entropy", b, v);
  dispatch_index("cross_entropy", targets.dtype(), [&]<class I>() {
    launch_chained(row_cache_for(v) == 8 ? cross_entropy_f32_kernel<I, 8> : cross_entropy_f32_kernel<I, 16>,
                   row_blocks(b), kBlock, ctx.stream, cdata<float>(logits), cdata<I>(targets), mdata<float>(probs),
                   mdata<float>(losses), b, v, site, mdata<float>(out), mean ? static_cast<float>(b) : 1.0f,
                   ctx.blocks_done);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits) {
  const int64_t b = probs.dim(0), v = probs.dim(1);
  if (b * v == 0) return;
  const bool per_row = dloss.numel() != 1;
  dispatch_float("cross_entropy_backward", probs.dtype(), [&]<class T>() {
    dispatch_index("cross_entropy_backward", targets.dtype(), [&]<class I>() {
      launch_chained(cross_entropy_backward_kernel<T, I>, blocks_for(b * v), kBlock, stream_for(probs), cdata<T>(probs),
                     cdata<I>(targets), cdata<T>(dloss), per_row, static_cast<T>(divisor), mdata<T>(dlogits), b, v);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace tapegrad::cuda
