// CUDA kernels of the value-embed family: the P-plane gather, its backward into the persistent
// buffer (atomic and deterministic), the pull's select and take, and the sparse SGD/AdamW row
// updates. The CPU versions (src/kernels/cpu/value_embed.cpp) are the reference; Note [value-embed
// arithmetic] in src/ops/value_embed.cpp is the arithmetic both follow.
//
// Rules:
// - Rows move in packs of N elements with the widest aligned loads: 16 bytes whenever the row
//   length allows (D a multiple of 8), down to single elements for odd D. A group of up to 32
//   lanes works on one row; row offsets are 64-bit.
// - The atomic mode adds a pack with one vector reduction: red.v4.f16x2 (8 halves) into an f16
//   buffer, red.v4.f32 into an f32 one. Never scalar f16 atomics (they collapse under contention).
//   From ValueEmbedTuning::combine_min_reductions up it first groups equal ids (in the buffer's
//   workspace) and adds each id's run once per chunk of grouped positions (Note [combining duplicate
//   ids]); below that, or without a workspace, each contribution is its own reduction.
// - The deterministic mode uses no atomics: a stable radix sort of the ids, one block per chunk of
//   kValueEmbedChunk sorted positions, chunk-crossing rows finished by a second kernel in chunk
//   order. So it gives the CPU's bits.
// - Nothing here waits for the device except value_embed_select_touched. An out-of-range id is
//   recorded in the device's error slot (Note [kernel errors] in memory.cu) and its row skipped
//   (the gather writes zeros there).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/value_embed.hpp"

namespace tapegrad::cuda {

// ----------------------------------------------------------------------------
// CUDA kernels

constexpr int kChunk = static_cast<int>(kernels::kValueEmbedChunk);
static_assert(kChunk == 64, "the deterministic kernels keep a chunk's run starts in one 64-bit mask");

// ---- packs: N consecutive elements, moved as 16-byte units (or narrower when N * sizeof(T) < 16)

template <int kBytes> struct Unit;
template <> struct Unit<16> { using type = uint4; };
template <> struct Unit<8> { using type = uint2; };
template <> struct Unit<4> { using type = uint32_t; };
template <> struct Unit<2> { using type = unsigned short; };

// out = p[0..N); kReadOnly: through the non-coherent cache (data no thread of the kernel writes).
template <bool kReadOnly, class T, int N>
__device__ inline void load_pack(const T* p, T (&out)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T)), kUnit = kBytes < 16 ? kBytes : 16;
  using U = typename Unit<kUnit>::type;
  U raw[kBytes / kUnit];
#pragma unroll
  for (int k = 0; k < kBytes / kUnit; ++k)
    raw[k] = kReadOnly ? __ldg(reinterpret_cast<const U*>(p) + k) : reinterpret_cast<const U*>(p)[k];
  memcpy(out, raw, kBytes);
}

template <class T, int N>
__device__ inline void store_pack(T* p, const T (&in)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T)), kUnit = kBytes < 16 ? kBytes : 16;
  using U = typename Unit<kUnit>::type;
  union {
    T elements[N];
    U units[kBytes / kUnit];
  } raw;  // a union, not memcpy: nvcc then stores whole units (st.global.v4) for 2-byte elements too
#pragma unroll
  for (int k = 0; k < N; ++k) raw.elements[k] = in[k];
#pragma unroll
  for (int k = 0; k < kBytes / kUnit; ++k) reinterpret_cast<U*>(p)[k] = raw.units[k];
}

__device__ inline float widen(float x) { return x; }
__device__ inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float widen(__half x) { return __half2float(x); }

template <class T> __device__ inline T narrow(float x);  // round to nearest even
template <> __device__ inline float narrow<float>(float x) { return x; }
template <> __device__ inline __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ inline __half narrow<__half>(float x) { return __float2half_rn(x); }

// acc[0..N) += p[0..N) widened to f32
template <class G, int N>
__device__ inline void add_pack(const G* p, float (&acc)[N]) {
  G g[N];
  load_pack<true>(p, g);
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = acc[k] + widen(g[k]);
}

// p[0..N) = round(p + x), by the only thread that touches these elements (the deterministic mode).
template <class S, int N>
__device__ inline void add_once(S* p, const float (&x)[N]) {
  S cur[N];
  load_pack<false>(p, cur);
#pragma unroll
  for (int k = 0; k < N; ++k) cur[k] = narrow<S>(widen(cur[k]) + x[k]);
  store_pack(p, cur);
}

// p[0..N) += x atomically (the atomic mode). f16: pairs rounded to f16x2, 8 halves in one vector red.
template <int N>
__device__ inline void red_add(__half* p, const float (&x)[N]) {
  if constexpr (N == 1) {
    atomicAdd(p, __float2half_rn(x[0]));
  } else if constexpr (N == 2) {
    atomicAdd(reinterpret_cast<__half2*>(p), __floats2half2_rn(x[0], x[1]));
  } else {
    static_assert(N == 8, "packs of 1, 2 or 8");
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __half2 pair = __floats2half2_rn(x[2 * k], x[2 * k + 1]);  // low half = the lower address
      memcpy(&h[k], &pair, 4);
    }
    asm volatile("red.global.add.noftz.v4.f16x2 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)),
                 "r"(h[0]), "r"(h[1]), "r"(h[2]), "r"(h[3])
                 : "memory");
  }
}

template <int N>
__device__ inline void red_add(float* p, const float (&x)[N]) {
  if constexpr (N == 1) {
    atomicAdd(p, x[0]);
  } else if constexpr (N == 2) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(__cvta_generic_to_global(p)), "f"(x[0]), "f"(x[1])
                 : "memory");
  } else {
    static_assert(N == 8, "packs of 1, 2 or 8");
#pragma unroll
    for (int k = 0; k < 8; k += 4)
      asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p + k)),
                   "f"(x[k]), "f"(x[k + 1]), "f"(x[k + 2]), "f"(x[k + 3])
                   : "memory");
  }
}

// Loads and stores of up to kUnroll packs of a row are issued together, so each lane keeps several
// 16-byte loads in flight.
constexpr int kUnroll = 4;

// ---- the lookup

// planes (P, T, D) <- weight rows p*V + ids[i], converted from W to O (a copy when they are the
// same), N elements per pack, `chunks` packs per row, `group` lanes per row.
template <class W, class O, class I, int N>
__global__ void gather_kernel(const W* __restrict__ weight, const I* __restrict__ ids, O* __restrict__ planes,
                              int64_t rows, int64_t t, int64_t vocab, int chunks, int group, ErrorSite site) {
  const int lane = threadIdx.x % group;
  const int64_t d = int64_t{chunks} * N;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x / group;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / group; r < rows; r += stride) {
    const int64_t p = r / t, i = r - p * t;
    const int64_t id = static_cast<int64_t>(__ldg(ids + i));
    O* dst = planes + r * d;
    if (id < 0 || id >= vocab) {
      if (p == 0 && lane == 0) record_error(site, ErrorKind::index_out_of_range, i, id);
      O zero[N];
#pragma unroll
      for (int k = 0; k < N; ++k) zero[k] = narrow<O>(0.0f);
      for (int c = lane; c < chunks; c += group) store_pack(dst + int64_t{c} * N, zero);
      continue;
    }
    const W* src = weight + (p * vocab + id) * d;
    for (int c0 = lane; c0 < chunks; c0 += group * kUnroll) {
      W v[kUnroll][N];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        if (c0 + k * group < chunks) load_pack<true>(src + int64_t{c0 + k * group} * N, v[k]);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        if (c0 + k * group < chunks) {
          O o[N];
#pragma unroll
          for (int e = 0; e < N; ++e) {
            if constexpr (std::is_same_v<W, O>) o[e] = v[k][e];
            else o[e] = narrow<O>(widen(v[k][e]));
          }
          store_pack(dst + int64_t{c0 + k * group} * N, o);
        }
    }
  }
}

// ---- the backward, atomic mode

// sum[p*V + ids[i]] += dplanes[p][i] for every row r = p*T + i, N elements per pack, `chunks` packs
// per row; touched[ids[i]] = 1.
template <class G, class S, class I, int N>
__global__ void accumulate_atomic_kernel(const G* __restrict__ dplanes, const I* __restrict__ ids, S* sum,
                                         int32_t* touched, int64_t rows, int64_t t, int64_t vocab, int chunks,
                                         int group, ErrorSite site) {
  const int lane = threadIdx.x % group;
  const int64_t d = int64_t{chunks} * N;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x / group;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / group; r < rows; r += stride) {
    const int64_t p = r / t, i = r - p * t;
    const int64_t id = static_cast<int64_t>(__ldg(ids + i));
    if (id < 0 || id >= vocab) {
      if (p == 0 && lane == 0) record_error(site, ErrorKind::index_out_of_range, i, id);
      continue;
    }
    if (p == 0 && lane == 0) touched[id] = 1;
    const G* src = dplanes + r * d;
    S* dst = sum + (p * vocab + id) * d;
    for (int c0 = lane; c0 < chunks; c0 += group * kUnroll) {
      float x[kUnroll][N] = {};
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        if (c0 + k * group < chunks) add_pack(src + int64_t{c0 + k * group} * N, x[k]);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        if (c0 + k * group < chunks) red_add(dst + int64_t{c0 + k * group} * N, x[k]);
    }
  }
}

// ---- the backward, atomic mode, duplicate ids combined (Note [combining duplicate ids])
//
// The buffer's workspace (i32) for a batch of n <= kGroupBatch positions, first .. first + n - 1:
//   total  (4)        element 0: the end of the groups placed so far; 0 between calls
//   count  (V + 1)    the batch's positions per id (V: ids out of range); 0 between calls
//   start  (V + 1)    where each id's group begins in keys and positions
//   rank   (kGroupBatch)  each position's place in its id's group
//   keys, positions (kGroupBatch each)  the grouped (id, position) pairs: each id's positions
//                     contiguous, the groups in no fixed order
// Each array starts on 16 bytes (the run kernel reads keys and positions in 16-byte loads).

constexpr int64_t kGroupBatch = kernels::kValueEmbedGroupBatch;
constexpr unsigned kAllLanes = 0xffffffffu;

// ids[i], or vocab when it is out of range (recorded once, by group_count_kernel).
template <class I>
__device__ inline int64_t group_of(const I* ids, int64_t i, int64_t vocab) {
  const int64_t id = static_cast<int64_t>(ids[i]);
  return id >= 0 && id < vocab ? id : vocab;
}

// Step 1, a thread per position: count[id] += 1 with one atomic per distinct id in a warp, rank[k] =
// the count before it; touched[id] = 1.
template <class I>
__global__ void group_count_kernel(const I* __restrict__ ids, int32_t* count, int32_t* rank, int32_t* touched,
                                   int64_t first, int64_t n, int64_t vocab, ErrorSite site) {
  const int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (k - lane >= n) return;  // whole warps leave together: the ones below vote
  const bool live = k < n;
  int64_t id = vocab;
  if (live) {
    id = group_of(ids, first + k, vocab);
    if (id == vocab) record_error(site, ErrorKind::index_out_of_range, first + k, static_cast<int64_t>(ids[first + k]));
    else touched[id] = 1;
  }
  const unsigned live_lanes = __ballot_sync(kAllLanes, live);
  if (!live) return;
  const unsigned peers = __match_any_sync(live_lanes, static_cast<unsigned>(id));
  const int leader = __ffs(static_cast<int>(peers)) - 1;
  int at = 0;
  if (lane == leader) at = atomicAdd(count + id, __popc(peers));
  at = __shfl_sync(peers, at, leader);
  rank[k] = at + __popc(peers & ((1u << lane) - 1u));
}

// Step 2: each id's first-ranked position reserves its group, start[id] = total; total += count[id]
// (one atomic per warp).
template <class I>
__global__ void group_start_kernel(const I* __restrict__ ids, const int32_t* __restrict__ count,
                                   const int32_t* __restrict__ rank, int32_t* start, int32_t* total, int64_t first,
                                   int64_t n, int64_t vocab) {
  const int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (k - lane >= n) return;
  const bool opens = k < n && rank[k] == 0;
  const int64_t id = opens ? group_of(ids, first + k, vocab) : 0;
  const int size = opens ? count[id] : 0;
  int end = size;  // an inclusive scan of the sizes over the warp
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int below = __shfl_up_sync(kAllLanes, end, offset);
    if (lane >= offset) end += below;
  }
  int base = 0;
  if (lane == 31 && end > 0) base = atomicAdd(total, end);
  base = __shfl_sync(kAllLanes, base, 31);
  if (opens) start[id] = base + end - size;
}

// Step 3: keys[start[id] + rank[k]] = id, positions[...] = first + k; count and total left at zero.
template <class I>
__global__ void group_scatter_kernel(const I* __restrict__ ids, int32_t* count, const int32_t* __restrict__ rank,
                                     const int32_t* __restrict__ start, int32_t* total, uint32_t* keys,
                                     int32_t* positions, int64_t first, int64_t n, int64_t vocab) {
  const int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (k >= n) return;
  const int64_t id = group_of(ids, first + k, vocab);
  const int32_t r = rank[k], at = start[id] + r;
  keys[at] = static_cast<uint32_t>(id);
  positions[at] = static_cast<int32_t>(first + k);
  if (r == 0) count[id] = 0;  // every reader of count ran in the steps before
  if (k == 0) *total = 0;
}

// Step 4, over the n grouped positions (keys: their ids, V for those out of range, which are
// skipped; positions: their indices into the planes): a group of `group` lanes per item (chunk c of
// run_chunk grouped positions, plane p, slice s of `group` packs), lane l owning pack s*group + l of
// the row. It walks its chunk in order, sums each run of one id in f32 and adds the sum with one
// vector reduction where the run ends (or the chunk does): sum[p*V + id] += that run's dplanes rows.
// kLoads packs in flight per lane (86 registers at bf16 -> f16: two blocks to an SM; bounding it
// to three spills).
template <class G, class S, int N, int kLoads>
__global__ void __launch_bounds__(kBlock)
    accumulate_combined_kernel(const G* __restrict__ dplanes, const uint32_t* __restrict__ keys,
                               const int32_t* __restrict__ positions, S* sum, int64_t n, int64_t planes, int64_t t,
                               int64_t vocab, int chunks, int group, int slices, int run_chunk) {
  const int64_t item = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / group;
  const int pack = static_cast<int>(item % slices) * group + static_cast<int>(threadIdx.x % group);
  const int64_t rest = item / slices, p = rest % planes, begin = rest / planes * run_chunk;
  if (begin >= n || pack >= chunks) return;  // no shuffles or barriers below: idle lanes may leave
  const int64_t d = int64_t{chunks} * N, end = begin + run_chunk < n ? begin + run_chunk : n;
  const G* src = dplanes + p * t * d + int64_t{pack} * N;
  S* dst = sum + p * vocab * d + int64_t{pack} * N;
  constexpr uint32_t kPast = 0xffffffffu;  // the key past the chunk's end: ends every run there
  float acc[N] = {};
  for (int64_t k0 = begin; k0 < end; k0 += kLoads) {
    // kLoads keys and positions (whole 16-byte loads: the workspace's arrays hold a multiple of
    // kLoads entries past n), the key after them, then all kLoads packs in flight at once.
    uint32_t key[kLoads + 1];
    int32_t pos[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; u += 4) {
      const uint4 k4 = __ldg(reinterpret_cast<const uint4*>(keys + k0 + u));
      const int4 p4 = __ldg(reinterpret_cast<const int4*>(positions + k0 + u));
      key[u] = k4.x, key[u + 1] = k4.y, key[u + 2] = k4.z, key[u + 3] = k4.w;
      pos[u] = p4.x, pos[u + 1] = p4.y, pos[u + 2] = p4.z, pos[u + 3] = p4.w;
    }
    key[kLoads] = k0 + kLoads < end ? __ldg(keys + k0 + kLoads) : kPast;
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
      if (k0 + u >= end) key[u] = kPast;
    G g[kLoads][N];
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
      if (key[u] < vocab) load_pack<true>(src + int64_t{pos[u]} * d, g[u]);
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (key[u] >= vocab) continue;  // past the chunk, or an out-of-range id (recorded in step 1)
#pragma unroll
      for (int e = 0; e < N; ++e) acc[e] = acc[e] + widen(g[u][e]);
      if (key[u + 1] != key[u]) {  // the run ends here
        red_add(dst + int64_t{key[u]} * d, acc);
#pragma unroll
        for (int e = 0; e < N; ++e) acc[e] = 0.0f;
      }
    }
  }
}

// ---- the backward, deterministic mode (Note [value-embed arithmetic])

// keys[k] = ids[first + k] (vocab where out of range: such positions sort last and are skipped),
// positions[k] = first + k, for k < n; touched[ids[first + k]] = 1.
template <class I>
__global__ void sort_keys_kernel(const I* __restrict__ ids, uint32_t* keys, int32_t* positions, int32_t* touched,
                                 int64_t first, int64_t n, int64_t vocab, ErrorSite site) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = first + k, id = static_cast<int64_t>(ids[i]);
    const bool ok = id >= 0 && id < vocab;
    if (!ok) record_error(site, ErrorKind::index_out_of_range, i, id);
    else touched[id] = 1;
    keys[k] = static_cast<uint32_t>(ok ? id : vocab);
    positions[k] = static_cast<int32_t>(i);
  }
}

// One block per chunk c of kChunk sorted positions. Each run of equal keys in the chunk (a part of
// one row's contributions) is summed in f32 in order; a run wholly inside the chunk is added to the
// buffer at once, one that continues from the previous chunk goes to partials[c][0], one that
// continues into the next chunk (and starts here) to partials[c][1].
template <class G, class S, int N>
__global__ void accumulate_chunks_kernel(const G* __restrict__ dplanes, const uint32_t* __restrict__ keys,
                                         const int32_t* __restrict__ positions, S* sum, float* partials,
                                         int64_t planes, int64_t t, int64_t vocab, int chunks) {
  __shared__ uint32_t s_key[kChunk];
  __shared__ int32_t s_pos[kChunk];
  __shared__ uint64_t s_heads;  // bit k: a run starts at position k of the chunk
  const int64_t c = blockIdx.x, first = c * kChunk;
  const int len = static_cast<int>(t - first < kChunk ? t - first : kChunk);
  for (int k = threadIdx.x; k < len; k += blockDim.x) {
    s_key[k] = keys[first + k];
    s_pos[k] = positions[first + k];
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lo = threadIdx.x, hi = threadIdx.x + 32;
    const bool head_lo = lo < len && (lo == 0 || s_key[lo] != s_key[lo - 1]);
    const bool head_hi = hi < len && s_key[hi] != s_key[hi - 1];
    const uint32_t mask_lo = __ballot_sync(0xffffffffu, head_lo), mask_hi = __ballot_sync(0xffffffffu, head_hi);
    if (threadIdx.x == 0) s_heads = uint64_t{mask_lo} | (uint64_t{mask_hi} << 32);
  }
  __syncthreads();
  const int64_t prev_key = c > 0 ? int64_t{keys[first - 1]} : -1;
  const int64_t next_key = first + kChunk < t ? int64_t{keys[first + kChunk]} : -1;
  const int64_t d = int64_t{chunks} * N;

  for (int item = threadIdx.x; item < planes * chunks; item += blockDim.x) {
    const int64_t p = item / chunks, col = int64_t{item % chunks} * N;
    for (uint64_t heads = s_heads; heads;) {  // the runs, in sorted order: [begin, end) of one key
      const int begin = __ffsll(static_cast<long long>(heads)) - 1;
      heads &= heads - 1;
      const int end = heads ? __ffsll(static_cast<long long>(heads)) - 1 : len;
      const uint32_t key = s_key[begin];
      if (key >= vocab) continue;  // out-of-range ids, recorded by sort_keys_kernel
      float acc[N] = {};
#pragma unroll 4
      for (int k = begin; k < end; ++k) add_pack(dplanes + (p * t + s_pos[k]) * d + col, acc);
      const bool from_before = begin == 0 && key == prev_key;
      const bool into_after = end == len && key == next_key;
      if (!from_before && !into_after) add_once(sum + (p * vocab + key) * d + col, acc);
      else store_pack(partials + ((c * 2 + (from_before ? 0 : 1)) * planes + p) * d + col, acc);
    }
  }
}

// One block per chunk c: when c's last run starts in c and continues into later chunks, adds its
// partial and those chunks' continuation partials in chunk order, then the buffer once.
template <class S, int N>
__global__ void accumulate_crossing_kernel(const uint32_t* __restrict__ keys, const float* __restrict__ partials,
                                           S* sum, int64_t planes, int64_t t, int64_t vocab, int chunks) {
  const int64_t c = blockIdx.x, first = c * kChunk, end = first + kChunk < t ? first + kChunk : t;
  const uint32_t key = keys[end - 1];
  const bool into_after = end < t && keys[end] == key;
  const bool whole_from_before = c > 0 && keys[first - 1] == key && keys[first] == key;
  if (!into_after || whole_from_before || key >= vocab) return;
  const int64_t d = int64_t{chunks} * N;
  for (int item = threadIdx.x; item < planes * chunks; item += blockDim.x) {
    const int64_t p = item / chunks, col = int64_t{item % chunks} * N;
    float total[N];
    load_pack<true>(partials + ((c * 2 + 1) * planes + p) * d + col, total);
    for (int64_t next = c + 1;; ++next) {
      float part[N];
      load_pack<true>(partials + ((next * 2) * planes + p) * d + col, part);
#pragma unroll
      for (int k = 0; k < N; ++k) total[k] = total[k] + part[k];
      if (!((next + 1) * kChunk < t && keys[(next + 1) * kChunk] == key)) break;
    }
    add_once(sum + (p * vocab + key) * d + col, total);
  }
}

// ---- the pull

// For r = p*count + u (R = P*count rows): rows[r] = p*V + selected[u], grad[r] = sum[that row], the
// sum row zeroed, touched[selected[u]] = 0. Rows move as `chunks` units U.
template <class U>
__global__ void take_rows_kernel(U* sum, int32_t* touched, const int32_t* __restrict__ selected, int64_t count,
                                 int64_t total_rows, int64_t vocab, int chunks, int group, int64_t* rows,
                                 U* __restrict__ grad) {
  const int lane = threadIdx.x % group;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x / group;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / group; r < total_rows; r += stride) {
    const int64_t p = r / count, token = selected[r - p * count];
    const int64_t row = p * vocab + token;
    U* src = sum + row * chunks;
    U* dst = grad + r * chunks;
    for (int c = lane; c < chunks; c += group) {
      dst[c] = src[c];
      src[c] = U{};
    }
    if (lane == 0) {
      rows[r] = row;
      if (p == 0) touched[token] = 0;
    }
  }
}

// ---- sparse optimizer updates: one pack of N elements of one pulled row per thread

// table[rows[r]] = table - lr * grad[r], in f32, rounded once to the table's dtype
template <class W, class S, int N>
__global__ void sparse_sgd_kernel(W* table, const int64_t* __restrict__ rows, const S* __restrict__ grad,
                                  int64_t total_rows, int chunks, float lr) {
  const int64_t d = int64_t{chunks} * N, n = total_rows * chunks;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / chunks, col = (e - r * chunks) * N;
    W* w = table + rows[r] * d + col;
    W wv[N];
    S gv[N];
    load_pack<false>(w, wv);
    load_pack<true>(grad + r * d + col, gv);
#pragma unroll
    for (int k = 0; k < N; ++k) wv[k] = narrow<W>(widen(wv[k]) - lr * widen(gv[k]));
    store_pack(w, wv);
  }
}

// The AdamW of adamw.hpp on the pulled rows (fp32, left to right, no FMA); m, v f32 like the table.
template <class W, class S, int N>
__global__ void sparse_adamw_kernel(W* table, const int64_t* __restrict__ rows, const S* __restrict__ grad, float* m,
                                    float* v, int64_t total_rows, int chunks, kernels::AdamWScalars s) {
  const float decay = 1.0f - s.lr * s.weight_decay;  // kernels::adamw_decay's, on the device
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  const int64_t d = int64_t{chunks} * N, n = total_rows * chunks;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / chunks, col = (e - r * chunks) * N, at = rows[r] * d + col;
    W wv[N];
    S gv[N];
    float mv[N], vv[N];
    load_pack<false>(table + at, wv);
    load_pack<true>(grad + r * d + col, gv);
    load_pack<false>(m + at, mv);
    load_pack<false>(v + at, vv);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float g = widen(gv[k]);
      float w = widen(wv[k]) * decay;
      mv[k] = s.beta1 * mv[k] + one_minus_b1 * g;
      vv[k] = s.beta2 * vv[k] + one_minus_b2 * g * g;
      w = w - s.step_size * (mv[k] / (sqrtf(vv[k]) / s.bc2_sqrt + s.eps));
      wv[k] = narrow<W>(w);
    }
    store_pack(table + at, wv);
    store_pack(m + at, mv);
    store_pack(v + at, vv);
  }
}

// ----------------------------------------------------------------------------
// kernel launchers

namespace {

// f.template operator()<T>() with T the CUDA type of a table or plane gradient (bf16, f32).
template <class F>
void dispatch_table(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::bf16: f.template operator()<__nv_bfloat16>(); return;
    case DType::f32: f.template operator()<float>(); return;
    default: throw Error(std::string("[") + op + "] no CUDA kernel for " + dtype_name(t) + " (bf16 and f32 only)");
  }
}

// The same for a gradient buffer (f16, f32).
template <class F>
void dispatch_buffer(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::f16: f.template operator()<__half>(); return;
    case DType::f32: f.template operator()<float>(); return;
    default: throw Error(std::string("[") + op + "] no CUDA kernel for a " + dtype_name(t) + " buffer (f16 and f32 only)");
  }
}

// f.template operator()<N>() with the widest pack that divides d: 8, 2 or 1 elements.
template <class F>
void dispatch_pack(int64_t d, F&& f) {
  if (d % 8 == 0) f.template operator()<8>();
  else if (d % 2 == 0) f.template operator()<2>();
  else f.template operator()<1>();
}

// f.template operator()<U>() with the widest unit (16, 8, 4 or 2 bytes) that divides a row of
// row_bytes; returns the units per row through *chunks.
template <class F>
void dispatch_unit(int64_t row_bytes, int* chunks, F&& f) {
  if (row_bytes % 16 == 0) { *chunks = static_cast<int>(row_bytes / 16); f.template operator()<uint4>(); }
  else if (row_bytes % 8 == 0) { *chunks = static_cast<int>(row_bytes / 8); f.template operator()<uint2>(); }
  else if (row_bytes % 4 == 0) { *chunks = static_cast<int>(row_bytes / 4); f.template operator()<uint32_t>(); }
  else { *chunks = static_cast<int>(row_bytes / 2); f.template operator()<unsigned short>(); }
}

// Lanes per row: the smallest power of two covering the row's packs, at most a warp.
int lanes_per_row(int chunks) {
  int group = 1;
  while (group < chunks && group < 32) group *= 2;
  return group;
}

// Blocks for `rows` rows of `group` lanes each (a grid-stride loop covers the rest).
unsigned blocks_for_rows(int64_t rows, int group) { return blocks_for(rows * group); }

}  // namespace

void value_embed_gather(const Tensor& weight, const Tensor& ids, Tensor& planes) {
  const int64_t p_count = planes.dim(0), t = planes.dim(1), d = planes.dim(2), rows = p_count * t;
  if (rows == 0 || d == 0) return;
  const int64_t vocab = weight.dim(0) / p_count;
  DeviceContext& ctx = context(weight);
  const ErrorSite site = ctx.error_site("value_embed_lookup", vocab, d);
  dispatch_index("value_embed_lookup", ids.dtype(), [&]<class I>() {
    dispatch_table("value_embed_lookup", weight.dtype(), [&]<class W>() {
      dispatch_pack(d, [&]<int N>() {
        const int chunks = static_cast<int>(d / N), group = lanes_per_row(chunks);
        auto launch = [&]<class O>() {
          gather_kernel<W, O, I, N><<<blocks_for_rows(rows, group), kBlock, 0, ctx.stream>>>(
              cdata<W>(weight), cdata<I>(ids), mdata<O>(planes), rows, t, vocab, chunks, group, site);
          TG_CUDA_CHECK_LAUNCH();
        };
        if (planes.dtype() == weight.dtype()) launch.template operator()<W>();
        else launch.template operator()<float>();  // a bf16 table widened (the op allows nothing else)
      });
    });
  });
}

namespace {

// The bits of the largest key, vocab itself (the mark of an out-of-range id).
int key_bits(int64_t vocab) {
  int end_bit = 1;
  while (end_bit < 32 && (uint64_t{1} << end_bit) <= static_cast<uint64_t>(vocab)) ++end_bit;
  return end_bit;
}

// ---- the combined atomic backward (Note [combining duplicate ids])

constexpr int kRunChunk = 32;  // grouped positions per item of the run kernel
constexpr int kRunLoads = 8;   // packs in flight per lane in the run kernel
static_assert(kRunChunk % kRunLoads == 0 && kRunLoads % 4 == 0, "the run kernel reads whole 16-byte groups of keys");

int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }

// The workspace's arrays (the layout above step 1).
struct GroupWorkspace {
  int32_t *total, *count, *start, *rank;
  uint32_t* keys;
  int32_t* positions;
};

GroupWorkspace carve(const Tensor& workspace, int64_t vocab) {
  int32_t* base = mdata<int32_t>(workspace);
  const int64_t ids = round4(vocab + 1);
  int32_t* rank = base + 4 + 2 * ids;
  return {base, base + 4, base + 4 + ids, rank, reinterpret_cast<uint32_t*>(rank + kGroupBatch), rank + 2 * kGroupBatch};
}

int64_t workspace_elements(int64_t vocab) { return 4 + 2 * round4(vocab + 1) + 3 * kGroupBatch; }

// Whether an atomic backward of `reductions` vector reductions (P*T*D/N) takes the combined path.
bool combine(const kernels::ValueEmbedBuffer& buffer, int64_t reductions, int64_t vocab) {
  const Tensor& w = buffer.workspace;
  return w.defined() && w.dtype() == DType::i32 && w.numel() >= workspace_elements(vocab) &&
         reductions >= value_embed_tuning().combine_min_reductions;
}

// Per batch of at most kGroupBatch positions: group them by id (steps 1 to 3), then the run kernel.
template <class G, class S, class I, int N>
void accumulate_combined(DeviceContext& ctx, const Tensor& dplanes, const Tensor& ids, kernels::ValueEmbedBuffer& buffer,
                         ErrorSite site) {
  const int64_t planes = dplanes.dim(0), t = dplanes.dim(1), d = dplanes.dim(2), vocab = buffer.touched.dim(0);
  const int chunks = static_cast<int>(d / N), group = lanes_per_row(chunks), slices = (chunks + group - 1) / group;
  const GroupWorkspace w = carve(buffer.workspace, vocab);
  const I* id = cdata<I>(ids);
  for (int64_t first = 0; first < t; first += kGroupBatch) {
    const int64_t n = std::min(kGroupBatch, t - first);
    const unsigned blocks = static_cast<unsigned>((n + kBlock - 1) / kBlock);
    group_count_kernel<<<blocks, kBlock, 0, ctx.stream>>>(id, w.count, w.rank, mdata<int32_t>(buffer.touched), first,
                                                           n, vocab, site);
    TG_CUDA_CHECK_LAUNCH();
    group_start_kernel<<<blocks, kBlock, 0, ctx.stream>>>(id, w.count, w.rank, w.start, w.total, first, n, vocab);
    TG_CUDA_CHECK_LAUNCH();
    group_scatter_kernel<<<blocks, kBlock, 0, ctx.stream>>>(id, w.count, w.rank, w.start, w.total, w.keys,
                                                             w.positions, first, n, vocab);
    TG_CUDA_CHECK_LAUNCH();
    if (value_embed_tuning().group_only) continue;
    const int64_t items = (n + kRunChunk - 1) / kRunChunk * planes * slices;
    accumulate_combined_kernel<G, S, N, kRunLoads>
        <<<static_cast<unsigned>((items * group + kBlock - 1) / kBlock), kBlock, 0, ctx.stream>>>(
            cdata<G>(dplanes), w.keys, w.positions, mdata<S>(buffer.sum), n, planes, t, vocab, chunks, group, slices,
            kRunChunk);
    TG_CUDA_CHECK_LAUNCH();
  }
}

// ---- the deterministic backward: sort, then the chunk and crossing kernels. Workspace O(T + chunks*P*D).

template <class G, class S, class I, int N>
void accumulate_deterministic(DeviceContext& ctx, const Tensor& dplanes, const Tensor& ids, Tensor& sum,
                              Tensor& touched, ErrorSite site) {
  const int64_t planes = dplanes.dim(0), t = dplanes.dim(1), d = dplanes.dim(2), vocab = touched.dim(0);
  const int chunks = static_cast<int>(d / N);
  const Device device = dplanes.device();
  Tensor keys = Tensor::empty(Shape{2, t}, DType::i32, device), positions = Tensor::empty(Shape{2, t}, DType::i32, device);
  uint32_t* keys_in = mdata<uint32_t>(keys);
  int32_t* positions_in = mdata<int32_t>(positions);
  sort_keys_kernel<<<blocks_for(t), kBlock, 0, ctx.stream>>>(cdata<I>(ids), keys_in, positions_in,
                                                              mdata<int32_t>(touched), 0, t, vocab, site);
  TG_CUDA_CHECK_LAUNCH();

  const int end_bit = key_bits(vocab);
  uint32_t* keys_out = keys_in + t;
  int32_t* positions_out = positions_in + t;
  size_t temp_bytes = 0;
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, positions_in, positions_out,
                                                t, 0, end_bit, ctx.stream));
  Tensor temp = Tensor::empty(Shape{static_cast<int64_t>(temp_bytes / 4 + 1)}, DType::i32, device);
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys_in, keys_out, positions_in,
                                                positions_out, t, 0, end_bit, ctx.stream));

  const int64_t n_chunks = (t + kChunk - 1) / kChunk;
  Tensor partials = Tensor::empty(Shape{n_chunks, 2, planes, d}, DType::f32, device);
  const int threads = static_cast<int>(std::clamp<int64_t>((planes * chunks + 31) / 32 * 32, 64, 512));
  accumulate_chunks_kernel<G, S, N><<<static_cast<unsigned>(n_chunks), threads, 0, ctx.stream>>>(
      cdata<G>(dplanes), keys_out, positions_out, mdata<S>(sum), mdata<float>(partials), planes, t, vocab, chunks);
  TG_CUDA_CHECK_LAUNCH();
  accumulate_crossing_kernel<S, N><<<static_cast<unsigned>(n_chunks), threads, 0, ctx.stream>>>(
      keys_out, cdata<float>(partials), mdata<S>(sum), planes, t, vocab, chunks);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

ValueEmbedTuning& value_embed_tuning() {
  static ValueEmbedTuning tuning;
  return tuning;
}

int64_t value_embed_workspace_elements(Device device, int64_t vocab) {
  (void)device;  // the same layout on every device
  return workspace_elements(vocab);
}

void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, kernels::ValueEmbedAccumulate mode,
                            kernels::ValueEmbedBuffer& buffer) {
  const int64_t planes = dplanes.dim(0), t = dplanes.dim(1), d = dplanes.dim(2), vocab = buffer.touched.dim(0);
  if (planes * t == 0) return;
  Tensor& sum = buffer.sum;
  Tensor& touched = buffer.touched;
  DeviceContext& ctx = context(sum);
  const ErrorSite site = ctx.error_site("value_embed_backward", vocab, d);
  dispatch_index("value_embed_backward", ids.dtype(), [&]<class I>() {
    dispatch_table("value_embed_backward", dplanes.dtype(), [&]<class G>() {
      dispatch_buffer("value_embed_backward", sum.dtype(), [&]<class S>() {
        dispatch_pack(d, [&]<int N>() {
          if (mode == kernels::ValueEmbedAccumulate::deterministic) {
            accumulate_deterministic<G, S, I, N>(ctx, dplanes, ids, sum, touched, site);
            return;
          }
          const int chunks = static_cast<int>(d / N), group = lanes_per_row(chunks);
          if (combine(buffer, planes * t * chunks, vocab)) {
            accumulate_combined<G, S, I, N>(ctx, dplanes, ids, buffer, site);
            return;
          }
          accumulate_atomic_kernel<G, S, I, N><<<blocks_for_rows(planes * t, group), kBlock, 0, ctx.stream>>>(
              cdata<G>(dplanes), cdata<I>(ids), mdata<S>(sum), mdata<int32_t>(touched), planes * t, t, vocab, chunks,
              group, site);
          TG_CUDA_CHECK_LAUNCH();
        });
      });
    });
  });
}

int64_t value_embed_select_touched(const Tensor& touched, Tensor& selected) {
  const int64_t vocab = touched.dim(0);
  if (vocab == 0) return 0;
  DeviceContext& ctx = context(touched);
  Tensor count = Tensor::empty(Shape{1}, DType::i32, touched.device());
  size_t temp_bytes = 0;
  const thrust::counting_iterator<int32_t> tokens(0);
  TG_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, tokens, cdata<int32_t>(touched),
                                           mdata<int32_t>(selected), mdata<int32_t>(count), vocab, ctx.stream));
  Tensor temp = Tensor::empty(Shape{static_cast<int64_t>(temp_bytes / 4 + 1)}, DType::i32, touched.device());
  TG_CUDA_CHECK(cub::DeviceSelect::Flagged(temp.raw_data(), temp_bytes, tokens, cdata<int32_t>(touched),
                                           mdata<int32_t>(selected), mdata<int32_t>(count), vocab, ctx.stream));
  return static_cast<int64_t>(count.item());  // a copy to the host: waits, and reports kernel errors
}

void value_embed_take_rows(Tensor& sum, Tensor& touched, const Tensor& selected, int64_t count, Tensor& rows,
                           Tensor& grad) {
  const int64_t total_rows = rows.dim(0), vocab = touched.dim(0);
  const int64_t row_bytes = sum.dim(1) * static_cast<int64_t>(dtype_size(sum.dtype()));
  if (total_rows == 0) return;
  DeviceContext& ctx = context(sum);
  int chunks = 0;
  dispatch_unit(row_bytes, &chunks, [&]<class U>() {
    const int group = lanes_per_row(chunks);
    take_rows_kernel<<<blocks_for_rows(total_rows, group), kBlock, 0, ctx.stream>>>(
        mdata<U>(sum), mdata<int32_t>(touched), cdata<int32_t>(selected), count, total_rows, vocab, chunks, group,
        mdata<int64_t>(rows), mdata<U>(grad));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void sparse_sgd_rows(Tensor& table, const Tensor& rows, const Tensor& grad, float lr) {
  const int64_t total_rows = rows.dim(0), d = table.dim(1);
  if (total_rows * d == 0) return;
  DeviceContext& ctx = context(table);
  dispatch_table("sparse_sgd", table.dtype(), [&]<class W>() {
    dispatch_buffer("sparse_sgd", grad.dtype(), [&]<class S>() {
      dispatch_pack(d, [&]<int N>() {
        const int chunks = static_cast<int>(d / N);
        sparse_sgd_kernel<W, S, N><<<blocks_for(total_rows * chunks), kBlock, 0, ctx.stream>>>(
            mdata<W>(table), cdata<int64_t>(rows), cdata<S>(grad), total_rows, chunks, lr);
        TG_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void sparse_adamw_rows(Tensor& table, const Tensor& rows, const Tensor& grad, Tensor& m, Tensor& v,
                       const kernels::AdamWScalars& s) {
  const int64_t total_rows = rows.dim(0), d = table.dim(1);
  if (total_rows * d == 0) return;
  DeviceContext& ctx = context(table);
  dispatch_table("sparse_adamw", table.dtype(), [&]<class W>() {
    dispatch_buffer("sparse_adamw", grad.dtype(), [&]<class S>() {
      dispatch_pack(d, [&]<int N>() {
        const int chunks = static_cast<int>(d / N);
        sparse_adamw_kernel<W, S, N><<<blocks_for(total_rows * chunks), kBlock, 0, ctx.stream>>>(
            mdata<W>(table), cdata<int64_t>(rows), cdata<S>(grad), mdata<float>(m), mdata<float>(v), total_rows,
            chunks, s);
        TG_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace tapegrad::cuda
