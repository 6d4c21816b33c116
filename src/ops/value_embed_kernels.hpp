// The value-embed kernel family: facades (tapegrad::kernels) that dispatch on the tensors' device to
// cpu:: (src/ops/cpu/value_embed.cpp) or cuda:: (src/cuda/value_embed.hpp), same signatures on both.
//
// Rules: as in kernels.hpp, a kernel writes into tensors its caller allocated, and the front-end
// (value_embed.cpp, optim/sparse.cpp) has checked shapes and dtypes. Row offsets are 64-bit
// everywhere: a table may hold more than 2^31 elements. An id outside [0, V) is never read or
// written through: the CPU throws at once, CUDA records it in the device's error slot (Note
// [kernel errors] in src/cuda/memory.cu) for the next synchronization.
#pragma once

#include <cstdint>

#include "graph/tensor.hpp"
#include "ops/kernels.hpp"
#include "ops/value_embed.hpp"

namespace tapegrad::kernels {

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
void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, ops::ValueEmbedAccumulate mode,
                            ops::ValueEmbedBuffer& buffer);

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

namespace tapegrad::cpu {

void value_embed_gather(const Tensor& weight, const Tensor& ids, Tensor& planes);
void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, ops::ValueEmbedAccumulate mode,
                            ops::ValueEmbedBuffer& buffer);
int64_t value_embed_select_touched(const Tensor& touched, Tensor& selected);
void value_embed_take_rows(Tensor& sum, Tensor& touched, const Tensor& selected, int64_t count, Tensor& rows,
                           Tensor& grad);
void sparse_sgd_rows(Tensor& table, const Tensor& rows, const Tensor& grad, float lr);
void sparse_adamw_rows(Tensor& table, const Tensor& rows, const Tensor& grad, Tensor& m, Tensor& v,
                       const kernels::AdamWScalars& s);

}  // namespace tapegrad::cpu
