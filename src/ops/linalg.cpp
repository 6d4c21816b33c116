// Matrix and shape ops, and full reductions: forward and backward together.
#include <algorithm>
#include <array>

#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

// torch.matmul's view of a 1-D operand: a (k,) on the left is the one row (1, k), b (k,) on the
// right the one column (k, 1); the result drops that 1 again.
Shape as_rows(const Shape& s) { return s.ndim() == 1 ? Shape{1, s[0]} : s; }
Shape as_columns(const Shape& s) { return s.ndim() == 1 ? Shape{s[0], 1} : s; }

// The product of a (..., n, k) and b (..., k, m), both 2-D or more: their batch axes broadcast
// from the right (NumPy's rule), then (n, m). shown_a and shown_b are the shapes the caller gave,
// for the messages.
Shape product_shape(const Shape& a, const Shape& b, const Shape& shown_a, const Shape& shown_b) {
  const int na = a.ndim(), nb = b.ndim();
  if (a[na - 1] != b[nb - 2])
    throw Error("[matmul] cannot multiply " + shown_a.str() + " by " + shown_b.str() + ": inner sizes " +
                std::to_string(a[na - 1]) + " and " + std::to_string(b[nb - 2]) + " differ");
  const int batch = std::max(na, nb) - 2;
  std::array<int64_t, Shape::kMaxDims> dims{};
  for (int j = 0; j < batch; ++j) {  // from the innermost batch axis outwards
    const int64_t ea = j < na - 2 ? a[na - 3 - j] : 1, eb = j < nb - 2 ? b[nb - 3 - j] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      throw Error("[matmul] cannot broadcast batch shapes " + Shape(a.begin(), a.end() - 2).str() + " and " +
                  Shape(b.begin(), b.end() - 2).str() + " of " + shown_a.str() + " and " + shown_b.str() +
                  ": batch axis " + std::to_string(-1 - j) + " has sizes " + std::to_string(ea) + " and " +
                  std::to_string(eb));
    dims[static_cast<size_t>(batch - 1 - j)] = ea == 1 ? eb : ea;
  }
  dims[static_cast<size_t>(batch)] = a[na - 2];
  dims[static_cast<size_t>(batch + 1)] = b[nb - 1];
  return Shape(dims.begin(), dims.begin() + batch + 2);
}

}  // namespace

// a (..., n, k) @ b (..., k, m) -> (..., n, m), the batch axes broadcast; a 1-D a (k,) or b (k,)
// is a row or a column whose axis the result drops (torch.matmul): (k,) @ (k,) -> (), (k,) @
// (..., k, m) -> (..., m), (..., n, k) @ (k,) -> (..., n).
// da = dy @ b^T, db = a^T @ dy, each summed over the batch axes its operand was broadcast along
// (a weight (k, m) used by x (B, T, n, k) gets the sum over B and T). In an Autocast scope, f32
// operands multiply as bf16 (Note [autocast]).
Var matmul(Var a, Var b) {
  Graph& g = graph_of("matmul", {a, b});
  const Tensor& x = a.value();
  const Tensor& w = b.value();
  if (x.ndim() == 0 || w.ndim() == 0)
    throw Error("[matmul] cannot multiply " + x.shape().str() + " by " + w.shape().str() +
                ": both must have at least 1 dimension (scale multiplies by a number)");
  // bf16 copies of f32 operands under autocast, saved for the backward; the result in the compute
  // dtype (Note [bf16 activations])
  const DType compute = product_dtype("matmul", x, w);
  const Shape matrices = product_shape(as_rows(x.shape()), as_columns(w.shape()), x.shape(), w.shape());
  Shape shape(matrices.begin(), matrices.end() - 2);
  if (x.ndim() > 1) shape.push_back(matrices[matrices.ndim() - 2]);
  if (w.ndim() > 1) shape.push_back(matrices[matrices.ndim() - 1]);
  Tensor out = Tensor::empty(shape, compute, x.device());
  Tensor out_matrices = out.reshape(matrices);
  const Tensor xc = operand(x, compute), wc = operand(w, compute);
  kernels::matmul(xc.reshape(as_rows(x.shape())), false, wc.reshape(as_columns(w.shape())), false, out_matrices);
  return g.record("matmul", std::move(out), {a, b}, [](BackwardContext& ctx) {
    const Tensor& xc = ctx.saved(0).defined() ? ctx.saved(0) : ctx.input(0);
    const Tensor& wc = ctx.saved(1).defined() ? ctx.saved(1) : ctx.input(1);
    const Tensor x = xc.reshape(as_rows(xc.shape())), w = wc.reshape(as_columns(wc.shape()));
    const Shape dy_shape = product_shape(x.shape(), w.shape(), x.shape(), w.shape());
    const Tensor dy = operand(ctx.grad_output(), xc.dtype()).reshape(dy_shape);
    if (ctx.needs_grad(0)) {
      Tensor dx = Tensor::empty(x.shape(), ctx.input(0).dtype(), x.device());
      kernels::matmul(dy, false, w, true, dx);
      ctx.accumulate(0, dx.reshape(ctx.input(0).shape()));
    }
    if (ctx.needs_grad(1)) {
      Tensor dw = Tensor::empty(w.shape(), ctx.input(1).dtype(), w.device());
      kernels::matmul(x, true, dy, false, dw);
      ctx.accumulate(1, dw.reshape(ctx.input(1).shape()));
    }
  }, saved_copies(x, xc, w, wc));
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

// ---- linear (the N-d ops' linear algebra)

// x (..., in) @ W (out, in)^T + b (out,) -> (..., out), as torch.nn.functional.linear; b may be an
// undefined Var (no bias). One GEMM over x's leading axes flattened, x as (N, in).
// dx = dy @ W, dW = dy^T @ x, db = sum of dy over its N rows (dy as (N, out)). In an Autocast
// scope, f32 x and W multiply as bf16 (Note [autocast]).
Var linear(Var x, Var w, Var b) {
  const bool bias = b.defined();
  Graph& g = bias ? graph_of("linear", {x, w, b}) : graph_of("linear", {x, w});
  const Tensor& v = x.value();
  const Tensor& W = w.value();
  const DType compute = product_dtype("linear", v, W);  // and the result's (Note [bf16 activations])
  if (W.ndim() != 2) throw Error("[linear] the weight must be 2-D (out, in), got shape " + W.shape().str());
  if (v.ndim() == 0 || v.dim(v.ndim() - 1) != W.dim(1))
    throw Error("[linear] cannot apply a weight of shape " + W.shape().str() + " to x of shape " + v.shape().str() +
                (v.ndim() == 0 ? std::string(": x must have at least 1 dimension")
                               : ": x's last axis has " + std::to_string(v.dim(v.ndim() - 1)) +
                                     " features, the weight (out, in) takes " + std::to_string(W.dim(1))));
  if (bias) {
    const Tensor& bv = b.value();
    if (compute == DType::bf16) need_float_or_bf16("linear", "bias", bv);
    else same_dtype("linear", v, bv);
    if (bv.ndim() != 1 || bv.dim(0) != W.dim(0))
      throw Error("[linear] a bias of shape " + bv.shape().str() + " does not fit the weight " + W.shape().str() +
                  ": it needs (" + std::to_string(W.dim(0)) + ",)");
  }
  Shape shape(v.shape().begin(), v.shape().end() - 1);
  shape.push_back(W.dim(0));
  Tensor out = Tensor::empty(shape, compute, v.device());
  Tensor rows = out.reshape(as_matrix_of_rows(shape));
  // bf16 copies of f32 x and W under autocast, saved for the backward (Note [bf16 activations])
  const Tensor xc = operand(v, compute).reshape(as_matrix_of_rows(v.shape())), Wc = operand(W, compute);
  kernels::linear_rows(xc, Wc, bias ? b.value() : Tensor(), rows);
  return detail::record_linear(g, std::move(out), x, w, b, xc, Wc);
}

Var detail::record_linear(Graph& g, Tensor out, Var x, Var w, Var b, const Tensor& xc, const Tensor& Wc) {
  auto backward = [](BackwardContext& ctx) {
    const Tensor xc = ctx.saved(0).defined() ? ctx.saved(0)
                                             : ctx.input(0).reshape(as_matrix_of_rows(ctx.input(0).shape()));  // (N, in)
    const Tensor& Wc = ctx.saved(1).defined() ? ctx.saved(1) : ctx.input(1);                            // (out, in)
    const Tensor dy = ctx.grad_output().reshape(as_matrix_of_rows(ctx.grad_output().shape()));            // (N, out)
    const Tensor dyc = operand(dy, xc.dtype());
    if (ctx.needs_grad(0)) {
      Tensor dx = Tensor::empty(xc.shape(), ctx.input(0).dtype(), xc.device());
      kernels::matmul(dyc, false, Wc, false, dx);
      ctx.accumulate(0, dx.reshape(ctx.input(0).shape()));
    }
    accumulate_linear_param_grads(ctx, dy, dyc, xc);
  };
  const Tensor x_rows = x.value().reshape(as_matrix_of_rows(x.shape()));
  if (b.defined()) return g.record("linear", std::move(out), {x, w, b}, backward, saved_copies(x_rows, xc, w.value(), Wc));
  return g.record("linear", std::move(out), {x, w}, backward, saved_copies(x_rows, xc, w.value(), Wc));
}

}  // namespace tapegrad::ops
