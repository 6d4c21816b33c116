// Elementwise ops: forward and backward together. Binary ops broadcast (NumPy rules); their
// backward sums each operand's gradient over the axes it was broadcast along.
#include <cmath>
#include <cstdio>

#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;
using kernels::Binary;
using kernels::Compare;
using kernels::Unary;

namespace {

// dk = sum over broadcast axes of F::dk(a, b, y, dy), the functor's partials (binary_ops.hpp).
// add, sub and mul of equal shapes skip the partials' kernel: dy itself, -dy, dy * other. With
// bf16 (Note [bf16 activations] in autocast.hpp; equal shapes) the partials' kernel runs on f32
// copies, and each gradient is cast to its operand's dtype.
template <Binary kind>
void binary_rule(BackwardContext& ctx) {
  const Tensor& dy = ctx.grad_output();
  for (int k = 0; k < 2; ++k) {
    if (!ctx.needs_grad(k)) continue;
    const Tensor& in = ctx.input(k);
    Tensor full;
    if (kind == Binary::add || (kind == Binary::sub && k == 0)) {
      full = dy;
    } else if (kind == Binary::sub) {
      full = like(dy);
      kernels::unary(Unary::neg, dy, full);
    } else if (kind == Binary::mul && ctx.input(1 - k).shape() == dy.shape()) {
      full = like(dy);
      kernels::binary(Binary::mul, dy, ctx.input(1 - k), full);
    } else {
      const DType wide = dy.dtype() == DType::bf16 ? DType::f32 : dy.dtype();
      full = Tensor::empty(dy.shape(), wide, dy.device());
      kernels::binary_backward(kind, k, operand(ctx.input(0), wide), operand(ctx.input(1), wide),
                               operand(ctx.output(), wide), operand(dy, wide), full);
    }
    ctx.accumulate(k, operand(sum_to(full, in.shape()), in.dtype()));
  }
}

// Integer operands (i32, i64: ids and their offsets) of add, sub and mul: the result is i64 if
// either is, else i32, wrapping on overflow as PyTorch's does; no gradient (ids take none).
Var integer_op(Graph& g, const char* op, Binary kind, Var a, Var b) {
  const Tensor& x = a.value();
  const Tensor& y = b.value();
  if (!is_integer(x.dtype()) || !is_integer(y.dtype()))
    throw Error(std::string("[") + op + "] a " + dtype_name(x.dtype()) + " tensor and a " + dtype_name(y.dtype()) +
                " one: integer tensors mix with integer tensors only; cast one with ops::to");
  if (kind != Binary::add && kind != Binary::sub && kind != Binary::mul)
    throw Error(std::string("[") + op + "] integer tensors take add, sub, mul and the comparisons, got " +
                dtype_name(x.dtype()) + " and " + dtype_name(y.dtype()) + "; cast with ops::to(x, DType::f32) first");
  const DType result = x.dtype() == DType::i64 || y.dtype() == DType::i64 ? DType::i64 : DType::i32;
  if (x.dtype() != result) return integer_op(g, op, kind, to(a, result), b);
  if (y.dtype() != result) return integer_op(g, op, kind, a, to(b, result));
  Tensor out = Tensor::empty(broadcast_shapes(op, x.shape(), y.shape()), result, x.device());
  kernels::binary(kind, x, y, out);
  return g.record(op, std::move(out), {a, b}, nullptr);
}

// Operands of one float dtype, or f32 and bf16 (Note [bf16 activations]): f32 with bf16 gives f32,
// bf16 with bf16 bf16; bf16 of unequal shapes broadcast in f32, through recorded casts. Integer
// operands: integer_op.
template <Binary kind>
Var binary_op(Var a, Var b) {
  const char* op = kernels::binary_name(kind);
  Graph& g = graph_of(op, {a, b});
  const Tensor& x = a.value();
  const Tensor& y = b.value();
  if (is_integer(x.dtype()) || is_integer(y.dtype())) return integer_op(g, op, kind, a, b);
  need_float_or_bf16(op, "input", x);
  need_float_or_bf16(op, "input", y);
  const DType result = promote(op, x, y);
  const Shape shape = broadcast_shapes(op, x.shape(), y.shape());
  if ((x.dtype() == DType::bf16 || y.dtype() == DType::bf16) && !(x.shape() == y.shape())) {
    Var wide = binary_op<kind>(widened(a), widened(b));
    return result == DType::bf16 ? to(wide, DType::bf16) : wide;
  }
  Tensor out = Tensor::empty(shape, result, x.device());
  kernels::binary(kind, x, y, out);
  return g.record(op, std::move(out), {a, b}, &binary_rule<kind>);
}

// y = f(x) by the op's functor; dx = dy * f'(x) by its backward, both in kernels::unary*
template <Unary kind>
Var unary_op(Var x) {
  const char* op = kernels::unary_name(kind);
  Graph& g = graph_of(op, {x});
  need_float_or_bf16(op, "input", x.value());  // bf16: computed in f32, rounded once (Note [bf16 elementwise])
  Tensor out = like(x.value());
  kernels::unary(kind, x.value(), out);
  return g.record(op, std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::unary_backward(kind, ctx.input(0), ctx.output(), ctx.grad_output(), dx);
    ctx.accumulate(0, dx);
  });
}

// Floats of one dtype, or integers (i32 with i64 compares in i64).
Var compare_op(const char* op, Compare kind, Var a, Var b) {
  Graph& g = graph_of(op, {a, b});
  if (is_integer(a.dtype()) && is_integer(b.dtype()) && a.dtype() != b.dtype())
    return a.dtype() == DType::i32 ? compare_op(op, kind, to(a, DType::i64), b) : compare_op(op, kind, a, to(b, DType::i64));
  if (!is_integer(a.dtype())) need_float(op, "input", a.value());
  same_dtype(op, a.value(), b.value());
  Tensor out = Tensor::empty(broadcast_shapes(op, a.shape(), b.shape()), DType::u8, a.device());
  kernels::compare(kind, a.value(), b.value(), out);
  return g.record(op, std::move(out), {a, b}, nullptr);  // a mask: no gradient
}

}  // namespace

// The binary ops: a (s) op b (t) -> broadcast(s, t); da, db as the functor's partials, each summed
// over the axes its operand was broadcast along.
#define TG_BINARY_DEFINE(name, F) \
  Var name(Var a, Var b) { return binary_op<Binary::name>(a, b); }
TG_BINARY_OPS(TG_BINARY_DEFINE)
#undef TG_BINARY_DEFINE

Var detail::record_add(Graph& g, Tensor sum, Var a, Var b) {
  TG_CHECK(a.shape() == b.shape() && sum.shape() == a.shape(), "[add] a fused sum has its operands' shape");
  return g.record("add", std::move(sum), {a, b}, &binary_rule<Binary::add>);
}

Var pow(Var x, double exponent) { return pow(x, constant(x.graph(), exponent, x.value())); }

// x (s) * s -> (s);  dx = dy * s. A bf16 x is scaled in f32 and rounded back (Note [bf16 activations]).
Var scale(Var x, double s) {
  Graph& g = graph_of("scale", {x});
  if (x.dtype() == DType::bf16) return to(scale(to(x, DType::f32), s), DType::bf16);
  need_float("scale", "input", x.value());
  Tensor out = like(x.value());
  kernels::scale(x.value(), s, out);
  return g.record("scale", std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.grad_output());
    kernels::scale(ctx.grad_output(), ctx.scalar(), dx);
    ctx.accumulate(0, dx);
  }, {}, s);
}

// The unary ops, one per line of TG_UNARY_OPS (src/kernels/unary_ops.hpp).
#define TG_UNARY_DEFINE(name, F) \
  Var name(Var x) { return unary_op<Unary::name>(x); }
TG_UNARY_OPS(TG_UNARY_DEFINE)
#undef TG_UNARY_DEFINE

Var gelu(Var x, Gelu approximate) { return approximate == Gelu::tanh ? gelu_tanh(x) : gelu_erf(x); }

// x (s) -> (s) = min(max(x, lo), hi);  dx = dy * [lo <= x <= hi]
Var clamp(Var x, double lo, double hi) {
  Graph& g = graph_of("clamp", {x});
  need_float("clamp", "input", x.value());
  if (lo != lo || hi != hi) throw Error("[clamp] bounds must not be NaN");
  Tensor out = like(x.value());
  kernels::clamp(x.value(), lo, hi, out);
  return g.record("clamp", std::move(out), {x}, [](BackwardContext& ctx) {
    const std::vector<double> b = ctx.saved(0).to_doubles();
    Tensor dx = like(ctx.input(0));
    kernels::clamp_backward(ctx.input(0), b[0], b[1], ctx.grad_output(), dx);
    ctx.accumulate(0, dx);
  }, {Tensor::from_vector(std::vector<double>{lo, hi}, Shape{2})});
}

// cond (r) u8, a (s), b (t) -> broadcast(r, s, t) = cond ? a : b;
// da = sum over a's broadcast axes of (cond ? dy : 0), db likewise of (cond ? 0 : dy)
Var where(Var cond, Var a, Var b) {
  Graph& g = graph_of("where", {cond, a, b});
  const Tensor& c = cond.value();
  if (c.dtype() != DType::u8)
    throw Error(std::string("[where] the condition must be a u8 mask (from eq, lt, ... or causal_mask), got ") +
                dtype_name(c.dtype()));
  need_float("where", "input", a.value());
  same_dtype("where", a.value(), b.value());
  if (cond.requires_grad()) throw Error("[where] the condition cannot require a gradient");
  const Shape shape = broadcast_shapes("where", broadcast_shapes("where", c.shape(), a.shape()), b.shape());
  Tensor out = empty_on(shape, a.value());
  kernels::where(c, a.value(), b.value(), out);
  return g.record("where", std::move(out), {cond, a, b}, [](BackwardContext& ctx) {
    const Tensor& dy = ctx.grad_output();
    const Tensor zero = Tensor::zeros(Shape{}, dy.dtype(), dy.device());
    for (int k = 1; k <= 2; ++k) {
      if (!ctx.needs_grad(k)) continue;
      Tensor full = like(dy);
      kernels::where(ctx.input(0), k == 1 ? dy : zero, k == 1 ? zero : dy, full);
      ctx.accumulate(k, sum_to(full, ctx.input(k).shape()));
    }
  });
}

Var masked_fill(Var x, Var mask, double value) { return where(mask, constant(x.graph(), value, x.value()), x); }

#define TG_COMPARE_DEFINE(name) \
  Var name(Var a, Var b) { return compare_op(#name, Compare::name, a, b); }
TG_COMPARE_DEFINE(eq)
TG_COMPARE_DEFINE(ne)
TG_COMPARE_DEFINE(lt)
TG_COMPARE_DEFINE(le)
TG_COMPARE_DEFINE(gt)
TG_COMPARE_DEFINE(ge)
#undef TG_COMPARE_DEFINE

// x (s) -> (s) of dtype;  dx = dy converted back to x's dtype (floating dtypes only, bf16 among
// them: a cast to or from an integer dtype takes no gradient)
Var to(Var x, DType dtype) {
  Graph& g = graph_of("to", {x});
  const Tensor& v = x.value();
  if (v.dtype() == dtype) return x;
  Tensor out = Tensor::empty(v.shape(), dtype, v.device());
  kernels::cast(v, out);
  auto floating = [](DType t) { return t == DType::f64 || t == DType::f32 || t == DType::bf16; };
  const bool floats = floating(dtype) && floating(v.dtype());
  return g.record("to", std::move(out), {x}, floats ? [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::cast(ctx.grad_output(), dx);
    ctx.accumulate(0, dx);
  } : BackwardFn(nullptr));
}

}  // namespace tapegrad::ops

namespace tapegrad {

namespace {

// s as a 0-d constant of a's dtype; for an integer a, s must be a whole number it can hold.
Var scalar_like(const char* op, Var a, double s) {
  const DType t = a.dtype();
  const double limit = t == DType::i32 ? 2147483648.0 : 9223372036854775808.0;
  if (is_integer(t) && !(s == std::trunc(s) && s >= -limit && s < limit)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", s);
    throw Error(std::string("[") + op + "] a " + dtype_name(t) + " tensor and the scalar " + text + ": integer " +
                "tensors take whole numbers they can hold; cast with ops::to(x, DType::f32) for a float result");
  }
  return ops::detail::constant(a.graph(), s, a.value());
}

}  // namespace

Var operator+(Var a, double s) { return ops::add(a, scalar_like("add", a, s)); }
Var operator+(double s, Var a) { return ops::add(scalar_like("add", a, s), a); }
Var operator-(Var a, double s) { return ops::sub(a, scalar_like("sub", a, s)); }
Var operator-(double s, Var a) { return ops::sub(scalar_like("sub", a, s), a); }
Var operator*(Var a, double s) { return is_integer(a.dtype()) ? ops::mul(a, scalar_like("mul", a, s)) : ops::scale(a, s); }
Var operator*(double s, Var a) { return a * s; }
Var operator/(Var a, double s) { return ops::div(a, scalar_like("div", a, s)); }
Var operator/(double s, Var a) { return ops::div(scalar_like("div", a, s), a); }

}  // namespace tapegrad
