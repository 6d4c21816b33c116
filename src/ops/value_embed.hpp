// The value-embedding path: a gather of P planes from one table whose backward adds the planes'
// gradient into a persistent buffer, and the "pull" that hands that buffer's touched rows to a
// sparse optimizer (src/optim/sparse.hpp). The idea is the seed's, bench/value_embed/value_embed_op.py
// (docs/value_embed.md, "The seed's op"); docs/value_embed.md has the design, the arithmetic and
// the measurements.
//
// Rules:
// - The table never gets a dense gradient. The node's backward consumes the planes' gradient and
//   writes only the buffer (Note [the value-embed node and the engine] in value_embed.cpp).
// - Between pulls the buffer is nonzero only at rows p*V + t for tokens t of the cycle's steps, and
//   `touched` is 1 exactly at those t; a pull leaves both all zero.
// - The lookup and its backward never synchronize with the device; in the atomic mode they allocate
//   nothing either (CUDA groups the ids in the buffer's workspace, made once), so a step that uses
//   them can be captured in a CUDA graph (the deterministic mode takes O(T) workspace from the
//   caching allocator, which serves a capture from the graph's own pool: it replays too). On CUDA
//   an out-of-range id is therefore skipped and reported at the next synchronization
//   (tapegrad::synchronize(device), a copy to the host, every pull), as tapegrad::Error naming the
//   op, the id and its position; on the CPU it throws at once.
#pragma once

#include <cstdint>
#include <optional>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/value_embed_kernels.hpp"

namespace tapegrad::ops {

// ValueEmbedAccumulate and ValueEmbedBuffer live with the kernels that use them
// (tapegrad/kernels/value_embed_kernels.hpp); the op takes them by these names.
using kernels::ValueEmbedAccumulate;
using kernels::ValueEmbedBuffer;
using kernels::value_embed_accumulate_name;

struct ValueEmbedOptions {
  ValueEmbedAccumulate accumulate = ValueEmbedAccumulate::atomic;
  // The planes' dtype: the weight's (unset), or f32 from a bf16 table, widened in the gather, so a
  // bf16 table feeds tapegrad's f32 ops (the backward then reads an f32 plane gradient).
  std::optional<DType> dtype;
};

// weight (P*V, D) bf16 or f32, viewed as P planes of (V, D); ids (T,) i32 or i64 in [0, V).
//   -> (P, T, D) in weight's dtype (or options.dtype): out[p][i] = weight[p*V + ids[i]]
// With a buffer, in grad mode, and weight requiring a gradient, it records one node whose backward
// does buffer.sum[p*V + ids[i]] += dout[p][i] and buffer.touched[ids[i]] = 1, for every p and i
// (a buffer for a weight that needs no gradient is refused).
// With no buffer, or under NoGrad, it is the plain gather and records nothing.
//
// One (P, T, D) value rather than P values of (T, D): one node, one launch each way, one sort of
// the ids in the deterministic mode, and one allocation (tensors have no views to slice planes
// from). A model combines the planes with reshape and matmul (apps/value_embed).
Var value_embed_lookup(Var weight, Var ids, int planes, const ValueEmbedBuffer& buffer = {},
                       const ValueEmbedOptions& options = {});

// The rows a pull took out of the buffer: R = P * U rows for the U tokens touched since the last
// pull, plane by plane, tokens ascending.
struct PulledRows {
  Tensor rows;  // (R,) i64: row ids into the table, p*V + t, ascending
  Tensor grad;  // (R, D) in the buffer's dtype: the summed gradient of each row
  int64_t count() const { return rows.defined() ? rows.dim(0) : 0; }
};

// The update event: compacts the touched rows into PulledRows and zeroes those rows of buffer.sum
// and all of buffer.touched. Synchronizes once, to learn R, and so reports any out-of-range id the
// cycle's kernels met.
PulledRows value_embed_pull(ValueEmbedBuffer& buffer);

}  // namespace tapegrad::ops
