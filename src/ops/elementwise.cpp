// Elementwise ops: forward and backward together. Shapes must match exactly (no broadcasting;
// add_row is the one broadcast the models need).
#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;
using kernels::Binary;
using kernels::Unary;

namespace {

Var binary_op(const char* op, Binary kind, Var a, Var b, BackwardFn backward) {
  Graph& g = graph_of(op, {a, b});
  const Tensor& x = a.value();
  const Tensor& y = b.value();
  if (!(x.shape() == y.shape()))
    throw Error(std::string("[") + op + "] shapes " + x.shape().str() + " and " + y.shape().str() +
                " differ (elementwise ops need equal shapes; add_row broadcasts a bias row)");
  need_float(op, "input", x);
  same_dtype(op, x, y);
  Tensor out = like(x);
  kernels::binary(kind, x, y, out);
  return g.record(op, std::move(out), {a, b}, backward);
}

// y = f(x) by the op's functor; dx = dy * f'(x) by its backward, both in kernels::unary*
template <Unary kind>
Var unary_op(Var x) {
  const char* op = kernels::unary_name(kind);
  Graph& g = graph_of(op, {x});
  need_float(op, "input", x.value());
  Tensor out = like(x.value());
  kernels::unary(kind, x.value(), out);
  return g.record(op, std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::unary_backward(kind, ctx.input(0), ctx.output(), ctx.grad_output(), dx);
    ctx.accumulate(0, dx);
  });
}

}  // namespace

// a (s) + b (s) -> (s);  da = dy, db = dy
Var add(Var a, Var b) {
  return binary_op("add", Binary::add, a, b, [](BackwardContext& ctx) {
    ctx.accumulate(0, ctx.grad_output());
    ctx.accumulate(1, ctx.grad_output());
  });
}

// a (s) - b (s) -> (s);  da = dy, db = -dy
Var sub(Var a, Var b) {
  return binary_op("sub", Binary::sub, a, b, [](BackwardContext& ctx) {
    ctx.accumulate(0, ctx.grad_output());
    if (ctx.needs_grad(1)) {
      Tensor db = like(ctx.grad_output());
      kernels::unary(Unary::neg, ctx.grad_output(), db);
      ctx.accumulate(1, db);
    }
  });
}

// a (s) * b (s) -> (s);  da = dy * b, db = dy * a
Var mul(Var a, Var b) {
  return binary_op("mul", Binary::mul, a, b, [](BackwardContext& ctx) {
    for (int k = 0; k < 2; ++k) {
      if (!ctx.needs_grad(k)) continue;
      Tensor d = like(ctx.grad_output());
      kernels::binary(Binary::mul, ctx.grad_output(), ctx.input(1 - k), d);
      ctx.accumulate(k, d);
    }
  });
}

// x (s) * s -> (s);  dx = dy * s
Var scale(Var x, double s) {
  Graph& g = graph_of("scale", {x});
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

}  // namespace tapegrad::ops
