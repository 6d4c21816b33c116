// Reductions along axes: forward and backward together. The full reductions sum(x) and mean(x)
// (correctly rounded in f64, kernels.hpp) are in linalg.cpp.
#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;
using kernels::Reduce;

namespace {

// The kept shape (reduced axes at extent 1) and the output's shape (without them unless keepdim).
struct Reduced {
  Shape kept, out;
  int64_t count = 1;  // elements per output
};
Reduced reduced_shapes(const Shape& shape, const std::vector<bool>& mask, bool keepdim) {
  Reduced r;
  for (int d = 0; d < shape.ndim(); ++d) {
    const bool m = mask[static_cast<size_t>(d)];
    r.kept.push_back(m ? 1 : shape[d]);
    if (m) r.count *= shape[d];
    if (!m || keepdim) r.out.push_back(m ? 1 : shape[d]);
  }
  return r;
}

// The kept shape of a node's output for its backward: saved(0) holds it as host integers.
Shape kept_of(const BackwardContext& ctx) {
  const std::vector<int64_t> k = ints_of(ctx.saved(0));
  return Shape(k.begin(), k.end());
}

Var reduce_op(const char* op, Reduce kind, Var x, const std::vector<int>& axes, bool keepdim, BackwardFn rule) {
  Graph& g = graph_of(op, {x});
  const Tensor& v = x.value();
  need_float(op, "input", v);
  const Reduced r = reduced_shapes(v.shape(), axes_mask(op, axes, v.ndim()), keepdim);
  if (r.count == 0 && (kind == Reduce::mean || kind == Reduce::max))
    throw Error(std::string("[") + op + "] reduces over an empty axis of " + v.shape().str());
  Tensor out = empty_on(r.out, v);
  kernels::reduce(kind, v, r.kept, out);
  return g.record(op, std::move(out), {x}, rule, {host_ints(std::vector<int64_t>(r.kept.begin(), r.kept.end()))},
                  static_cast<double>(r.count));
}

}  // namespace

// x (s) -> s without `axes` (kept at 1 with keepdim; no axes: all of them);  dx = dy broadcast to s
Var sum(Var x, const std::vector<int>& axes, bool keepdim) {
  return reduce_op("sum_axes", Reduce::sum, x, axes, keepdim, [](BackwardContext& ctx) {
    ctx.accumulate(0, expand(ctx.grad_output(), kept_of(ctx), ctx.input(0).shape()));
  });
}

// x (s) -> s without `axes`, sum / count;  dx = dy broadcast to s, / count
Var mean(Var x, const std::vector<int>& axes, bool keepdim) {
  return reduce_op("mean_axes", Reduce::mean, x, axes, keepdim, [](BackwardContext& ctx) {
    Tensor dx = expand(ctx.grad_output(), kept_of(ctx), ctx.input(0).shape());
    kernels::scale(dx, 1.0 / ctx.scalar(), dx);
    ctx.accumulate(0, dx);
  });
}

// x (s) -> s without axis: the largest element (NaN if any is);  dx = dy at the first largest, 0 elsewhere
Var max(Var x, int axis, bool keepdim) {
  Graph& g = graph_of("max", {x});
  const Tensor& v = x.value();
  need_float("max", "input", v);
  const int a = normalize_axis("max", axis, v.ndim());
  if (v.ndim() == 0) return x;
  std::vector<bool> mask(static_cast<size_t>(v.ndim()), false);
  mask[static_cast<size_t>(a)] = true;
  const Reduced r = reduced_shapes(v.shape(), mask, keepdim);
  if (r.count == 0) throw Error("[max] reduces over an empty axis of " + v.shape().str());
  Tensor idx = Tensor::empty(r.kept, DType::i64, v.device());
  kernels::argmax(v, a, idx);
  Tensor out = empty_on(r.kept, v);
  kernels::gather_axis(v, a, idx, out);
  return g.record("max", out.reshape(r.out), {x}, [](BackwardContext& ctx) {
    const Tensor& idx = ctx.saved(0);
    Tensor dx = Tensor::zeros(ctx.input(0).shape(), ctx.grad_output().dtype(), ctx.grad_output().device());
    kernels::scatter_add_axis(dx, static_cast<int>(ctx.scalar()), idx, ctx.grad_output().reshape(idx.shape()));
    ctx.accumulate(0, dx);
  }, {idx}, static_cast<double>(a));
}

Var max(Var x) { return max(reshape(x, Shape{x.value().numel()}), 0); }

// x (s) -> s without axis, i64: the first index of the largest element (no gradient)
Var argmax(Var x, int axis, bool keepdim) {
  Graph& g = graph_of("argmax", {x});
  const Tensor& v = x.value();
  need_float("argmax", "input", v);
  const int a = normalize_axis("argmax", axis, v.ndim());
  std::vector<bool> mask(static_cast<size_t>(v.ndim()), false);
  if (v.ndim() > 0) mask[static_cast<size_t>(a)] = true;
  const Reduced r = reduced_shapes(v.shape(), mask, keepdim);
  if (r.count == 0) throw Error("[argmax] reduces over an empty axis of " + v.shape().str());
  Tensor idx = Tensor::empty(r.out, DType::i64, v.device());
  if (v.ndim() == 0) kernels::fill(idx, 0);
  else kernels::argmax(v, a, idx);
  return g.record("argmax", std::move(idx), {x}, nullptr);
}

// var = sum((x - mean(x))^2) / (count - correction) over axes, composed of the ops above (so its
// gradient, 2 (x - mean) / (count - correction) * dy, comes from theirs)
Var var(Var x, const std::vector<int>& axes, bool keepdim, double correction) {
  need_float("var", "input", x.value());
  const std::vector<bool> mask = axes_mask("var", axes, x.value().ndim());
  int64_t count = 1;
  for (int d = 0; d < x.value().ndim(); ++d)
    if (mask[static_cast<size_t>(d)]) count *= x.value().dim(d);
  Var d = sub(x, mean(x, axes, true));
  return scale(sum(square(d), axes, keepdim), 1.0 / (static_cast<double>(count) - correction));
}

}  // namespace tapegrad::ops
