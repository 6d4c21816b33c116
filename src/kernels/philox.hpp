// Philox4x32-10, the counter-based random number generator of Salmon et al. ("Parallel Random
// Numbers: As Easy as 1, 2, 3", SC 2011), and dropout's keep test built on it. Host and device
// code (TG_HD): the CPU loop (cpu/norm.cpp) and the CUDA kernel (src/cuda/norm.cu) both run these
// functions, so the same (seed, counter) gives the same words, and the same mask, on every device.
//
// Rule: a block of four 32-bit words is a pure function of a 128-bit counter and a 64-bit key; no
// state. Dropout keys it with the generator's seed and counts with its offset (Note [dropout
// stream] in src/ops/fused/dropout.cpp). The words match Random123's known-answer vectors
// (tests/ops/test_norm.cpp).
#pragma once

#include <cstdint>

#include "tapegrad/kernels/cr_math.hpp"  // TG_HD

namespace tapegrad::kernels {

struct PhiloxBlock {
  uint32_t w[4];
};

// Ten rounds over counter (c0, c1, c2, c3) with key (k0, k1): each round multiplies two words by the
// Philox constants, and mixes the halves of the products with the other two words and the key;
// the key moves by the Weyl constants between rounds.
TG_HD inline PhiloxBlock philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                       uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0, p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// The block of a 64-bit counter (the high half of Philox's 128-bit counter is 0) under a 64-bit key.
TG_HD inline PhiloxBlock philox_block(uint64_t seed, uint64_t counter) {
  return philox4x32_10(static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Dropout's threshold for a drop probability p in [0, 1]: ceil(p * 2^32). A uniform 32-bit word w
// keeps its element when w >= threshold, which happens with probability 1 - threshold / 2^32,
// within 2^-32 of 1 - p (p = 0 keeps every element, p = 1 none). Computed on the host.
inline uint64_t dropout_threshold(double p) {
  const double scaled = p * 4294967296.0;  // exact: a power-of-two scaling
  uint64_t t = static_cast<uint64_t>(scaled);
  if (static_cast<double>(t) < scaled) ++t;
  return t;
}

// Element i of a dropout call that starts at counter `offset`: word i % 4 of block offset + i / 4.
// m = x's multiplier: `scale` (1 / (1 - p), rounded to T) where kept, 0 where dropped.
template <class T>
TG_HD inline T dropout_multiplier(uint32_t word, uint64_t threshold, T scale) {
  return static_cast<uint64_t>(word) >= threshold ? scale : T(0);
}

}  // namespace tapegrad::kernels
