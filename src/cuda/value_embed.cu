// CUDA kernels of the value-embed family: the P-plane gather, its backward into the persistent
// buffer (atomic and deterministic), the pull's select and take, and the sparse SGD/AdamW row
// updates. The CPU versions (src/ops/cpu/value_embed.cpp) are the reference; Note [value-embed
// arithmetic] in src/ops/value_embed.cpp is the arithmetic both follow.
//
// Rules:
// - Rows move in packs of N elements with the widest aligned loads: 16 bytes whenever the row
//   length allows (D a multiple of 8), down to single elements for odd D. A group of up to 32
//   lanes works on one row; row offsets are 64-bit.
// - The atomic mode adds a pack with one vector reduction: red.v4.f16x2 (8 halves) into an f16
//   buffer, red.v4.f32 into an f32 one. Never scalar f16 atomics (they collapse under contention).
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

#include "cuda/common.cuh"
#include "cuda/value_embed.hpp"

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

// ---- the backward, deterministic mode (Note [value-embed arithmetic])

// keys[i] = ids[i] (vocab where out of range: such positions sort last and are skipped), positions[i]
// = i; touched[ids[i]] = 1.
template <class I>
__global__ void sort_keys_kernel(const I* __restrict__ ids, uint32_t* keys, int32_t* positions, int32_t* touched,
                                 int64_t t, int64_t vocab, ErrorSite site) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < t; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    const bool ok = id >= 0 && id < vocab;
    if (!ok) record_error(site, ErrorKind::index_out_of_range, i, id);
    else touched[id] = 1;
    keys[i] = static_cast<uint32_t>(ok ? id : vocab);
    positions[i] = static_cast<int32_t>(i);
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
  const float decay = 1.0f - s.lr * s.weight_decay;
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

// The deterministic backward: sort, then the chunk and crossing kernels. Workspace O(T + chunks*P*D).
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
                                                              mdata<int32_t>(touched), t, vocab, site);
  TG_CUDA_CHECK_LAUNCH();

  int end_bit = 1;  // the bits of the largest key, vocab itself
  while (end_bit < 32 && (uint64_t{1} << end_bit) <= static_cast<uint64_t>(vocab)) ++end_bit;
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

void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, ops::ValueEmbedAccumulate mode, Tensor& sum,
                            Tensor& touched) {
  const int64_t planes = dplanes.dim(0), t = dplanes.dim(1), d = dplanes.dim(2), vocab = touched.dim(0);
  if (planes * t == 0) return;
  DeviceContext& ctx = context(sum);
  const ErrorSite site = ctx.error_site("value_embed_backward", vocab, d);
  dispatch_index("value_embed_backward", ids.dtype(), [&]<class I>() {
    dispatch_table("value_embed_backward", dplanes.dtype(), [&]<class G>() {
      dispatch_buffer("value_embed_backward", sum.dtype(), [&]<class S>() {
        dispatch_pack(d, [&]<int N>() {
          if (mode == ops::ValueEmbedAccumulate::deterministic) {
            accumulate_deterministic<G, S, I, N>(ctx, dplanes, ids, sum, touched, site);
            return;
          }
          const int chunks = static_cast<int>(d / N), group = lanes_per_row(chunks);
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
