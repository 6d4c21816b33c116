// dropout and its Generator (dropout.hpp): forward and backward together.
//
// Note [dropout stream]
// A call on n elements takes ceil(n / 4) counters from its generator, starting at offset o, and
// element i reads word i % 4 of Philox's block for counter o + i / 4 under key seed; it is kept when
// that word is at least ceil(p * 2^32) (kernels::dropout_threshold). The mask is a function of
// (seed, o, i) alone: no state is shared between elements, so any thread or GPU lane can compute
// any element, and the CPU and CUDA give the same mask. The node keeps (seed, o) in a small host
// tensor and the backward regenerates the mask from them (it saves no mask).
#include "tapegrad/ops/fused/dropout.hpp"

#include <cmath>
#include <cstdio>

#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad {

uint64_t Generator::take(uint64_t count) {
  if (count > UINT64_MAX - offset_)
    throw Error("[dropout] the generator's stream is used up: offset " + std::to_string(offset_) + " + " +
                std::to_string(count) + " counters passes 2^64; call manual_seed() for a new stream");
  const uint64_t first = offset_;
  offset_ += count;
  return first;
}

namespace ops {

using namespace detail;

// x (any) -> same shape; y = x * m, m = 1 / (1 - p) where kept and 0 where dropped;  dx = dy * m
Var dropout(Var x, double p, Generator& gen, bool training) {
  Graph& g = graph_of("dropout", {x});
  // a bf16 x (an autocast activation) is dropped in f32 and rounded back: the same mask and the
  // same values, in two more passes
  if (x.dtype() == DType::bf16 && training && p > 0.0 && p <= 1.0) return to(dropout(to(x, DType::f32), p, gen, true), DType::bf16);
  const Tensor& v = x.value();
  need_float("dropout", "x", v);
  if (!(p >= 0.0 && p <= 1.0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", p);
    throw Error(std::string("[dropout] p must be a probability in [0, 1], got ") + buf);
  }
  if (!training || p == 0.0) return x;
  const int64_t n = v.numel();
  const uint64_t counters = static_cast<uint64_t>(n / 4 + (n % 4 != 0));
  const uint64_t offset = gen.take(counters);
  Tensor y = like(v);
  kernels::dropout(v, p, gen.seed(), offset, y);
  // (seed, offset) as two i64 on the host, bit for bit
  Tensor key = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(gen.seed()), static_cast<int64_t>(offset)},
                                   Shape{2});
  return g.record("dropout", std::move(y), {x}, [](BackwardContext& ctx) {
    const int64_t* key = ctx.saved(0).data<int64_t>();
    Tensor dx = like(ctx.grad_output());
    kernels::dropout(ctx.grad_output(), ctx.scalar(), static_cast<uint64_t>(key[0]), static_cast<uint64_t>(key[1]), dx);
    ctx.accumulate(0, dx);
  }, {std::move(key)}, p);
}

}  // namespace ops

}  // namespace tapegrad
