// The value-embed kernel family: facades (tapegrad::kernels) that dispatch on the tensors' device to
// cpu:: (src/kernels/cpu/value_embed.cpp) or cuda:: (src/cuda/value_embed.hpp), same signatures on both.
//
// Rules: as in kernels.hpp, a kernel writes into tensors its caller allocated, and the front-end
// (value_embed.cpp, optim/sparse.cpp) has checked shapes and dtypes. Row offsets are 64-bit
// everywhere: a table may hold more than 2^31 elements. An id outside [0, V) is never read or
// written through: the CPU throws at once, CUDA records it in the device's error slot (Note
// [kernel errors] in src/cuda/memory.cu) for the next synchronization.
#pragma once

#include <cstdint>

#include "tapegrad/tensor/tensor.hpp"
#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::kernels {

// How the backward adds the planes' gradient into the buffer (Note [value-embed arithmetic] in
// src/ops/value_embed.cpp for the exact rounding of each).
enum class ValueEmbedAccumulate : uint8_t {
  // Each contribution is added on its own and rounded to the buffer's dtype. On the CPU in index
  // order (deterministic); on CUDA with f16x2 (or f32) atomics, in no fixed order: reproducible
  // within the buffer's rounding, not bit for bit.
  atomic,
  // Per step, each row's contributions are summed in fp32 in a fixed order (sorted segments, no
  // atomics) and the sum is added to the buffer once: the same bits on every run and on every
  // device, and one rounding per row and step instead of one per contribution.
  deterministic,
};
const char* value_embed_accumulate_name(ValueEmbedAccumulate a);

// The persistent gradient of a value-embedding table between two pulls.
struct ValueEmbedBuffer {
  Tensor sum;        // (P*V, D) f16 (or f32): the table's gradient summed over the cycle's steps
  Tensor touched;    // (V,) i32: 1 at each token id a backward added since the last pull, else 0
  Tensor workspace;  // (W,) i32 on CUDA, undefined on the CPU: the atomic backward's scratch for
                     // grouping the ids (Note [combining duplicate ids]), 8 (V + 3 * 2^15) bytes.
                     // Without one, CUDA's atomic backward adds each contribution on its own.

  // An all-zero buffer for a (P*V, D) table, on the table's device, with its workspace. dtype f16
  // (the seed's) or f32.
  static ValueEmbedBuffer zeros(const Tensor& table, int planes, DType dtype = DType::f16);
  bool defined() const { return sum.defined(); }
  int64_t planes() const { return touched.defined() && touched.dim(0) ? sum.dim(0) / touched.dim(0) : 0; }
};


// The deterministic mode cuts each row's contributions, in sorted order, at multiples of this many
// positions (Note [value-embed arithmetic]); CPU and CUDA share it so they share the bits.
inline constexpr int64_t kValueEmbedChunk = 64;

// CUDA's atomic backward groups equal ids before it adds (Note [combining duplicate ids] in
// src/ops/value_embed.cpp) in the buffer's workspace, at most this many positions at a time; longer
// id sequences go in batches of this size.
inline constexpr int64_t kValueEmbedGroupBatch = 65536;

// The i32 elements of the workspace of a buffer of V rows per plane on `device` (0 on the CPU,
// which needs none).
int64_t value_embed_workspace_elements(Device device, int64_t vocab);

// planes (P, T, D) = weight (P*V, D) at rows p*V + ids[i]. weight bf16 or f32, planes the same
// dtype or f32 from bf16 (widened). CUDA writes a zero row where an id is out of range.
void value_embed_gather(const Tensor& weight, const Tensor& ids, Tensor& planes);

// buffer.sum (P*V, D)[p*V + ids[i]] += dplanes (P, T, D)[p][i] for every p and i; buffer.touched
// (V,)[ids[i]] = 1. dplanes bf16 or f32; sum f16 or f32; the arithmetic of each mode is Note
// [value-embed arithmetic]. buffer.workspace is scratch (CUDA's atomic mode; without one, CUDA adds
// each contribution on its own).
void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, ValueEmbedAccumulate mode,
                            ValueEmbedBuffer& buffer);

// selected (V,) i32 <- the ids t with touched[t] != 0, ascending, in its first U entries; returns U.
// Synchronizes (U decides the size of what the pull allocates next), so it reports kernel errors.
int64_t value_embed_select_touched(const Tensor& touched, Tensor& selected);

// The pull's copy-and-clear, for R = P * count rows r = p * count + u, token t = selected[u]:
// rows[r] = p*V + t, grad[r] = sum[p*V + t], then sum[p*V + t] = 0 and touched[t] = 0.
void value_embed_take_rows(Tensor& sum, Tensor& touched, const Tensor& selected, int64_t count, Tensor& rows,
                           Tensor& grad);

// Sparse updates of table (N, D) bf16 or f32 at rows (R,) i64 with grad (R, D) f16 or f32; each
// element computed in fp32 and rounded once to the table's dtype. Rows must be distinct.
// SGD: w = w - lr * g.
void sparse_sgd_rows(Tensor& table, const Tensor& rows, const Tensor& grad, float lr);
// AdamW: adamw.hpp's per-element arithmetic on the rows; m, v (N, D) f32.
void sparse_adamw_rows(Tensor& table, const Tensor& rows, const Tensor& grad, Tensor& m, Tensor& v,
                       const AdamWScalars& s);

}  // namespace tapegrad::kernels

