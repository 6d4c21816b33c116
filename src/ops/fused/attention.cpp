// The fused scaled dot-product attention (attention.hpp): forward and backward together.
#include "tapegrad/ops/fused/attention.hpp"

#include <cmath>
#include <string>

#include "tapegrad/ops/autocast.hpp"
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

// lse's dtype: the operands', f32 for bf16 ones (the softmax statistics stay f32).
DType stats_dtype(DType operands) { return operands == DType::bf16 ? DType::f32 : operands; }

// dy (B, H, Tq, dv) -> dq, dk, dv from the saved lse (B, H, Tq) and the output, P recomputed:
// dv = P^T dy, dS = P * (dy v^T - rowsum(dy * y)), dq = scale dS k, dk = scale dS^T q
template <bool Causal, kernels::AttentionProducts Products>
void attention_backward_rule(BackwardContext& ctx) {
  const Tensor& lse = ctx.saved(0);
  const Tensor& q = ctx.input(0);
  const Tensor& v = ctx.input(2);
  Tensor delta = Tensor::empty(lse.shape(), DType::f64, lse.device());  // rowsum(dy * y), scratch
  Tensor grads[3] = {like(q), like(ctx.input(1)), like(v)};
  const kernels::AttentionLayout at =
      kernels::AttentionLayout::contiguous(q.dim(0), q.dim(1), q.dim(2), v.dim(2), q.dim(3), v.dim(3));
  kernels::attention_backward(q, ctx.input(1), v, ctx.output(), ctx.grad_output(), lse, at, Causal, ctx.scalar(), delta,
                              grads[0], grads[1], grads[2], Products);
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
  need_float_or_bf16(kOp, "q", tq);  // bf16: autocast's activations, on the bf16 kernels (Note [bf16 activations])
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
  Tensor lse = Tensor::empty(Shape{tq.dim(0), tq.dim(1), tq.dim(2)}, stats_dtype(tq.dtype()), tq.device());
  // inside an Autocast scope, f32 products in bf16 (on CUDA's flash kernels; Note [autocast]); the
  // backward rule carries the choice
  using P = kernels::AttentionProducts;
  const bool bf16 = tq.dtype() == DType::bf16 || compute_dtype(tq.dtype()) == DType::bf16;
  const kernels::AttentionLayout at =
      kernels::AttentionLayout::contiguous(tq.dim(0), tq.dim(1), tq.dim(2), tk.dim(2), tq.dim(3), tv.dim(3));
  kernels::attention_forward(tq, tk, tv, at, causal, scale, out, lse, bf16 ? P::bf16 : P::f32);
  const BackwardFn rule = bf16 ? (causal ? attention_backward_rule<true, P::bf16> : attention_backward_rule<false, P::bf16>)
                               : (causal ? attention_backward_rule<true, P::f32> : attention_backward_rule<false, P::f32>);
  return g.record(kOp, std::move(out), {q, k, v}, rule, {std::move(lse)}, scale);
}

namespace {

constexpr const char* kQkvOp = "qkv_attention";

// dy (B, T, C) -> d qkv (B, T, 3C) in thirds, written by the kernels in place, and d value_add.
// Saved: lse (B, H, T); v (B, T, C) = qkv's third + value_add when there is one.
template <bool Causal, kernels::AttentionProducts Products>
void qkv_attention_backward_rule(BackwardContext& ctx) {
  const Tensor& qkv = ctx.input(0);
  const Tensor& lse = ctx.saved(0);
  const Tensor& v = ctx.saved(1);
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3, H = lse.dim(1);
  kernels::AttentionLayout at = kernels::AttentionLayout::packed(B, T, H, C / H);
  if (v.defined()) at.v = kernels::HeadRows{0, T * C, C / H, C};
  Tensor dqkv = like(qkv);  // the three thirds are written whole
  Tensor delta = Tensor::empty(lse.shape(), DType::f64, lse.device());
  kernels::attention_backward(qkv, qkv, v.defined() ? v : qkv, ctx.output(), ctx.grad_output(), lse, at, Causal,
                              ctx.scalar(), delta, dqkv, dqkv, dqkv, Products);
  if (v.defined() && ctx.needs_grad(1)) {  // d value_add = dv, summed over what it was broadcast along
    Tensor dv = Tensor::empty(Shape{B, T, C}, qkv.dtype(), qkv.device());
    kernels::copy_strided(dqkv, kernels::sliced_view(qkv.shape(), 2, 2 * C, 3 * C), dv, kernels::contiguous_view(dv.shape()));
    const DType add = ctx.input(1).dtype();  // bf16 dv summed in f32 (Note [bf16 activations])
    ctx.accumulate(1, operand(sum_to(operand(dv, add == DType::f64 ? add : DType::f32), ctx.input(1).shape()), add));
  }
  if (ctx.needs_grad(0)) ctx.accumulate(0, std::move(dqkv));
}

}  // namespace

// qkv (B, T, 3C) [, value_add] -> (B, T, C); see attention.hpp
Var qkv_attention(Var qkv, int64_t heads, bool causal, Var value_add, double scale) {
  Graph& g = value_add.defined() ? graph_of(kQkvOp, {qkv, value_add}) : graph_of(kQkvOp, {qkv});
  const Tensor& x = qkv.value();
  need_ndim(kQkvOp, "qkv", x, 3);
  need_float_or_bf16(kQkvOp, "qkv", x);  // bf16: autocast's activations, on the bf16 kernels (Note [bf16 activations])
  const int64_t B = x.dim(0), T = x.dim(1), C3 = x.dim(2);
  if (heads <= 0) throw Error(std::string("[") + kQkvOp + "] heads must be at least 1, got " + std::to_string(heads));
  if (C3 % 3 != 0 || C3 == 0 || (C3 / 3) % heads != 0)
    throw Error(std::string("[") + kQkvOp + "] qkv " + x.shape().str() + " must be (B, T, 3C) with C a multiple of " +
                std::to_string(heads) + " heads: its last axis " + std::to_string(C3) + " is not " +
                std::to_string(3 * heads) + " times a head size >= 1");
  if (T == 0) throw Error(std::string("[") + kQkvOp + "] no keys to attend to: qkv " + x.shape().str() + " has 0 in axis 1");
  if (std::isinf(scale)) throw Error(std::string("[") + kQkvOp + "] scale must be finite, got " + std::to_string(scale));
  const int64_t C = C3 / 3, d = C / heads;
  if (!(scale > 0)) scale = 1.0 / std::sqrt(static_cast<double>(d));
  kernels::AttentionLayout at = kernels::AttentionLayout::packed(B, T, heads, d);
  Tensor v;  // the values, when value_add changes them: qkv's third + value_add, (B, T, C)
  if (value_add.defined()) {
    const Tensor& a = value_add.value();
    promote(kQkvOp, x, a);  // one dtype, or bf16 values and an f32 value_add (added in f32, rounded once)
    const Shape vs{B, T, C};
    if (broadcast_shapes(kQkvOp, vs, a.shape()) != vs)
      throw Error(std::string("[") + kQkvOp + "] value_add " + a.shape().str() + " does not broadcast to the values' shape " +
                  vs.str() + " of qkv " + x.shape().str());
    Tensor third = Tensor::empty(vs, x.dtype(), x.device());
    kernels::copy_strided(x, kernels::sliced_view(x.shape(), 2, 2 * C, 3 * C), third, kernels::contiguous_view(vs));
    v = Tensor::empty(vs, x.dtype(), x.device());
    const bool mixed = a.dtype() != x.dtype();  // bf16 with f32: of equal shapes only
    kernels::binary(kernels::Binary::add, third, mixed && a.shape() != vs ? expand(a, a.shape(), vs) : a, v);
    at.v = kernels::HeadRows{0, T * C, d, C};
  }
  Tensor out = Tensor::empty(Shape{B, T, C}, x.dtype(), x.device());
  Tensor lse = Tensor::empty(Shape{B, heads, T}, stats_dtype(x.dtype()), x.device());
  // inside an Autocast scope, f32 products in bf16 (on CUDA's flash kernels; Note [autocast]); the
  // backward rule carries the choice
  using P = kernels::AttentionProducts;
  const bool bf16 = x.dtype() == DType::bf16 || compute_dtype(x.dtype()) == DType::bf16;
  kernels::attention_forward(x, x, v.defined() ? v : x, at, causal, scale, out, lse, bf16 ? P::bf16 : P::f32);
  const BackwardFn rule = bf16 ? (causal ? qkv_attention_backward_rule<true, P::bf16> : qkv_attention_backward_rule<false, P::bf16>)
                               : (causal ? qkv_attention_backward_rule<true, P::f32> : qkv_attention_backward_rule<false, P::f32>);
  if (value_add.defined()) return g.record(kQkvOp, std::move(out), {qkv, value_add}, rule, {std::move(lse), std::move(v)}, scale);
  return g.record(kQkvOp, std::move(out), {qkv}, rule, {std::move(lse), Tensor()}, scale);
}

}  // namespace tapegrad::ops
