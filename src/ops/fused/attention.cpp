// The fused scaled dot-product attention (attention.hpp): forward and backward together.
#include "tapegrad/ops/fused/attention.hpp"

#include <cmath>
#include <string>

#include "tapegrad/ops/common.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// a and b (both (B, H, T, d)-shaped) agree in `axis`, or an error naming both shapes and the axis.
void same_extent(const char* a_name, const Tensor& a, const char* b_name, const Tensor& b, int axis, const char* what) {
  if (a.dim(axis) == b.dim(axis)) return;
  throw Error(std::string("[") + kOp + "] " + a_name + " " + a.shape().str() + " and " + b_name + " " +
              b.shape().str() + " differ in axis " + std::to_string(axis) + " (" + what + "): " +
              std::to_string(a.dim(axis)) + " and " + std::to_string(b.dim(axis)) +
              "; q (B, H, Tq, d), k (B, H, Tk, d) and v (B, H, Tk, dv) must agree");
}

// dy (B, H, Tq, dv) -> dq, dk, dv from the saved lse (B, H, Tq) and the output, P recomputed:
// dv = P^T dy, dS = P * (dy v^T - rowsum(dy * y)), dq = scale dS k, dk = scale dS^T q
template <bool Causal>
void attention_backward_rule(BackwardContext& ctx) {
  const Tensor& lse = ctx.saved(0);
  Tensor delta = Tensor::empty(lse.shape(), DType::f64, lse.device());  // rowsum(dy * y), scratch
  Tensor grads[3] = {like(ctx.input(0)), like(ctx.input(1)), like(ctx.input(2))};
  kernels::attention_backward(ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(), ctx.grad_output(), lse, Causal,
                              ctx.scalar(), delta, grads[0], grads[1], grads[2]);
  for (int i = 0; i < 3; ++i)
    if (ctx.needs_grad(i)) ctx.accumulate(i, grads[i]);
}

}  // namespace

// q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv) -> (B, H, Tq, dv); see attention.hpp
Var scaled_dot_product_attention(Var q, Var k, Var v, bool causal, double scale) {
  Graph& g = graph_of(kOp, {q, k, v});
  const Tensor& tq = q.value();
  const Tensor& tk = k.value();
  const Tensor& tv = v.value();
  need_ndim(kOp, "q", tq, 4);
  need_ndim(kOp, "k", tk, 4);
  need_ndim(kOp, "v", tv, 4);
  need_float(kOp, "q", tq);
  same_dtype(kOp, tq, tk);
  same_dtype(kOp, tq, tv);
  same_extent("q", tq, "k", tk, 0, "batch");
  same_extent("q", tq, "k", tk, 1, "heads");
  same_extent("q", tq, "k", tk, 3, "head size");
  same_extent("k", tk, "v", tv, 0, "batch");
  same_extent("k", tk, "v", tv, 1, "heads");
  same_extent("k", tk, "v", tv, 2, "keys");
  if (tk.dim(2) == 0) throw Error(std::string("[") + kOp + "] no keys to attend to: k " + tk.shape().str() + " has 0 in axis 2");
  if (tq.dim(3) == 0) throw Error(std::string("[") + kOp + "] head size 0: q " + tq.shape().str() + " has 0 in axis 3");
  if (causal && tq.dim(2) != tk.dim(2))
    throw Error(std::string("[") + kOp + "] causal attention needs as many queries as keys: q " + tq.shape().str() +
                " has " + std::to_string(tq.dim(2)) + " in axis 2, k " + tk.shape().str() + " has " +
                std::to_string(tk.dim(2)));
  if (std::isinf(scale)) throw Error(std::string("[") + kOp + "] scale must be finite, got " + std::to_string(scale));
  if (!(scale > 0)) scale = 1.0 / std::sqrt(static_cast<double>(tq.dim(3)));  // the default (also for NaN)
  // The output's extents come from two inputs: their product may not fit, even when each input's does.
  int64_t rows = 0, cells = 0, bytes = 0;
  if (__builtin_mul_overflow(tq.dim(0) * tq.dim(1), tq.dim(2), &rows) || __builtin_mul_overflow(rows, tv.dim(3), &cells) ||
      __builtin_mul_overflow(cells, static_cast<int64_t>(dtype_size(tq.dtype())), &bytes))
    throw Error(std::string("[") + kOp + "] the output (B, H, Tq, dv) = (" + std::to_string(tq.dim(0)) + ", " +
                std::to_string(tq.dim(1)) + ", " + std::to_string(tq.dim(2)) + ", " + std::to_string(tv.dim(3)) +
                ") of q " + tq.shape().str() + " and v " + tv.shape().str() + " has more bytes than fit in 64 bits");
  Tensor out = Tensor::empty(Shape{tq.dim(0), tq.dim(1), tq.dim(2), tv.dim(3)}, tq.dtype(), tq.device());
  Tensor lse = Tensor::empty(Shape{tq.dim(0), tq.dim(1), tq.dim(2)}, tq.dtype(), tq.device());
  kernels::attention_forward(tq, tk, tv, causal, scale, out, lse);
  return g.record(kOp, std::move(out), {q, k, v},
                  causal ? attention_backward_rule<true> : attention_backward_rule<false>, {std::move(lse)}, scale);
}

}  // namespace tapegrad::ops
