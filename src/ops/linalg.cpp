// Matrix and shape ops, and full reductions: forward and backward together.
#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;

// a (n, k) @ b (k, m) -> (n, m);  da = dy @ b^T (n, k), db = a^T @ dy (k, m)
Var matmul(Var a, Var b) {
  Graph& g = graph_of("matmul", {a, b});
  const Tensor& x = a.value();
  const Tensor& w = b.value();
  if (x.ndim() != 2 || w.ndim() != 2 || x.dim(1) != w.dim(0))
    throw Error("[matmul] cannot multiply " + x.shape().str() + " by " + w.shape().str() +
                (x.ndim() == 2 && w.ndim() == 2
                     ? ": inner sizes " + std::to_string(x.dim(1)) + " and " + std::to_string(w.dim(0)) + " differ"
                     : ": both must be 2-D"));
  need_float("matmul", "input", x);
  same_dtype("matmul", x, w);
  Tensor out = Tensor::empty(Shape{x.dim(0), w.dim(1)}, x.dtype(), x.device());
  kernels::matmul(x, false, w, false, out);
  return g.record("matmul", std::move(out), {a, b}, [](BackwardContext& ctx) {
    const Tensor& dy = ctx.grad_output();
    if (ctx.needs_grad(0)) {
      Tensor da = like(ctx.input(0));
      kernels::matmul(dy, false, ctx.input(1), true, da);
      ctx.accumulate(0, da);
    }
    if (ctx.needs_grad(1)) {
      Tensor db = like(ctx.input(1));
      kernels::matmul(ctx.input(0), true, dy, false, db);
      ctx.accumulate(1, db);
    }
  });
}

// x (n, m) + b (m,) -> (n, m);  dx = dy, db = sum_i dy[i] (m,)
Var add_row(Var x, Var bias) {
  Graph& g = graph_of("add_row", {x, bias});
  const Tensor& v = x.value();
  const Tensor& b = bias.value();
  if (v.ndim() != 2 || b.ndim() != 1 || v.dim(1) != b.dim(0))
    throw Error("[add_row] cannot add a bias of shape " + b.shape().str() + " to each row of " + v.shape().str() +
                ": needs x (n, m) and bias (m,)");
  need_float("add_row", "input", v);
  same_dtype("add_row", v, b);
  Tensor out = like(v);
  kernels::add_row(v, b, out);
  return g.record("add_row", std::move(out), {x, bias}, [](BackwardContext& ctx) {
    ctx.accumulate(0, ctx.grad_output());
    if (ctx.needs_grad(1)) {
      Tensor db = like(ctx.input(1));
      kernels::sum_rows(ctx.grad_output(), db);
      ctx.accumulate(1, db);
    }
  });
}

// x (n, m) -> (m, n);  dx = dy^T
Var transpose(Var x) {
  Graph& g = graph_of("transpose", {x});
  const Tensor& v = x.value();
  need_ndim("transpose", "input", v, 2);
  need_float("transpose", "input", v);
  Tensor out = Tensor::empty(Shape{v.dim(1), v.dim(0)}, v.dtype(), v.device());
  kernels::transpose(v, out);
  return g.record("transpose", std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::transpose(ctx.grad_output(), dx);
    ctx.accumulate(0, dx);
  });
}

// x (any) -> ();  dx = dy broadcast to x's shape
Var sum(Var x) {
  Graph& g = graph_of("sum", {x});
  need_float("sum", "input", x.value());
  Tensor out = Tensor::empty(Shape{}, x.dtype(), x.device());
  kernels::sum_all(x.value(), out);
  return g.record("sum", std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::fill_from_scalar(dx, ctx.grad_output(), 1.0);  // read on dy's device: no host sync
    ctx.accumulate(0, dx);
  });
}

// x (any) -> () = sum / n;  dx = dy / n
Var mean(Var x) {
  Graph& g = graph_of("mean", {x});
  need_float("mean", "input", x.value());
  if (x.value().numel() == 0) throw Error("[mean] of an empty tensor " + x.shape().str());
  Tensor out = Tensor::empty(Shape{}, x.dtype(), x.device());
  kernels::mean_all(x.value(), out);
  return g.record("mean", std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::fill_from_scalar(dx, ctx.grad_output(), static_cast<double>(ctx.input(0).numel()));
    ctx.accumulate(0, dx);
  });
}

}  // namespace tapegrad::ops
