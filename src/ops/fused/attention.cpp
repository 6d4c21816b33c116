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

namespace {

// What qkv_attention and qkv_attention_cached read from qkv (B, T, 3C): its sizes, the scale, and
// the values when value_add changes them (qkv's third + value_add, (B, T, C); else undefined).
struct QkvParts {
  int64_t B = 0, T = 0, C = 0, d = 0;
  double scale = 0;
  Tensor v;
};

QkvParts qkv_parts(const char* op, const Tensor& x, int64_t heads, const Var& value_add, double scale) {
  need_ndim(op, "qkv", x, 3);
  need_float_or_bf16(op, "qkv", x);  // bf16: autocast's activations, on the bf16 kernels (Note [bf16 activations])
  QkvParts p;
  p.B = x.dim(0), p.T = x.dim(1);
  const int64_t C3 = x.dim(2);
  if (heads <= 0) throw Error(std::string("[") + op + "] heads must be at least 1, got " + std::to_string(heads));
  if (C3 % 3 != 0 || C3 == 0 || (C3 / 3) % heads != 0)
    throw Error(std::string("[") + op + "] qkv " + x.shape().str() + " must be (B, T, 3C) with C a multiple of " +
                std::to_string(heads) + " heads: its last axis " + std::to_string(C3) + " is not " +
                std::to_string(3 * heads) + " times a head size >= 1");
  if (p.T == 0) throw Error(std::string("[") + op + "] no keys to attend to: qkv " + x.shape().str() + " has 0 in axis 1");
  if (std::isinf(scale)) throw Error(std::string("[") + op + "] scale must be finite, got " + std::to_string(scale));
  p.C = C3 / 3, p.d = p.C / heads;
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(p.d));
  if (value_add.defined()) {
    const Tensor& a = value_add.value();
    promote(op, x, a);  // one dtype, or bf16 values and an f32 value_add (added in f32, rounded once)
    const Shape vs{p.B, p.T, p.C};
    if (broadcast_shapes(op, vs, a.shape()) != vs)
      throw Error(std::string("[") + op + "] value_add " + a.shape().str() + " does not broadcast to the values' shape " +
                  vs.str() + " of qkv " + x.shape().str());
    Tensor third = Tensor::empty(vs, x.dtype(), x.device());
    kernels::copy_strided(x, kernels::sliced_view(x.shape(), 2, 2 * p.C, 3 * p.C), third, kernels::contiguous_view(vs));
    p.v = Tensor::empty(vs, x.dtype(), x.device());
    const bool mixed = a.dtype() != x.dtype();  // bf16 with f32: of equal shapes only
    kernels::binary(kernels::Binary::add, third, mixed && a.shape() != vs ? expand(a, a.shape(), vs) : a, p.v);
  }
  return p;
}

// Inside an Autocast scope, f32 products in bf16 (on CUDA's flash kernels; Note [autocast]).
kernels::AttentionProducts products_of(const Tensor& x) {
  const bool bf16 = x.dtype() == DType::bf16 || compute_dtype(x.dtype()) == DType::bf16;
  return bf16 ? kernels::AttentionProducts::bf16 : kernels::AttentionProducts::f32;
}

}  // namespace

// qkv (B, T, 3C) [, value_add] -> (B, T, C); see attention.hpp
Var qkv_attention(Var qkv, int64_t heads, bool causal, Var value_add, double scale) {
  Graph& g = value_add.defined() ? graph_of(kQkvOp, {qkv, value_add}) : graph_of(kQkvOp, {qkv});
  const Tensor& x = qkv.value();
  QkvParts p = qkv_parts(kQkvOp, x, heads, value_add, scale);
  const int64_t B = p.B, T = p.T, C = p.C;
  kernels::AttentionLayout at = kernels::AttentionLayout::packed(B, T, heads, p.d);
  if (p.v.defined()) at.v = kernels::HeadRows{0, T * C, p.d, C};
  Tensor out = Tensor::empty(Shape{B, T, C}, x.dtype(), x.device());
  Tensor lse = Tensor::empty(Shape{B, heads, T}, stats_dtype(x.dtype()), x.device());
  // the backward rule carries the products' choice
  using P = kernels::AttentionProducts;
  const P products = products_of(x);
  kernels::attention_forward(x, x, p.v.defined() ? p.v : x, at, causal, p.scale, out, lse, products);
  const bool bf16 = products == P::bf16;
  const BackwardFn rule = bf16 ? (causal ? qkv_attention_backward_rule<true, P::bf16> : qkv_attention_backward_rule<false, P::bf16>)
                               : (causal ? qkv_attention_backward_rule<true, P::f32> : qkv_attention_backward_rule<false, P::f32>);
  if (value_add.defined())
    return g.record(kQkvOp, std::move(out), {qkv, value_add}, rule, {std::move(lse), std::move(p.v)}, p.scale);
  return g.record(kQkvOp, std::move(out), {qkv}, rule, {std::move(lse), Tensor()}, p.scale);
}

// qkv (B, Tn, 3C) [, value_add] and the cache's Tc positions -> (B, Tn, C); see attention.hpp
Var qkv_attention_cached(Var qkv, int64_t heads, KVCache& cache, Var value_add, double scale) {
  constexpr const char* op = "qkv_attention_cached";
  Graph& g = value_add.defined() ? graph_of(op, {qkv, value_add}) : graph_of(op, {qkv});
  const bool wants_grad = qkv.requires_grad() || (value_add.defined() && value_add.requires_grad());
  if (g.grad_enabled() && wants_grad)
    throw Error(std::string("[") + op + "] has no backward (a KV cache is for inference): call it under NoGrad, "
                "or train with qkv_attention");
  const Tensor& x = qkv.value();
  QkvParts p = qkv_parts(op, x, heads, value_add, scale);
  const int64_t B = p.B, Tn = p.T, C = p.C, cap = cache.capacity, Tc = cache.length;
  const std::string state = "qkv " + x.shape().str() + ", the cache holding " + std::to_string(Tc) + " of " +
                            std::to_string(cap) + " positions";
  if (Tc > 0 && Tn > 1)
    throw Error(std::string("[") + op + "] after a prefill, one position a call: " + state +
                "; reset() the cache to prefill again");
  if (Tc + Tn > cap)
    throw Error(std::string("[") + op + "] the cache is full: " + state + "; reset() it and prefill the last positions");
  const Shape kv_shape{B, cap, 2 * C};
  if (Tc == 0 && (!cache.kv.defined() || cache.kv.shape() != kv_shape || cache.kv.dtype() != x.dtype() ||
                  cache.kv.device() != x.device()))
    cache.kv = Tensor::empty(kv_shape, x.dtype(), x.device());
  if (cache.kv.shape() != kv_shape || cache.kv.dtype() != x.dtype() || cache.kv.device() != x.device())
    throw Error(std::string("[") + op + "] " + state + ": the cache's kv " + cache.kv.shape().str() + " " +
                dtype_name(cache.kv.dtype()) + " was filled by another qkv than this " + dtype_name(x.dtype()) +
                " one (" + kv_shape.str() + " expected); reset() it");
  // the new positions' keys and values (+ value_add) into rows Tc .. Tc + Tn - 1 of kv (B, cap, 2C)
  auto rows_of_kv = [&](int64_t column) {
    kernels::View v;
    v.shape = Shape{B, Tn, C};
    v.stride[0] = cap * 2 * C, v.stride[1] = 2 * C, v.stride[2] = 1;
    v.offset = Tc * 2 * C + column;
    return v;
  };
  kernels::copy_strided(x, kernels::sliced_view(x.shape(), 2, C, 2 * C), cache.kv, rows_of_kv(0));
  if (p.v.defined()) kernels::copy_strided(p.v, kernels::contiguous_view(p.v.shape()), cache.kv, rows_of_kv(C));
  else kernels::copy_strided(x, kernels::sliced_view(x.shape(), 2, 2 * C, 3 * C), cache.kv, rows_of_kv(C));
  cache.kv.mark_modified();
  // the new queries against every cached key: causal for a prefill (Tq = Tk), and a single query
  // at the last position sees them all
  const int64_t Tk = Tc + Tn;
  const kernels::HeadRows q{0, Tn * 3 * C, p.d, 3 * C}, k{0, cap * 2 * C, p.d, 2 * C}, v{C, cap * 2 * C, p.d, 2 * C},
      o{0, Tn * C, p.d, C};
  const kernels::AttentionLayout at{B, heads, Tn, Tk, p.d, p.d, q, k, v, o, {}, {}, {}};
  Tensor out = Tensor::empty(Shape{B, Tn, C}, x.dtype(), x.device());
  Tensor lse = Tensor::empty(Shape{B, heads, Tn}, stats_dtype(x.dtype()), x.device());
  kernels::attention_forward(x, cache.kv, cache.kv, at, /*causal=*/Tc == 0, p.scale, out, lse, products_of(x));
  cache.length = Tk;
  if (value_add.defined()) return g.record(op, std::move(out), {qkv, value_add}, nullptr);
  return g.record(op, std::move(out), {qkv}, nullptr);
}

}  // namespace tapegrad::ops
