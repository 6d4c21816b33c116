// The attention's bf16 kernels (autocast): flash attention on the tensor cores through mma.sync,
// forward and backward. attention.cu's launchers call them (Note [bf16 flash attention]).
//
// Note [bf16 flash attention]
// Under ops::Autocast, and for bf16 operands, the attention's products run on the tensor cores,
// FlashAttention-2's way:
// - Every tile load is whole 16-byte cp.async copies, double buffered, into shared rows padded by
//   16 bytes (conflict-free ldmatrix); rows past T and columns past the head size are zero-filled
//   copies (Rows, load_tile). bf16 operands (autocast's activations: qkv straight from its
//   product) are read where they lie when their rows are whole 16-byte copies (head sizes and
//   steps multiples of 8); f32 operands, and any others, first go to packed bf16 scratch copies,
//   (heads, Tp, D) with Tp the length rounded up to 64 and D = 64 or 128 the head size rounded up
//   (pack_kernel, rounding to nearest). The backward first makes delta = rowsum(dO * O) in f32
//   (pack_dout_kernel, which packs dO too where it must be; for bf16 rows of 64 read where they
//   lie, delta_bf16_64_kernel, 16 bytes a load, with the same sums). The results (O, dQ, dK, dV) are
//   written in the operands' dtype, lse in f32.
// - A block is 4 warps and owns 64 rows (queries, or keys for dK and dV), a warp 16 of them: its
//   products are m16n8k16 mma.sync with bf16 operands summing in f32. The scores S (16 x 64 a
//   warp) stay in the accumulators' registers; the softmax works there (a row's values are in the
//   4 lanes of a quad: 2 shuffles); P, rounded to bf16, goes from the accumulator layout straight
//   into the next product's A operand (the two layouts agree, see p_fragment). No score, P or dS
//   tile passes through shared memory.
// - forward (a block per 64 queries): for each key tile S = Q K^T, masked (keys past Tk, keys after
//   the query when causal), the online softmax in base 2 (running max m, sum l, the output rows
//   rescaled by 2^(m_old - m_new)), O += P V. Then O / l, lse = m scale + ln l.
// - backward: delta first (and dO's copy where one is needed). dK and dV a block per 64 keys, the
//   query tiles streaming: S^T = K Q^T, P^T = 2^(S^T scale log2 e - lse log2 e), dV += P^T dO,
//   dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q, P^T kept as the bf16 fragments the
//   first product takes (fewer registers; dS from the rounded P, as dQ's kernel does too). dQ a block per 64 queries, the key
//   tiles streaming: S, P, dP = dO V^T, dS as above, dQ += dS K. dK and dQ are scaled at the end.
//   Recomputing S and dP in the dQ kernel (7 tile products to FlashAttention-2's 5) keeps every
//   sum in one block in a fixed order: no atomics, the same bits on every run.
// - causal: a query tile stops at its diagonal key tile, a key tile starts at its diagonal query
//   tile; the longest tiles are launched first.
// - D = 128 streams tiles of 32 rows instead of 64 (Tiles<D>::stream), to keep two (16, 128) f32
//   accumulators and the scores within the registers.
// - The products are a policy of the three kernels (the products' two policies, below): the
//   mma.sync of this note (MmaSync<D>), or on Hopper at D = 64 warpgroup products reading swizzled
//   tiles (Wgmma, Note [wgmma attention]); the softmax, masks, streams and stores are the same code.
// Against the f32 kernels the results differ by bf16's rounding of the operands, of P and of dS
// (about 2^-9 relative each), which test_cuda bounds.
#include <cuda_bf16.h>

#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/attention.cuh"
#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/cuda/cuda_kernels.hpp"

namespace tapegrad::cuda {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;     // rows a block owns; 16 a warp
constexpr int kOverlappedDkdvBlocks = 2;  // dkdv_kernel<Wgmma, X, true>'s blocks a multiprocessor
constexpr int kThreads = 128;  // 4 warps
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Tiles {
  static constexpr int stream = D == 64 ? 64 : 32;  // rows of a streamed tile
  static constexpr int ld = D + 8;                  // halves a shared row: 16 bytes of padding
  static constexpr int own = kRows * ld;            // halves of the block's own (64, D) tile
  static constexpr int tile = stream * ld;          // halves of a streamed tile
  // blocks a multiprocessor, which bounds the registers a thread: 128 (forward, dQ at D = 64), 168
  // (forward, dQ at D = 128; dK/dV at D = 64), 255 (dK/dV at D = 128)
  static constexpr int blocks = D == 64 ? 4 : 3, dkdv_blocks = D == 64 ? 3 : 2;
};

inline int64_t padded(int64_t t) { return (t + kRows - 1) / kRows * kRows; }

// ---- the tensor cores' instructions (PTX ISA: mma.sync m16n8k16, ldmatrix, cp.async)
//
// Fragments of an m16n8k16 product, lane = 4 g + t: A (16 x 16, 4 registers of two bf16): rows g
// and g + 8, columns 2t, 2t + 1 and those + 8; B (16 x 8, 2 registers): rows 2t, 2t + 1 and those
// + 8, column g; C (16 x 8, 4 floats): rows g (c0, c1) and g + 8 (c2, c3), columns 2t, 2t + 1.

__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline void ldmatrix(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
__device__ inline void ldmatrix_trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// 16 bytes from src, or 16 zero bytes where !real (src is then not read)
__device__ inline void copy16(bf16* dst, const bf16* src, bool real) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(real ? 16 : 0));
}
__device__ inline void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void wait_groups() {  // all but the N most recent groups have landed
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ inline int lane() { return static_cast<int>(threadIdx.x) % 32; }
__device__ inline int warp() { return static_cast<int>(threadIdx.x) / 32; }

// An operand as the kernels read it: bf16 rows of `width` columns (a multiple of 8: whole 16-byte
// copies), row t of head hi at p + row_at(at, H, hi, t), rows t >= T read as zeros. Either the
// operand where it lies (a bf16 activation, Note [attention layouts]) or its packed copy.
struct Rows {
  const bf16* p;
  kernels::HeadRows at;
  int64_t T;
  int width;
};

// rows [t0, t0 + n) of head hi of x into shared rows `ld` apart, 16 bytes a copy; zeros past T
// and past the width. x is a __grid_constant__ kernel parameter: its fields are read where they
// lie, in the parameter bank, and hold no registers across the kernel's loops.
template <int D>
__device__ void load_tile(bf16* dst, const Rows& x, int64_t H, int64_t hi, int64_t t0, int n) {
  constexpr int chunks = D / 8, rows_a_pass = kThreads / chunks;  // a thread's chunk is the same in every row
  const int c = static_cast<int>(threadIdx.x) % chunks, r0 = static_cast<int>(threadIdx.x) / chunks;
  const bool column = 8 * c < x.width;
  const int64_t step = rows_a_pass * x.at.row;
  const bf16* src = x.p + row_at(x.at, H, hi, t0 + r0) + 8 * c;
  bf16* to = dst + r0 * Tiles<D>::ld + 8 * c;
  for (int r = r0; r < n; r += rows_a_pass, src += step, to += rows_a_pass * Tiles<D>::ld) {
    const bool real = column && t0 + r < x.T;
    copy16(to, real ? src : x.p, real);
  }
}

// A fragment: rows [r0, r0 + 16), columns [c0, c0 + 16) of a row-major shared tile.
template <int D>
__device__ inline void a_fragment(uint32_t (&a)[4], const bf16* x, int r0, int c0) {
  ldmatrix(a, x + (r0 + lane() % 16) * Tiles<D>::ld + c0 + (lane() / 16) * 8);
}
// B fragments of two n-tiles [n0, n0 + 8), [n0 + 8, n0 + 16) for k in [k0, k0 + 16) where
// B[k][n] = y[n][k] (y's rows are B's columns: K for Q K^T): b[0], b[1] the first tile's, b[2],
// b[3] the second's.
template <int D>
__device__ inline void b_fragments(uint32_t (&b)[4], const bf16* y, int n0, int k0) {
  ldmatrix(b, y + (n0 + lane() % 8 + (lane() / 16) * 8) * Tiles<D>::ld + k0 + ((lane() / 8) % 2) * 8);
}
// The same where B[k][n] = z[k][n] (z's rows are B's rows: V for P V).
template <int D>
__device__ inline void b_fragments_trans(uint32_t (&b)[4], const bf16* z, int n0, int k0) {
  ldmatrix_trans(b, z + (k0 + lane() % 8 + ((lane() / 8) % 2) * 8) * Tiles<D>::ld + n0 + (lane() / 16) * 8);
}

__device__ inline uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// An operand's element in f32, and an f32 result in an operand's storage (f32, or bf16 rounded to
// nearest): the kernels read and write either (X).
template <class X>
__device__ inline float wide(X x) {
  if constexpr (std::is_same_v<X, float>) return x;
  else return __bfloat162float(x);
}
template <class X>
__device__ inline X narrow(float x) {
  if constexpr (std::is_same_v<X, float>) return x;
  else return __float2bfloat16_rn(x);
}

// The A fragment of columns [16 kc, 16 kc + 16) of a (16, N) accumulator c (N / 8 tiles of C
// fragments), rounded to bf16: A's rows g and g + 8 and columns 2t.. are C's own.
template <int N>
__device__ inline void p_fragment(uint32_t (&a)[4], const float (&c)[N / 8][4], int kc) {
  a[0] = pack(c[2 * kc][0], c[2 * kc][1]);
  a[1] = pack(c[2 * kc][2], c[2 * kc][3]);
  a[2] = pack(c[2 * kc + 1][0], c[2 * kc + 1][1]);
  a[3] = pack(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}

// acc (16, N) += X (the warp's 16 rows r0.. of a shared tile, D columns) @ Y^T, Y N rows of a
// shared tile: scores.
template <int D, int N>
__device__ inline void product_xyt(float (&acc)[N / 8][4], const bf16* x, int r0, const bf16* y) {
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    uint32_t a[4];
    a_fragment<D>(a, x, r0, k0);
#pragma unroll
    for (int n = 0; n < N / 8; n += 2) {
      uint32_t b[4];
      b_fragments<D>(b, y, 8 * n, k0);
      mma(acc[n], a, b[0], b[1]);
      mma(acc[n + 1], a, b[2], b[3]);
    }
  }
}

// acc (16, D) += P (16, N, the accumulator p rounded to bf16) @ Z, Z N rows of a shared tile.
template <int D, int N>
__device__ inline void product_pz(float (&acc)[D / 8][4], const float (&p)[N / 8][4], const bf16* z) {
#pragma unroll
  for (int kc = 0; kc < N / 16; ++kc) {
    uint32_t a[4];
    p_fragment<N>(a, p, kc);
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t b[4];
      b_fragments_trans<D>(b, z, 8 * n, 16 * kc);
      mma(acc[n], a, b[0], b[1]);
      mma(acc[n + 1], a, b[2], b[3]);
    }
  }
}

// acc (16, D) += A (16, N: a[kc] the A fragment of columns 16 kc..) @ Z, Z N rows of a shared tile.
template <int D, int N>
__device__ inline void product_az(float (&acc)[D / 8][4], const uint32_t (&a)[N / 16][4], const bf16* z) {
#pragma unroll
  for (int kc = 0; kc < N / 16; ++kc)
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t b[4];
      b_fragments_trans<D>(b, z, 8 * n, 16 * kc);
      mma(acc[n], a[kc], b[0], b[1]);
      mma(acc[n + 1], a[kc], b[2], b[3]);
    }
}

// The (16, N) accumulator c rounded to bf16 as A fragments (p_fragment for every kc).
template <int N>
__device__ inline void to_fragments(uint32_t (&a)[N / 16][4], const float (&c)[N / 8][4]) {
#pragma unroll
  for (int kc = 0; kc < N / 16; ++kc) p_fragment<N>(a[kc], c, kc);
}

// Element e of C fragment n (as `c[n][e]`) of an accumulator kept as A fragments: bf16, widened.
template <int N>
__device__ inline float element(const uint32_t (&a)[N / 16][4], int n, int e) {
  const uint32_t pair = a[n / 2][(n % 2) * 2 + e / 2];
  return __uint_as_float(e % 2 ? pair & 0xffff0000u : pair << 16);
}

template <int N>
__device__ inline void zero(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
}

__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- Hopper's warpgroup products (PTX ISA: wgmma.mma_async), for the Wgmma policy
//
// Compiled for sm_90a only (the arch-specific features that wgmma needs); the compute_90 PTX kept
// for other devices has a trap in their place, and the launchers choose the policy by the
// device's compute capability, so it never runs there.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TG_WGMMA 1
#endif

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): the start address, the
// leading and stride byte offsets (each in 16-byte units, 14 bits), 128-byte swizzle (mode 1 in
// bits 62-63).
__device__ inline uint64_t wgmma_desc(const bf16* start, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint64_t a = shared_address(start);
  return ((a & 0x3FFFF) >> 4) | (uint64_t{(leading_bytes >> 4) & 0x3FFF} << 16) |
         (uint64_t{(stride_bytes >> 4) & 0x3FFF} << 32) | (uint64_t{1} << 62);
}

__device__ inline void wgmma_fence() {
#ifdef TG_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ inline void wgmma_commit() {  // the products issued since the last commit are one group
#ifdef TG_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int Pending>
__device__ inline void wgmma_wait() {  // every group but the Pending most recent ones has finished
#ifdef TG_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#endif
}
// The accumulators' registers are the asynchronous products' until the wait: this keeps the
// compiler from moving their reads and writes across it (CUTLASS's warpgroup_fence_operand).
template <int N>
__device__ inline void pin(float (&d)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
}
// The same for A fragments read from registers by a product in flight: their registers stay theirs
// until here.
template <int K>
__device__ inline void pin_fragments(uint32_t (&a)[K][4]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[k][e])::"memory");
}
// Shared memory written through the generic proxy (cp.async) made visible to wgmma's reads.
__device__ inline void fence_async_shared() {
#ifdef TG_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The 64 x 64 f32 accumulator of an m64n64 product: its 32 registers a thread, d[n][e] as
// operands %0 .. %31 (C fragment n, element e).
#define TG_WGMMA_REGISTERS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TG_WGMMA_ACCUMULATORS(d)                                                                                    \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),         \
      "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),     \
      "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),     \
      "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),     \
      "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

// d (64 x 64, the warpgroup's; a warp's 16 rows as C fragments) = (accumulate ? d : 0) + A B, A and
// B (16 deep) in shared memory, both K-major.
__device__ inline void wgmma_ss(float (&d)[8][4], uint64_t a, uint64_t b, int accumulate) {
#ifdef TG_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TG_WGMMA_REGISTERS ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : TG_WGMMA_ACCUMULATORS(d)
      : "l"(a), "l"(b), "r"(accumulate)
      : "memory");
#else
  __trap();
#endif
}
// d += A B, A (64 x 16) in registers (a warp's 16 rows as an m16n8k16 A fragment), B (16 x 64) in
// shared memory, N-major (its rows along K, contiguous along N: imm-trans-b 1).
__device__ inline void wgmma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
#ifdef TG_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TG_WGMMA_REGISTERS ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : TG_WGMMA_ACCUMULATORS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)
      : "memory");
#else
  __trap();
#endif
}

// ---- the products' two policies
//
// A kernel's products are those of its block's 4 warps, warp w computing rows 16 w .. 16 w + 15
// (r0) of a 64-row operand; a policy says how, with the shared tiles' layout that goes with it:
//   scores(acc, X, r0, Y)  acc (16, N) = X[r0 ..] Y^T   (X 64 rows, Y N rows, both D deep)
//   pz(acc, p, Z)          acc (16, D) += P Z           (P (16, N) an f32 accumulator rounded to bf16)
//   az(acc, a, Z)          acc (16, D) += A Z           (A (16, N) as bf16 A fragments)
// with load() filling a tile from an operand's rows and landed() making a finished copy readable by
// the products; issue_scores, issue_az and wait<Pending>(acc...) are their asynchronous forms
// (Wgmma's; MmaSync computes at issue and waits for nothing). Both give each warp its rows in the
// m16n8k16 fragment layouts, so the softmax code around the products is the same for both.

// mma.sync m16n8k16 from ldmatrix fragments of tiles whose rows are padded by 16 bytes.
template <int kD>
struct MmaSync {
  static constexpr int D = kD, N = Tiles<D>::stream;
  static constexpr int own = Tiles<D>::own, tile = Tiles<D>::tile;  // halves
  static constexpr int align = 16;                                   // bytes a tile starts on
  static constexpr bool async = false;                              // issue_* compute at once
  __device__ static void load(bf16* dst, const Rows& x, int64_t H, int64_t hi, int64_t t0, int n) {
    load_tile<D>(dst, x, H, hi, t0, n);
  }
  __device__ static void landed() {}
  __device__ static void scores(float (&acc)[N / 8][4], const bf16* x, int r0, const bf16* y) {
    zero(acc);
    product_xyt<D, N>(acc, x, r0, y);
  }
  __device__ static void pz(float (&acc)[D / 8][4], const float (&p)[N / 8][4], const bf16* z) {
    product_pz<D, N>(acc, p, z);
  }
  __device__ static void az(float (&acc)[D / 8][4], const uint32_t (&a)[N / 16][4], const bf16* z) {
    product_az<D, N>(acc, a, z);
  }
  // the asynchronous forms (Wgmma's), here the products themselves
  __device__ static void issue_scores(float (&acc)[N / 8][4], const bf16* x, int r0, const bf16* y) {
    scores(acc, x, r0, y);
  }
  __device__ static void issue_az(float (&acc)[D / 8][4], const uint32_t (&a)[N / 16][4], const bf16* z) {
    az(acc, a, z);
  }
  template <int Pending, class... Acc>
  __device__ static void wait(Acc&...) {}
};

// Note [wgmma attention]
// On Hopper, at head sizes up to 64, the block's 4 warps are one warpgroup and every product is
// wgmma.mma_async m64n64k16 (bf16 operands, f32 sums): the tensor cores read B, and A where it is
// an operand tile, straight from shared memory, with no ldmatrix; P and dS enter as register A
// fragments, whose layout (a warp's 16 rows) is mma.sync's, as is the accumulators'. Tiles are 64
// rows of 64 halves, 128 bytes a row, in the 128-byte swizzle: row r's 16-byte chunk c lies at
// chunk c ^ (r % 8) of the row, and a tile starts on 1024 bytes. Descriptors:
// - K-major operands (X and Y of the scores: rows along M or N, contiguous along K = the head):
//   8-row groups 1024 bytes apart (the stride offset; the leading offset is unused, 16), the k-th
//   16 columns at start + 32 k bytes (the swizzle is applied to the address the unit computes).
// - N-major B (Z of pz and az: rows along K = the tile's rows, contiguous along N = the head):
//   8-row groups 1024 bytes apart along K (the stride offset; the leading offset, between 64-column
//   blocks along N, is unused at 64 columns), the k-th 16 rows at start + 2048 k bytes.
// The tiles arrive by cp.async, whose writes belong to the generic proxy; wgmma reads through the
// async proxy, so every thread fences its landed copies (fence.proxy.async, landed()) before the
// barrier that precedes the products.
// The products are asynchronous: issue_scores and issue_az start one (a commit group), and
// wait<Pending>(acc...) waits until all but the Pending most recent have finished, the named
// accumulators then the warps' again (pin). The forward waits for each at once (scores, az, pz);
// the backward kernels issue the next product before the arithmetic on the last one (dP with S,
// dV before dS is made), so the tensor cores and the ALU of one warpgroup overlap; the 3 or 4
// blocks a multiprocessor holds overlap more. The kernels' overlapped forms (Note [overlapped
// wgmma forward]) go further, at fewer blocks a multiprocessor: within 128 registers ptxas spilled
// O and serialized the products of a forward that starts a tile's S while the last tile's O += P V
// runs (its C7514 advisory).
struct Wgmma {
  static constexpr int D = 64, N = 64;
  static constexpr int own = 64 * 64, tile = 64 * 64;  // halves: 8 KiB, a multiple of 1024 bytes
  static constexpr int align = 1024;
  static constexpr bool async = true;
  __device__ static int at(int r, int c) { return r * 64 + ((c ^ (r & 7)) << 3); }  // halves; c a chunk of 8
  // rows [t0, t0 + n) of head hi of x, 16 bytes a copy, zeros past T and past the width
  __device__ static void load(bf16* dst, const Rows& x, int64_t H, int64_t hi, int64_t t0, int n) {
    constexpr int rows_a_pass = kThreads / 8;
    const int c = static_cast<int>(threadIdx.x) % 8, r0 = static_cast<int>(threadIdx.x) / 8;
    const bool column = 8 * c < x.width;
    const int64_t step = rows_a_pass * x.at.row;
    const bf16* src = x.p + row_at(x.at, H, hi, t0 + r0) + 8 * c;
    for (int r = r0; r < n; r += rows_a_pass, src += step) {
      const bool real = column && t0 + r < x.T;
      copy16(dst + at(r, c), real ? src : x.p, real);
    }
  }
  __device__ static void landed() { fence_async_shared(); }
  __device__ static void issue_scores(float (&acc)[8][4], const bf16* x, int /*r0: 16 warp()*/, const bf16* y) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) wgmma_ss(acc, wgmma_desc(x + 16 * k, 16, 1024), wgmma_desc(y + 16 * k, 16, 1024), k);
    wgmma_commit();
  }
  __device__ static void issue_az(float (&acc)[8][4], const uint32_t (&a)[4][4], const bf16* z) {
    pin(acc);  // what the warp wrote to acc (a rescale) before the fence
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) wgmma_rs(acc, a[k], wgmma_desc(z + 16 * 64 * k, 64 * 64 * 2, 1024));
    wgmma_commit();
  }
  template <int Pending, class... Acc>
  __device__ static void wait(Acc&... acc) {
    wgmma_wait<Pending>();
    (pin(acc), ...);
  }
  __device__ static void scores(float (&acc)[8][4], const bf16* x, int r0, const bf16* y) {
    issue_scores(acc, x, r0, y);
    wait<0>(acc);
  }
  __device__ static void az(float (&acc)[8][4], const uint32_t (&a)[4][4], const bf16* z) {
    issue_az(acc, a, z);
    wait<0>(acc);
  }
  __device__ static void pz(float (&acc)[8][4], const float (&p)[8][4], const bf16* z) {
    uint32_t a[4][4];
    to_fragments<N>(a, p);
    az(acc, a, z);
  }
};

// The (16, D) accumulator of rows r0.. (the warp's, of a tile starting at row t0) times `factor`
// into rows t < T, columns < w of head hi of an operand (rows of `at`).
template <int D, class X>
__device__ void store_rows(const float (&acc)[D / 8][4], float factor, X* x, const kernels::HeadRows& at,
                           int64_t H, int64_t hi, int64_t t0, int64_t T, int w) {
  const int g = lane() / 4, t = lane() % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = t0 + 16 * warp() + g + 8 * half;
    if (row >= T) continue;
    X* dst = x + row_at(at, H, hi, row);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int c = 8 * n + 2 * t;
      if (c < w) dst[c] = narrow<X>(acc[n][2 * half] * factor);
      if (c + 1 < w) dst[c + 1] = narrow<X>(acc[n][2 * half + 1] * factor);
    }
  }
}

// An overlapped kernel's passes over `tiles` tiles (Note [overlapped wgmma forward]): the first,
// which has no product of a tile before it, as pass<true>(0), the others as pass<false>(j) (one
// pass for all would make ptxas serialize the products: a branch deciding how many are in
// flight), then finish(last), the product left from the last tile. No tiles (a causal key block
// past every query, whose count comes out negative): nothing, as a plain loop would do.
template <class Pass, class Finish>
__device__ void peeled_passes(int tiles, Pass&& pass, Finish&& finish) {
  if (tiles <= 0) return;
  pass.template operator()<true>(0);
  for (int j = 1; j < tiles; ++j) pass.template operator()<false>(j);
  finish(tiles - 1);
}

// A stream's tile j has landed for every thread of the block, and tile j + 1 is on its way
// (s.load(j + 1) where s.tiles has it): KeyStream's and QueryStream's wait.
template <class P, class Stream>
__device__ void land_tile(Stream& s, int j) {
  if (j + 1 < s.tiles) {
    s.load(j + 1);
    commit();
    wait_groups<1>();
  } else {
    wait_groups<0>();
  }
  P::landed();
  __syncthreads();
}

// The key and value tiles a block of queries streams through (forward, dQ): all of them, or up to
// the one holding the block's last query when causal; kBuffers of each in shared memory, tile j
// in buffer j % kBuffers, tile j + 1 copied in while tile j is used (and, with three, while tile
// j - 1 is still read by a product in flight: Note [overlapped wgmma forward]).
template <class P, int kBuffers = 2>
struct KeyStream {
  static constexpr int N = P::N;
  bf16 *Ks, *Vs;         // kBuffers each
  const Rows &k, &v;     // __grid_constant__ parameters
  int64_t H, hi;
  int tiles;
  __device__ KeyStream(bf16* shared, const Rows& k, const Rows& v, const kernels::AttentionLayout& at, int64_t hi,
                       int64_t q0, bool causal)
      : Ks(shared), Vs(shared + kBuffers * P::tile), k(k), v(v), H(at.H), hi(hi) {
    const int64_t end = causal ? std::min(q0 + kRows, at.Tk) : at.Tk;
    tiles = static_cast<int>((end + N - 1) / N);
  }
  __device__ void load(int j) {
    P::load(Ks + (j % kBuffers) * P::tile, k, H, hi, int64_t{j} * N, N);
    P::load(Vs + (j % kBuffers) * P::tile, v, H, hi, int64_t{j} * N, N);
  }
  // The first tile's copies join the caller's group (it commits them with its own).
  __device__ void start() {
    if (tiles > 0) load(0);
  }
  // Tile j has landed for every thread of the block; tile j + 1 is on its way.
  __device__ void wait(int j) { land_tile<P>(*this, j); }
  __device__ const bf16* K(int j) const { return Ks + (j % kBuffers) * P::tile; }
  __device__ const bf16* V(int j) const { return Vs + (j % kBuffers) * P::tile; }
};

// The kernel's dynamic shared memory, its start rounded up to P::align bytes (the launchers ask
// for P::align - 16 bytes more).
template <class P>
__device__ inline bf16* shared_tiles(uint4* shared) {
  const uint32_t skip = (P::align - shared_address(shared) % P::align) % P::align;
  return reinterpret_cast<bf16*>(reinterpret_cast<char*>(shared) + skip);
}

// ----------------------------------------------------------------------------
// the packed copies

// dst (heads, Tp, D) bf16 = rows t < T, columns < w of head hi of x (rows of `at`; f32 rounded to
// nearest, or bf16 copied); zeros elsewhere. A thread makes 8 halves (16 bytes).
template <class X>
__global__ void pack_kernel(const X* x, const kernels::HeadRows at, int64_t H, int64_t heads, int64_t T, int64_t Tp,
                            int w, int D, bf16* dst) {
  const int64_t chunks = heads * Tp * (D / 8);
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < chunks; e += int64_t{gridDim.x} * blockDim.x) {
    const int c = static_cast<int>(e % (D / 8)) * 8;
    const int64_t t = e / (D / 8) % Tp, hi = e / (D / 8) / Tp;
    uint4 out = make_uint4(0, 0, 0, 0);
    if (t < T && c < w) {
      const X* src = x + row_at(at, H, hi, t) + c;
      const bool whole = c + 8 <= w && reinterpret_cast<uintptr_t>(src) % 16 == 0;
      if (std::is_same_v<X, bf16> && whole) {
        out = *reinterpret_cast<const uint4*>(src);
      } else {
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (whole) {
          const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
          v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
          for (int i = 0; i < 8 && c + i < w; ++i) v[i] = wide(src[i]);
        }
        out.x = pack(v[0], v[1]), out.y = pack(v[2], v[3]), out.z = pack(v[4], v[5]), out.w = pack(v[6], v[7]);
      }
    }
    reinterpret_cast<uint4*>(dst)[e] = out;
  }
}

// delta (heads, Tq) = rowsum(dout * out) in f32 and, where dst is not null, dst (heads, Tp, D) bf16
// = dout as pack_kernel would copy it: a warp a row, dout and out through at.out.
template <class X>
__global__ void pack_dout_kernel(const X* out, const X* dout, const kernels::AttentionLayout at, int64_t Tp, int D,
                                 bf16* dst, float* delta) {
  const int64_t rows = at.B * at.H * Tp;
  const int64_t first = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int64_t step = int64_t{gridDim.x} * blockDim.x / 32;
  const int w = static_cast<int>(at.dv);
  for (int64_t row = first; row < rows; row += step) {
    const int64_t hi = row / Tp, t = row % Tp;
    const bool real = t < at.Tq;
    const int64_t at_row = real ? row_at(at.out, at.H, hi, t) : 0;
    float s = 0.f;
    for (int c = 2 * lane(); c < D; c += 64) {  // two columns a lane
      float g0 = 0.f, g1 = 0.f;
      if (real && c < w) {
        g0 = wide(dout[at_row + c]);
        s = fmaf(g0, wide(out[at_row + c]), s);
      }
      if (real && c + 1 < w) {
        g1 = wide(dout[at_row + c + 1]);
        s = fmaf(g1, wide(out[at_row + c + 1]), s);
      }
      if (dst) reinterpret_cast<uint32_t*>(dst + row * D)[c / 2] = pack(g0, g1);
    }
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (lane() == 0 && real) delta[hi * at.Tq + t] = s;
  }
}

// delta (heads, Tq) = rowsum(dout * out) for bf16 rows of 64 columns read where they lie (no dO
// copy wanted): 8 threads a row, one 16-byte load each of dout and out, 4 rows a warp. The sum in
// pack_dout_kernel's order, so the same bits: lane l's two columns 2l, 2l + 1 by fmaf (here thread
// q holds lanes 4q .. 4q + 3 as v[0..3]), then the 32 lanes' butterfly, l ^ 16, 8, 4 (threads
// q ^ 4, 2, 1) and l ^ 2, 1 (within the thread).
__global__ void delta_bf16_64_kernel(const bf16* out, const bf16* dout, const kernels::AttentionLayout at,
                                     float* delta) {
  const int64_t rows = at.B * at.H * at.Tq;
  const int64_t first = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  const int q = lane() % 8;
  for (int64_t w = first; 4 * w < rows; w += warps) {  // the warp's 4 rows; every lane takes the shuffles
    const int64_t row = 4 * w + lane() / 8;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (row < rows) {
      const int64_t at_row = row_at(at.out, at.H, row / at.Tq, row % at.Tq) + 8 * q;
      const uint4 g = *reinterpret_cast<const uint4*>(dout + at_row), o = *reinterpret_cast<const uint4*>(out + at_row);
      const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[i] = fmaf(__uint_as_float(gw[i] & 0xffff0000u), __uint_as_float(ow[i] & 0xffff0000u),
                    fmaf(__uint_as_float(gw[i] << 16), __uint_as_float(ow[i] << 16), 0.f));
    }
#pragma unroll
    for (int offset = 4; offset > 0; offset /= 2)
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
    if (q == 0 && row < rows) delta[row] = (v[0] + v[2]) + (v[1] + v[3]);
  }
}

// ----------------------------------------------------------------------------
// forward

// Tile j's online softmax on its scores s (the warp's 16 rows against N keys from k0; row[h] the
// query of half h): keys past Tk, and after the query when causal, masked (when `masks`); the
// running max m and sum l updated; s made 2^(s scale2 - m scale2); alpha[h] = 2^((m_old - m_new)
// scale2), by which the output rows made so far are to be scaled.
template <int N>
__device__ inline void online_softmax(float (&s)[N / 8][4], float (&m)[2], float (&l)[2], float (&alpha)[2], int64_t k0,
                                      bool masks, const int64_t (&row)[2], int64_t Tk, bool causal, float scale2) {
  const int t = lane() % 4;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2;
      const int64_t key = k0 + 8 * n + 2 * t + e % 2;
      if (masks && (key >= Tk || (causal && key > row[h]))) s[n][e] = -INFINITY;
      mx[h] = fmaxf(mx[h], s[n][e]);
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(m[h], quad_max(mx[h]));
    const float base = m_new == -INFINITY ? 0.f : m_new * scale2;  // no inf - inf
    alpha[h] = exp2_approx(fmaf(m[h], scale2, -base));
    m[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < N / 8; ++n) {
      s[n][2 * h] = exp2_approx(fmaf(s[n][2 * h], scale2, -base));
      s[n][2 * h + 1] = exp2_approx(fmaf(s[n][2 * h + 1], scale2, -base));
      sum += s[n][2 * h] + s[n][2 * h + 1];
    }
    l[h] = fmaf(l[h], alpha[h], sum);
  }
}

// The (16, D) output rows times each half's alpha.
template <int D>
__device__ inline void rescale(float (&o)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    o[n][0] *= alpha[0], o[n][1] *= alpha[0];
    o[n][2] *= alpha[1], o[n][3] *= alpha[1];
  }
}

// The end of a forward: the output rows over their sums, stored, and lse.
template <int D, class X>
__device__ inline void finish_rows(float (&o)[D / 8][4], float (&l)[2], const float (&m)[2], const int64_t (&row)[2],
                                   X* out, float* lse, const kernels::AttentionLayout& at, int64_t hi, int64_t q0,
                                   float scale) {
  float factor[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = quad_sum(l[h]);
    factor[h] = l[h] > 0.f ? 1.f / l[h] : 0.f;
  }
  rescale<D>(o, factor);  // store_rows takes one factor, so each row's goes into its values
  store_rows<D>(o, 1.f, out, at.out, at.H, hi, q0, at.Tq, static_cast<int>(at.dv));
  if (lane() % 4 == 0)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (row[h] < at.Tq) lse[hi * at.Tq + row[h]] = l[h] > 0.f ? fmaf(m[h], scale, logf(l[h])) : -INFINITY;
}

// out (rows of at.out, dv columns) and lse (heads, Tq) from q, k and v as Rows: a block per head
// and 64 queries.
//
// Note [overlapped wgmma forward]
// kOverlap (Wgmma): tile j's scores are made while tile j - 1's O += P V runs (FlashAttention-3's
// overlap within a warpgroup): tile j's S = Q K^T and tile j - 1's product are issued together,
// the softmax of S runs once S has landed while the product still runs, and O is rescaled by tile
// j's alpha once the product has landed, which is where the plain kernel rescales it: the same
// operations on the same values in the same order, so the same bits (a test checks). The two
// products in flight and the next P's fragments need more than 128 registers, so the kernel runs
// 3 blocks a multiprocessor (146 registers), and the key and value tiles take three buffers: tile
// j + 1 is copied in while tile j's scores and tile j - 1's values are read. dq_kernel and
// dkdv_kernel overlap the backward's products likewise. set_attention_overlap (or
// TAPEGRAD_ATTENTION_OVERLAP) chooses which kernels do (cuda.hpp).
template <class P, class X, bool kOverlap = false>
__global__ void __launch_bounds__(kThreads, kOverlap ? 3 : Tiles<P::D>::blocks)
    forward_kernel(const __grid_constant__ Rows q, const __grid_constant__ Rows k, const __grid_constant__ Rows v, X* out, float* lse, const kernels::AttentionLayout at,
                   bool causal, float scale, int64_t tiles) {
  static_assert(!kOverlap || P::async, "overlapped products are asynchronous ones");
  constexpr int D = P::D, N = P::N;
  extern __shared__ uint4 shared16[];
  bf16* Qs = shared_tiles<P>(shared16);
  const TileOf tile = tile_of(tiles, causal, kRows);
  const int64_t hi = tile.head, q0 = tile.first;
  KeyStream<P, kOverlap ? 3 : 2> keys(Qs + P::own, k, v, at, hi, q0, causal);
  P::load(Qs, q, at.H, hi, q0, kRows);
  keys.start();
  commit();

  const int g = lane() / 4;
  const int r0 = 16 * warp();
  const int64_t row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
  const float scale2 = scale * kLog2e;
  float o[D / 8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (scores' units), the thread's part of the sum
  [[maybe_unused]] uint32_t p[N / 16][4] = {};  // kOverlap: tile j - 1's P as A fragments, its product's operand while it runs
  for (int j = 0; j < keys.tiles; ++j) {
    keys.wait(j);  // with kOverlap, tile j + 1 goes into the buffer of tile j - 2, whose products have finished
    float s[N / 8][4], alpha[2];
    const int64_t k0 = int64_t{j} * N;
    if constexpr (kOverlap) {
      P::issue_scores(s, Qs, r0, keys.K(j));
      if (j > 0) {
        P::issue_az(o, p, keys.V(j - 1));
        P::template wait<1>(s);  // the scores; the product goes on
      } else {
        P::template wait<0>(s);
      }
      online_softmax<N>(s, m, l, alpha, k0, k0 + N > at.Tk || (causal && k0 + N - 1 > q0 + r0), row, at.Tk, causal,
                        scale2);
      uint32_t next[N / 16][4];
      to_fragments<N>(next, s);
      P::template wait<0>(o);
      pin_fragments(p);  // the finished product's operand, kept until here
      rescale<D>(o, alpha);
#pragma unroll
      for (int kc = 0; kc < N / 16; ++kc)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[kc][e] = next[kc][e];
    } else {
      P::scores(s, Qs, r0, keys.K(j));
      online_softmax<N>(s, m, l, alpha, k0, k0 + N > at.Tk || (causal && k0 + N - 1 > q0 + r0), row, at.Tk, causal,
                        scale2);
      rescale<D>(o, alpha);
      P::pz(o, s, keys.V(j));
    }
    __syncthreads();  // the buffer is refilled next
  }
  if constexpr (kOverlap)
    if (keys.tiles > 0) P::az(o, p, keys.V(keys.tiles - 1));
  finish_rows<D>(o, l, m, row, out, lse, at, hi, q0, scale);
}

// ----------------------------------------------------------------------------
// backward

// lse in base 2 for a query row: +inf past Tq (P = 0 there); delta: 0 there.
__device__ inline float lse2_at(const float* lse, int64_t hi, int64_t Tq, int64_t row) {
  return row < Tq ? lse[hi * Tq + row] * kLog2e : INFINITY;
}
__device__ inline float delta_at(const float* delta, int64_t hi, int64_t Tq, int64_t row) {
  return row < Tq ? delta[hi * Tq + row] : 0.f;
}

// The query tiles a block of keys streams through (dK/dV): q's and dO's rows and their lse (base 2)
// and delta, from the first tile the block's keys see (causal: the one holding its first key) to
// the last; kBuffers of each in shared memory, tile i in buffer i % kBuffers, tile i + 1 copied in
// while tile i is used (and, with three, while tile i - 1 is still read by a product in flight).
template <class P, int kBuffers = 2>
struct QueryStream {
  static constexpr int N = P::N;
  bf16 *Qs, *Gs;         // kBuffers each
  float* stats;          // kBuffers of (lse2, delta) for N rows
  const Rows &q, &dout;  // __grid_constant__ parameters
  const float *lse, *delta;
  int64_t H, Tq, hi, first;
  int tiles;
  __device__ QueryStream(bf16* shared, const Rows& q, const Rows& dout, const float* lse, const float* delta,
                         const kernels::AttentionLayout& at, int64_t hi, int64_t k0, bool causal)
      : Qs(shared), Gs(shared + kBuffers * P::tile), stats(reinterpret_cast<float*>(Gs + kBuffers * P::tile)), q(q),
        dout(dout), lse(lse), delta(delta), H(at.H), Tq(at.Tq), hi(hi), first(causal ? k0 / N * N : 0) {
    tiles = static_cast<int>((at.Tq - first + N - 1) / N);
  }
  __device__ int64_t t0(int i) const { return first + int64_t{i} * N; }
  __device__ void load(int i) {
    const int b = i % kBuffers;
    P::load(Qs + b * P::tile, q, H, hi, t0(i), N);
    P::load(Gs + b * P::tile, dout, H, hi, t0(i), N);
    for (int r = threadIdx.x; r < N; r += kThreads) {
      stats[b * 2 * N + r] = lse2_at(lse, hi, Tq, t0(i) + r);
      stats[b * 2 * N + N + r] = delta_at(delta, hi, Tq, t0(i) + r);
    }
  }
  // The first tile's copies join the caller's group (it commits them with its own).
  __device__ void start() {
    if (tiles > 0) load(0);
  }
  __device__ void wait(int i) { land_tile<P>(*this, i); }
  __device__ const bf16* Q(int i) const { return Qs + (i % kBuffers) * P::tile; }
  __device__ const bf16* G(int i) const { return Gs + (i % kBuffers) * P::tile; }
  __device__ const float* lse2(int i) const { return stats + (i % kBuffers) * 2 * N; }
  __device__ const float* delta_of(int i) const { return lse2(i) + N; }
};
// The shared memory QueryStream<P, kBuffers> takes, in bytes.
template <class P, int kBuffers>
constexpr size_t query_stream_bytes() {
  return sizeof(bf16) * 2 * kBuffers * P::tile + sizeof(float) * 2 * kBuffers * P::N;
}

// dK/dV's query tile: P^T = 2^(S^T scale2 - lse2) from the scores in p (the warp's 16 keys, row
// key[h] of half h, against N queries from t0), zero where a key comes after its query when
// `masks`, rounded to bf16 as pb (the operand of dV's product and of dS^T).
template <int N>
__device__ inline void dkdv_probabilities(float (&p)[N / 8][4], uint32_t (&pb)[N / 16][4], const float* lse2,
                                          bool masks, const int64_t (&key)[2], int64_t t0, float scale2) {
  const int t = lane() % 4;
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 8 * n + 2 * t + e % 2;
      p[n][e] = exp2_approx(fmaf(p[n][e], scale2, -lse2[c]));
      if (masks && key[e / 2] > t0 + c) p[n][e] = 0.f;
    }
  to_fragments<N>(pb, p);
}
// ... and dS^T = P^T (dP^T - delta) from dP^T in ds.
template <int N>
__device__ inline void dkdv_scores_grad(float (&ds)[N / 8][4], const uint32_t (&pb)[N / 16][4], const float* dlt) {
  const int t = lane() % 4;
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) ds[n][e] = element<N>(pb, n, e) * (ds[n][e] - dlt[8 * n + 2 * t + e % 2]);
}

// dk, dv (rows of at.dk, at.dv_) from the packed q, k, v, dout and delta: a block per head and 64
// keys, the query tiles streaming.
//
// kOverlap (Wgmma): tile i - 1's dK += dS^T Q is made while tile i's P^T is (Note [overlapped wgmma
// forward]'s way): tile i's S^T and dP^T are issued, then tile i - 1's dK product behind them, and
// dV's product as before once P^T is made; the pass waits for both products once dS^T is made.
// The same products into the same accumulators in the same order: the same bits. The first tile
// is a pass of its own (no dK product before it); three query buffers (tile i - 1's queries are
// read by its dK product while tile i is used and tile i + 1 copied in); 221 registers, so 2
// blocks a multiprocessor.
template <class P, class X, bool kOverlap = false>
__global__ void __launch_bounds__(kThreads, kOverlap ? kOverlappedDkdvBlocks : Tiles<P::D>::dkdv_blocks)
    dkdv_kernel(const __grid_constant__ Rows q, const __grid_constant__ Rows k, const __grid_constant__ Rows v,
                const __grid_constant__ Rows dout, const float* lse, const float* delta,
                X* dk, X* dv, const kernels::AttentionLayout at, bool causal, float scale, int64_t tiles) {
  static_assert(!kOverlap || P::async, "overlapped products are asynchronous ones");
  constexpr int D = P::D, N = P::N;
  extern __shared__ uint4 shared16[];
  bf16* Ks = shared_tiles<P>(shared16);
  bf16* Vs = Ks + P::own;
  const TileOf tile = tile_of(tiles, false, kRows);  // causal key tiles are longest first at the low end
  const int64_t hi = tile.head, k0 = tile.first;
  QueryStream<P, kOverlap ? 3 : 2> queries(Vs + P::own, q, dout, lse, delta, at, hi, k0, causal);
  P::load(Ks, k, at.H, hi, k0, kRows);
  P::load(Vs, v, at.H, hi, k0, kRows);
  queries.start();
  commit();

  const int g = lane() / 4;
  const int r0 = 16 * warp();
  const int64_t key[2] = {k0 + r0 + g, k0 + r0 + g + 8};
  const float scale2 = scale * kLog2e;
  float dk_acc[D / 8][4], dv_acc[D / 8][4];
  zero(dk_acc);
  zero(dv_acc);
  if constexpr (kOverlap) {
    uint32_t dsb[N / 16][4];  // tile i - 1's dS^T as A fragments: its dK product's operand while it runs
    auto pass = [&]<bool kFirst>(int i) {
      queries.wait(i);  // tile i + 1 goes into the buffer of tile i - 2, whose products have finished
      const bf16* Qi = queries.Q(i);
      const bf16* Gi = queries.G(i);
      const int64_t t0 = queries.t0(i);
      float p[N / 8][4], ds[N / 8][4];
      P::issue_scores(p, Ks, r0, Qi);   // S^T
      P::issue_scores(ds, Vs, r0, Gi);  // dP^T = V dO^T
      if constexpr (!kFirst) P::issue_az(dk_acc, dsb, queries.Q(i - 1));  // tile i - 1's dK += dS^T Q
      P::template wait<kFirst ? 1 : 2>(p);       // S^T; dP^T and the dK product go on
      uint32_t pb[N / 16][4];
      dkdv_probabilities<N>(p, pb, queries.lse2(i), causal && k0 + r0 + 15 > t0, key, t0, scale2);
      P::issue_az(dv_acc, pb, Gi);      // dV += P^T dO
      P::template wait<kFirst ? 1 : 2>(ds);      // dP^T; the dK and dV products go on
      dkdv_scores_grad<N>(ds, pb, queries.delta_of(i));
      P::template wait<0>(dv_acc, dk_acc);
      pin_fragments(pb);  // the finished products' operands, kept until here
      if constexpr (!kFirst) pin_fragments(dsb);
      to_fragments<N>(dsb, ds);
      __syncthreads();  // the buffers of tile i - 1 are refilled next
    };
    peeled_passes(queries.tiles, pass, [&](int last) { P::az(dk_acc, dsb, queries.Q(last)); });
  } else {
    for (int i = 0; i < queries.tiles; ++i) {
      queries.wait(i);
      const bf16* Qi = queries.Q(i);
      const bf16* Gi = queries.G(i);
      const int64_t t0 = queries.t0(i);
      // P^T (16 keys, N queries); with asynchronous products dP^T = V dO^T runs while P^T is made
      float p[N / 8][4], ds[N / 8][4];
      P::issue_scores(p, Ks, r0, Qi);
      if constexpr (P::async) P::issue_scores(ds, Vs, r0, Gi);
      P::template wait<P::async ? 1 : 0>(p);
      uint32_t pb[N / 16][4];  // P^T in bf16, as it enters both products: fewer registers than f32
      dkdv_probabilities<N>(p, pb, queries.lse2(i), causal && k0 + r0 + 15 > t0, key, t0, scale2);
      P::issue_az(dv_acc, pb, Gi);  // dV += P^T dO (running while dS^T is made)
      if constexpr (!P::async) P::issue_scores(ds, Vs, r0, Gi);  // dP^T = V dO^T
      P::template wait<P::async ? 1 : 0>(ds);
      dkdv_scores_grad<N>(ds, pb, queries.delta_of(i));
      if constexpr (P::async) {
        uint32_t dsb[N / 16][4];
        to_fragments<N>(dsb, ds);
        P::issue_az(dk_acc, dsb, Qi);  // dK += dS^T Q
        P::template wait<0>(dv_acc, dk_acc);
      } else {
        P::pz(dk_acc, ds, Qi);  // dK += dS^T Q
      }
      __syncthreads();
    }
  }
  store_rows<D>(dk_acc, scale, dk, at.dk, at.H, hi, k0, at.Tk, static_cast<int>(at.d));
  store_rows<D>(dv_acc, 1.f, dv, at.dv_, at.H, hi, k0, at.Tk, static_cast<int>(at.dv));
}

// dQ's tile: P = 2^(S scale2 - lse2) from the scores in p, zero where masked (keys past Tk, or
// after the query when causal), rounded to bf16 as pb (the fragments both kernels use).
template <int N>
__device__ inline void dq_probabilities(float (&p)[N / 8][4], uint32_t (&pb)[N / 16][4], int64_t k0, bool masks,
                                        const int64_t (&row)[2], int64_t Tk, bool causal, float scale2,
                                        const float (&lse2)[2]) {
  const int t = lane() % 4;
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2;
      const int64_t key = k0 + 8 * n + 2 * t + e % 2;
      p[n][e] = exp2_approx(fmaf(p[n][e], scale2, -lse2[h]));
      if (masks && (key >= Tk || (causal && key > row[h]))) p[n][e] = 0.f;
    }
  to_fragments<N>(pb, p);
}
// ... and dS = P (dP - delta) from dP in ds and the bf16 P.
template <int N>
__device__ inline void dq_scores_grad(float (&ds)[N / 8][4], const uint32_t (&pb)[N / 16][4], const float (&dlt)[2]) {
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) ds[n][e] = element<N>(pb, n, e) * (ds[n][e] - dlt[e / 2]);
}

// dq (rows of at.dq) from the packed q, k, v, dout and delta: a block per head and 64 queries, the
// key tiles streaming.
//
// kOverlap (Wgmma): tile j - 1's dQ += dS K is made while tile j's P and dS are (Note [overlapped
// wgmma forward]'s way): tile j's S and dP are issued, then tile j - 1's dQ product behind them,
// and it is waited for once dS is made. The same products into the same accumulator in the same
// order: the same bits. No product runs across a pass's end, and the first tile is a pass of its
// own (ptxas serializes the products when one runs across the loop's end, or when a branch decides
// how many are in flight). Three key and value buffers (tile j - 1's keys are read by its dQ
// product while tile j is used and tile j + 1 copied in), 3 blocks a multiprocessor.
template <class P, class X, bool kOverlap = false>
__global__ void __launch_bounds__(kThreads, kOverlap ? 3 : Tiles<P::D>::blocks)
    dq_kernel(const __grid_constant__ Rows q, const __grid_constant__ Rows k, const __grid_constant__ Rows v,
              const __grid_constant__ Rows dout, const float* lse, const float* delta,
              X* dq, const kernels::AttentionLayout at, bool causal, float scale, int64_t tiles) {
  static_assert(!kOverlap || P::async, "overlapped products are asynchronous ones");
  constexpr int D = P::D, N = P::N;
  extern __shared__ uint4 shared16[];
  bf16* Qs = shared_tiles<P>(shared16);
  bf16* Gs = Qs + P::own;
  const TileOf tile = tile_of(tiles, causal, kRows);
  const int64_t hi = tile.head, q0 = tile.first;
  KeyStream<P, kOverlap ? 3 : 2> keys(Gs + P::own, k, v, at, hi, q0, causal);
  P::load(Qs, q, at.H, hi, q0, kRows);
  P::load(Gs, dout, at.H, hi, q0, kRows);
  keys.start();
  commit();

  const int g = lane() / 4;
  const int r0 = 16 * warp();
  const int64_t row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
  const float scale2 = scale * kLog2e;
  const float lse2[2] = {lse2_at(lse, hi, at.Tq, row[0]), lse2_at(lse, hi, at.Tq, row[1])};
  const float dlt[2] = {delta_at(delta, hi, at.Tq, row[0]), delta_at(delta, hi, at.Tq, row[1])};
  float dq_acc[D / 8][4];
  zero(dq_acc);
  if constexpr (kOverlap) {
    uint32_t dsb[N / 16][4];  // tile j - 1's dS as A fragments: its dQ product's operand while it runs
    auto pass = [&]<bool kFirst>(int j) {  // tile j (peeled_passes); the first has no dQ product before it
      keys.wait(j);  // tile j + 1 goes into the buffer of tile j - 2, whose products have finished
      const int64_t k0 = int64_t{j} * N;
      float p[N / 8][4], ds[N / 8][4];
      P::issue_scores(p, Qs, r0, keys.K(j));  // S
      P::issue_scores(ds, Gs, r0, keys.V(j));  // dP = dO V^T
      if constexpr (!kFirst) P::issue_az(dq_acc, dsb, keys.K(j - 1));  // tile j - 1's dQ += dS K
      P::template wait<kFirst ? 1 : 2>(p);  // S; dP and the dQ product go on
      uint32_t pb[N / 16][4];
      dq_probabilities<N>(p, pb, k0, k0 + N > at.Tk || (causal && k0 + N - 1 > q0 + r0), row, at.Tk, causal, scale2,
                          lse2);
      P::template wait<kFirst ? 0 : 1>(ds);  // dP; the dQ product goes on
      dq_scores_grad<N>(ds, pb, dlt);
      if constexpr (!kFirst) {
        P::template wait<0>(dq_acc);
        pin_fragments(dsb);  // the finished product's operand, kept until here
      }
      to_fragments<N>(dsb, ds);
      __syncthreads();  // the buffers of tile j - 1 are refilled next
    };
    peeled_passes(keys.tiles, pass, [&](int last) { P::az(dq_acc, dsb, keys.K(last)); });
  } else {
    for (int j = 0; j < keys.tiles; ++j) {
      keys.wait(j);
      const int64_t k0 = int64_t{j} * N;
      float p[N / 8][4], ds[N / 8][4];
      P::issue_scores(p, Qs, r0, keys.K(j));  // S; with asynchronous products dP = dO V^T runs while P is made
      if constexpr (P::async) P::issue_scores(ds, Gs, r0, keys.V(j));
      P::template wait<P::async ? 1 : 0>(p);
      uint32_t pb[N / 16][4];  // P in bf16, as the dK/dV kernel uses it
      dq_probabilities<N>(p, pb, k0, k0 + N > at.Tk || (causal && k0 + N - 1 > q0 + r0), row, at.Tk, causal, scale2,
                          lse2);
      if constexpr (!P::async) P::issue_scores(ds, Gs, r0, keys.V(j));  // dP = dO V^T
      P::template wait<0>(ds);
      dq_scores_grad<N>(ds, pb, dlt);
      P::pz(dq_acc, ds, keys.K(j));  // dQ += dS K
      __syncthreads();
    }
  }
  store_rows<D>(dq_acc, scale, dq, at.dq, at.H, hi, q0, at.Tq, static_cast<int>(at.d));
}

// ----------------------------------------------------------------------------
// a probe of the Wgmma policy's layouts (attention_wgmma_probe): a and b (64, 64) bf16 row-major;
// c1 = a b^T through scores (both operands K-major), c2 = a b through pz (a entering as the
// accumulator it would be, b N-major), each stored from the accumulator layout.
__global__ void __launch_bounds__(kThreads) wgmma_probe_kernel(const bf16* a, const bf16* b, float* c1, float* c2) {
  extern __shared__ uint4 shared16[];
  bf16* As = shared_tiles<Wgmma>(shared16);
  bf16* Bs = As + Wgmma::tile;
  const Rows ra{a, kernels::HeadRows{0, 0, 0, 64}, 64, 64}, rb{b, kernels::HeadRows{0, 0, 0, 64}, 64, 64};
  Wgmma::load(As, ra, 1, 0, 0, 64);
  Wgmma::load(Bs, rb, 1, 0, 0, 64);
  commit();
  wait_groups<0>();
  Wgmma::landed();
  __syncthreads();
  const int g = lane() / 4, t = lane() % 4;
  auto cell = [&](int n, int e) { return (16 * warp() + g + 8 * (e / 2)) * 64 + 8 * n + 2 * t + e % 2; };
  float s[8][4];
  Wgmma::scores(s, As, 16 * warp(), Bs);
  float p[8][4], o[8][4];
  zero(o);
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      c1[cell(n, e)] = s[n][e];
      p[n][e] = __bfloat162float(a[cell(n, e)]);
    }
  Wgmma::pz(o, p, Bs);
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) c2[cell(n, e)] = o[n][e];
}

// ----------------------------------------------------------------------------
// launchers

// The kernel may take `bytes` of dynamic shared memory, and the multiprocessor gives shared memory
// all of its carve-out, so that Tiles<D>::blocks blocks fit.
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
}

unsigned grid_of(int64_t heads, int64_t rows, int64_t* tiles) {
  if (rows > INT32_MAX - kRows)
    throw Error(std::string("[") + kOp + "] " + std::to_string(rows) + " rows a head are more than the kernels take (2^31 - 65)");
  *tiles = (rows + kRows - 1) / kRows;
  if (*tiles > 0 && heads > INT_MAX / *tiles)
    throw Error(std::string("[") + kOp + "] " + std::to_string(heads) + " heads of " + std::to_string(rows) +
                " rows are more tiles of 64 than one CUDA launch takes (2^31 - 1)");
  return static_cast<unsigned>(heads * *tiles);
}

// An operand as the kernels read it (Rows): where it lies, when it is bf16 and its rows are whole
// 16-byte copies (the width and every step a multiple of 8 elements, the start 16-byte aligned);
// else a packed bf16 copy (heads, Tp, D), zeros past T and the width, made in `keep`.
template <class X>
bool in_place(const Tensor& x, const kernels::HeadRows& rows, int64_t w) {
  return std::is_same_v<X, bf16> && w % 8 == 0 && rows.offset % 8 == 0 && rows.batch % 8 == 0 && rows.head % 8 == 0 &&
         rows.row % 8 == 0 && rows.row <= INT32_MAX && reinterpret_cast<uintptr_t>(x.raw_data()) % 16 == 0;
}
// A packed copy p (heads, Tp, D) as Rows: every row and column there, the padding zeros.
Rows packed_rows(const Tensor& p, int64_t H) {
  const int64_t Tp = p.dim(1), D = p.dim(2);
  return {cdata<bf16>(p), kernels::HeadRows{0, H * Tp * D, Tp * D, D}, Tp, static_cast<int>(D)};
}

template <class X>
Rows operand(const Tensor& x, const kernels::HeadRows& rows, const kernels::AttentionLayout& at, int64_t T, int64_t w,
             int D, Tensor& keep) {
  if (in_place<X>(x, rows, w)) return {cdata<bf16>(x), rows, T, static_cast<int>(w)};
  const int64_t heads = at.B * at.H, Tp = padded(T);
  keep = Tensor::empty(Shape{heads, Tp, D}, DType::bf16, x.device());
  pack_kernel<X><<<blocks_for(heads * Tp * (D / 8), 256), 256, 0, stream_for(x)>>>(
      cdata<X>(x), rows, at.H, heads, T, Tp, static_cast<int>(w), D, mdata<bf16>(keep));
  TG_CUDA_CHECK_LAUNCH();
  return packed_rows(keep, at.H);
}

// q, k, v as the kernels read them, and the packed copies made for them.
struct Operands {
  Tensor copies[4];
  Rows q, k, v;
  template <class X>
  static Operands of(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionLayout& at, int D) {
    Operands o;
    o.q = operand<X>(q, at.q, at, at.Tq, at.d, D, o.copies[0]);
    o.k = operand<X>(k, at.k, at, at.Tk, at.d, D, o.copies[1]);
    o.v = operand<X>(v, at.v, at, at.Tk, at.dv, D, o.copies[2]);
    return o;
  }
};

// A run's switches (tests and benchmarks use set_attention_wgmma, set_attention_overlap): the
// wgmma kernels unless TAPEGRAD_ATTENTION_WGMMA is 0; the overlapped ones TAPEGRAD_ATTENTION_OVERLAP
// names (a digit 0 to 7, the mask of cuda.hpp), else kOverlapDefault.
std::atomic<bool> g_wgmma{[] {
  const char* env = std::getenv("TAPEGRAD_ATTENTION_WGMMA");
  return !(env && env[0] == '0' && env[1] == '\0');
}()};
std::atomic<unsigned> g_overlap{[] {
  const char* env = std::getenv("TAPEGRAD_ATTENTION_OVERLAP");
  return env && env[0] >= '0' && env[0] <= '7' && env[1] == '\0' ? static_cast<unsigned>(env[0] - '0') : kOverlapDefault;
}()};
bool overlaps(unsigned kernel) { return (g_overlap.load() & kernel) != 0; }

template <class P, class X>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionLayout& at, bool causal,
             float scale, Tensor& out, Tensor& lse) {
  const Operands o = Operands::of<X>(q, k, v, at, P::D);
  int64_t tiles = 0;
  const unsigned grid = grid_of(at.B * at.H, at.Tq, &tiles);
  if constexpr (std::is_same_v<P, Wgmma>) {
    if (overlaps(kOverlapForward)) {  // Note [overlapped wgmma forward]
      const size_t bytes = sizeof(bf16) * (P::own + 6 * P::tile) + (P::align - 16);
      allow_shared(forward_kernel<Wgmma, X, true>, bytes);
      forward_kernel<Wgmma, X, true><<<grid, kThreads, bytes, stream_for(q)>>>(o.q, o.k, o.v, mdata<X>(out),
                                                                              mdata<float>(lse), at, causal, scale, tiles);
      TG_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const size_t bytes = sizeof(bf16) * (P::own + 4 * P::tile) + (P::align - 16);
  allow_shared(forward_kernel<P, X>, bytes);
  forward_kernel<P, X><<<grid, kThreads, bytes, stream_for(q)>>>(o.q, o.k, o.v, mdata<X>(out), mdata<float>(lse), at,
                                                                 causal, scale, tiles);
  TG_CUDA_CHECK_LAUNCH();
}

template <class P, class X>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
              const Tensor& lse, const kernels::AttentionLayout& at, bool causal, float scale, Tensor& dq, Tensor& dk,
              Tensor& dv) {
  const cudaStream_t stream = stream_for(q);
  const int64_t heads = at.B * at.H, Tqp = padded(at.Tq);
  constexpr int D = P::D;
  Operands o = Operands::of<X>(q, k, v, at, D);
  // dout (sharing out's layout): where it lies when it can be read so (then only delta is made),
  // else packed with delta
  const bool direct = in_place<X>(dout, at.out, at.dv);
  Tensor& gp = o.copies[3];
  if (!direct) gp = Tensor::empty(Shape{heads, Tqp, D}, DType::bf16, q.device());
  const Rows g = direct ? Rows{cdata<bf16>(dout), at.out, at.Tq, static_cast<int>(at.dv)} : packed_rows(gp, at.H);
  Tensor delta = Tensor::empty(Shape{heads, at.Tq}, DType::f32, q.device());
  bool rows_of_64 = false;  // bf16 rows of 64 columns read where they lie: delta by 16-byte loads
  if constexpr (std::is_same_v<X, bf16>)
    rows_of_64 = direct && D == 64 && at.dv == 64 && reinterpret_cast<uintptr_t>(out.raw_data()) % 16 == 0;
  if (rows_of_64) {
    delta_bf16_64_kernel<<<blocks_for(heads * at.Tq * 8, 256), 256, 0, stream>>>(cdata<bf16>(out), cdata<bf16>(dout), at,
                                                                                mdata<float>(delta));
  } else {
    pack_dout_kernel<X><<<blocks_for(heads * Tqp * 32, 256), 256, 0, stream>>>(
        cdata<X>(out), cdata<X>(dout), at, Tqp, D, direct ? nullptr : mdata<bf16>(gp), mdata<float>(delta));
  }
  TG_CUDA_CHECK_LAUNCH();
  int64_t key_tiles = 0, query_tiles = 0;
  const unsigned key_grid = grid_of(heads, at.Tk, &key_tiles), query_grid = grid_of(heads, at.Tq, &query_tiles);
  bool overlapped = false;
  if constexpr (std::is_same_v<P, Wgmma>) {
    if (overlaps(kOverlapDkdv)) {  // dkdv_kernel<Wgmma, X, true>
      overlapped = true;
      const size_t bytes = sizeof(bf16) * 2 * P::own + query_stream_bytes<P, 3>() + (P::align - 16);
      allow_shared(dkdv_kernel<Wgmma, X, true>, bytes);
      if (key_grid > 0) {
        dkdv_kernel<Wgmma, X, true><<<key_grid, kThreads, bytes, stream>>>(o.q, o.k, o.v, g, cdata<float>(lse),
                                                                         cdata<float>(delta), mdata<X>(dk), mdata<X>(dv),
                                                                         at, causal, scale, key_tiles);
        TG_CUDA_CHECK_LAUNCH();
      }
    }
  }
  const size_t dkdv_bytes = sizeof(bf16) * 2 * P::own + query_stream_bytes<P, 2>() + (P::align - 16);
  allow_shared(dkdv_kernel<P, X>, dkdv_bytes);
  if (key_grid > 0 && !overlapped) {
    dkdv_kernel<P, X><<<key_grid, kThreads, dkdv_bytes, stream>>>(o.q, o.k, o.v, g, cdata<float>(lse),
                                                                  cdata<float>(delta), mdata<X>(dk), mdata<X>(dv), at,
                                                                  causal, scale, key_tiles);
    TG_CUDA_CHECK_LAUNCH();
  }
  if constexpr (std::is_same_v<P, Wgmma>) {
    if (overlaps(kOverlapDq)) {  // dq_kernel<Wgmma, X, true>
      const size_t bytes = sizeof(bf16) * (2 * P::own + 6 * P::tile) + (P::align - 16);
      allow_shared(dq_kernel<Wgmma, X, true>, bytes);
      if (query_grid > 0) {
        dq_kernel<Wgmma, X, true><<<query_grid, kThreads, bytes, stream>>>(o.q, o.k, o.v, g, cdata<float>(lse),
                                                                         cdata<float>(delta), mdata<X>(dq), at, causal,
                                                                         scale, query_tiles);
        TG_CUDA_CHECK_LAUNCH();
      }
      return;
    }
  }
  const size_t dq_bytes = sizeof(bf16) * (2 * P::own + 4 * P::tile) + (P::align - 16);
  allow_shared(dq_kernel<P, X>, dq_bytes);
  if (query_grid > 0) {
    dq_kernel<P, X><<<query_grid, kThreads, dq_bytes, stream>>>(o.q, o.k, o.v, g, cdata<float>(lse), cdata<float>(delta),
                                                                mdata<X>(dq), at, causal, scale, query_tiles);
    TG_CUDA_CHECK_LAUNCH();
  }
}


// Compute capability 9.0 (H100, H200): the devices the sm_90a code runs on, per device index.
bool hopper(int device) {
  static std::array<std::atomic<int>, 64> known{};  // 0 unknown, 1 no, 2 yes
  if (device < 0 || device >= static_cast<int>(known.size())) return false;
  int v = known[static_cast<size_t>(device)].load();
  if (v == 0) {
    int major = 0, minor = 0;
    TG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    TG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    v = major == 9 && minor == 0 ? 2 : 1;
    known[static_cast<size_t>(device)].store(v);
  }
  return v == 2;
}

// f(P, X) for P the products' policy (Wgmma on Hopper at D = 64, unless switched off; else
// MmaSync<D>, D = 64 or 128) and X the operands' storage (f32, bf16)
template <class F>
void dispatch(int D, const Tensor& q, F&& f) {
  auto with_p = [&]<class X>() {
    if (D == 64 && g_wgmma.load() && hopper(q.device().index)) f.template operator()<Wgmma, X>();
    else if (D == 64) f.template operator()<MmaSync<64>, X>();
    else f.template operator()<MmaSync<128>, X>();
  };
  if (q.dtype() == DType::bf16) with_p.template operator()<bf16>();
  else with_p.template operator()<float>();
}

}  // namespace

void set_attention_wgmma(bool use) { g_wgmma.store(use); }
void set_attention_overlap(unsigned kernels) { g_overlap.store(kernels & 7u); }
unsigned attention_overlap() { return g_overlap.load(); }
bool attention_wgmma() { return g_wgmma.load(); }
bool attention_wgmma_available(int device) { return hopper(device); }

void attention_wgmma_probe(const Tensor& a, const Tensor& b, Tensor& c1, Tensor& c2) {
  if (!hopper(a.device().index)) throw Error("[wgmma probe] needs a device of compute capability 9.0");
  for (const Tensor* t : {&a, &b})
    if (t->shape() != Shape{64, 64} || t->dtype() != DType::bf16)
      throw Error("[wgmma probe] takes (64, 64) bf16, not " + t->shape().str() + " " + dtype_name(t->dtype()));
  c1 = Tensor::empty(Shape{64, 64}, DType::f32, a.device());
  c2 = Tensor::empty(Shape{64, 64}, DType::f32, a.device());
  const size_t bytes = sizeof(bf16) * 2 * Wgmma::tile + (Wgmma::align - 16);
  allow_shared(wgmma_probe_kernel, bytes);
  wgmma_probe_kernel<<<1, kThreads, bytes, stream_for(a)>>>(cdata<bf16>(a), cdata<bf16>(b), mdata<float>(c1),
                                                           mdata<float>(c2));
  TG_CUDA_CHECK_LAUNCH();
}

void flash_bf16_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionLayout& at, int D,
                        bool causal, double scale, Tensor& out, Tensor& lse) {
  dispatch(D, q, [&]<class P, class X>() { forward<P, X>(q, k, v, at, causal, static_cast<float>(scale), out, lse); });
}

void flash_bf16_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                         const Tensor& lse, const kernels::AttentionLayout& at, int D, bool causal, double scale,
                         Tensor& dq, Tensor& dk, Tensor& dv) {
  dispatch(D, q, [&]<class P, class X>() {
    backward<P, X>(q, k, v, out, dout, lse, at, causal, static_cast<float>(scale), dq, dk, dv);
  });
}

}  // namespace tapegrad::cuda
