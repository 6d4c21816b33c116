// What the attention's two kernel families (attention.cu: f32; flash_bf16.cu: bf16 products) share:
// where an operand's rows are, and which tile a block takes.
#pragma once

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::cuda {

// Where row t of head hi (= b H + h) of an operand starts (Note [attention layouts] in
// src/kernels/attention.cpp).
__device__ inline int64_t row_at(const kernels::HeadRows& x, int64_t H, int64_t hi, int64_t t) {
  return x.offset + (hi / H) * x.batch + (hi % H) * x.head + t * x.row;
}

// The tile of this block: (b, h) and its first row, tiles of `rows` rows; with `reversed` the
// last tiles of a head come first (causal query tiles, the longest, run first).
struct TileOf {
  int64_t head, first;
};
__device__ inline TileOf tile_of(int64_t tiles, bool reversed, int64_t rows) {
  const int64_t t = blockIdx.x % tiles;
  return {blockIdx.x / tiles, (reversed ? tiles - 1 - t : t) * rows};
}

}  // namespace tapegrad::cuda
