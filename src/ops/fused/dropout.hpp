// Dropout with a counter-based generator, and the generator.
//
//   dropout(x (any), p, gen, training) -> same shape: y = x * mask / (1 - p), mask[i] in {0, 1}
//   with P(mask[i] = 0) = p (to 2^-32); dx = dy * mask / (1 - p), the same mask
//
// The mask is Philox4x32-10 (src/kernels/philox.hpp) keyed by the generator's seed at a range of
// counters the call takes from it (Note [dropout stream] in dropout.cpp): the same seed gives the
// same masks, call after call, on the CPU and on CUDA alike, for any thread count.
#pragma once

#include <cstdint>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad {

// A seed and a position in its stream of Philox counters (PyTorch's philox seed and offset).
// Each dropout call takes a fresh range of counters, so consecutive calls draw different masks and
// a generator made again with the same seed draws them again.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }  // the next counter a call will take
  void manual_seed(uint64_t seed) {            // a new stream, from its start
    seed_ = seed;
    offset_ = 0;
  }
  // Takes `count` counters and returns the first; throws when the 2^64 counters would wrap.
  uint64_t take(uint64_t count);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

namespace ops {

// p in [0, 1]. With training false, or p = 0, dropout is the identity: it returns x itself and
// takes nothing from the generator. p = 1 gives zeros.
Var dropout(Var x, double p, Generator& gen, bool training = true);

}  // namespace ops

}  // namespace tapegrad
