// Neural-network ops: embedding gather, softmax, cross-entropy. Forward and backward together.
#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;

// table (V, d)[ids (B,)] -> (B, d);  dtable[ids[i]] += dy[i] for i in order
// (a repeated id accumulates its rows; in the overwrite-bug mode the last row wins)
Var gather(Var table, Var ids) {
  Graph& g = graph_of("gather", {table, ids});
  const Tensor& t = table.value();
  const Tensor& i = ids.value();
  need_ndim("gather", "table", t, 2);
  need_ndim("gather", "ids", i, 1);
  need_index("gather", "ids", i);
  if (ids.requires_grad()) throw Error("[gather] ids cannot require a gradient");
  Tensor out = Tensor::empty(Shape{i.dim(0), t.dim(1)}, t.dtype(), t.device());
  kernels::gather_rows(t, i, out);
  return g.record("gather", std::move(out), {table, ids}, [](BackwardContext& ctx) {
    ctx.accumulate_rows(0, ctx.input(1), ctx.grad_output());  // dtable[ids[i]] += dy[i]
  });
}

namespace {

// f applied along `axis` of x: directly on (rows, n) when axis is the last, else between two
// permutes that bring the axis last and back (contiguous copies, see shape.cpp).
template <class F>
Var along_axis(const char* op, Var x, int axis, F&& f) {
  const int n = x.value().ndim();
  const int a = normalize_axis(op, axis, n);
  if (n == 0) return reshape(f(reshape(x, Shape{1})), Shape{});
  if (a == n - 1) return f(x);
  std::vector<int> dims;
  for (int d = 0; d < n; ++d)
    if (d != a) dims.push_back(d);
  dims.push_back(a);
  std::vector<int> back(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) back[static_cast<size_t>(dims[static_cast<size_t>(d)])] = d;
  return permute(f(permute(x, dims)), back);
}

// x (..., m) as (rows, m)
Tensor rows_of(const Tensor& t) {
  const int64_t m = t.ndim() == 0 ? 1 : t.dim(t.ndim() - 1);
  return t.reshape(Shape{m == 0 ? 0 : t.numel() / m, m});
}

// dx = kernel(rows of y, rows of dy) into a new tensor for input 0; its (rows, m) view is gone
// before dx is handed on, so that a parameter keeps dx itself rather than a copy.
void rows_backward(BackwardContext& ctx, void (*kernel)(const Tensor&, const Tensor&, Tensor&)) {
  Tensor dx = like(ctx.input(0));
  {
    Tensor d = rows_of(dx);
    kernel(rows_of(ctx.output()), rows_of(ctx.grad_output()), d);
  }
  ctx.accumulate(0, dx);
}

}  // namespace

// x (s) -> (s), along axis exp(x - max) / sum;  dx = y * (dy - sum_axis(dy * y))
// A bf16 x (an autocast activation) is widened to f32 first, by a recorded cast, as torch.autocast
// runs its softmax family in f32 (Note [bf16 activations]): so in log_softmax, logsumexp and
// cross_entropy.
Var softmax(Var x, int axis) {
  x = widened(x);
  need_float("softmax", "input", x.value());
  return along_axis("softmax", x, axis, [](Var v) {
    Graph& g = v.graph();
    const Tensor& t = v.value();
    if (t.ndim() > 0 && t.dim(t.ndim() - 1) == 0) throw Error("[softmax] rows of length 0 in " + t.shape().str());
    Tensor out = like(t);
    Tensor y = rows_of(out);
    kernels::softmax_rows(rows_of(t), y);
    return g.record("softmax", std::move(out), {v}, [](BackwardContext& ctx) {
      rows_backward(ctx, kernels::softmax_rows_backward);
    });
  });
}

// x (s) -> (s), along axis (x - max) - log(sum(exp(x - max))) (Note [log-sum-exp rows]);
// dx = dy - softmax(x) * sum_axis(dy)
Var log_softmax(Var x, int axis) {
  x = widened(x);
  need_float("log_softmax", "input", x.value());
  return along_axis("log_softmax", x, axis, [](Var v) {
    Graph& g = v.graph();
    const Tensor& t = v.value();
    if (t.ndim() > 0 && t.dim(t.ndim() - 1) == 0) throw Error("[log_softmax] rows of length 0 in " + t.shape().str());
    Tensor out = like(t);
    Tensor y = rows_of(out);
    kernels::log_softmax_rows(rows_of(t), y);
    return g.record("log_softmax", std::move(out), {v}, [](BackwardContext& ctx) {
      rows_backward(ctx, kernels::log_softmax_rows_backward);
    });
  });
}

// x (s) -> s without axis (kept at 1 with keepdim) = log(sum(exp(x))) along it, as m + log(sum(exp(x - m)))
// with m the axis's largest element held constant (0 where infinite);  dx = dy * softmax(x)
Var logsumexp(Var x, int axis, bool keepdim) {
  Graph& g = graph_of("logsumexp", {x});
  x = widened(x);
  need_float("logsumexp", "input", x.value());
  const Tensor& v = x.value();
  const int a = normalize_axis("logsumexp", axis, v.ndim());
  if (v.ndim() > 0 && v.dim(a) == 0) throw Error("[logsumexp] reduces over an empty axis of " + v.shape().str());
  Var m;
  {
    NoGrad off(g);
    Var top = max(x, a, true);
    // m = where(|top| < inf, top, 0): a row of -inf keeps its -inf sum, and NaN stays NaN
    Var finite = lt(abs(top), constant(g, INFINITY, v));
    m = g.input(where(finite, top, constant(g, 0.0, v)).value());
  }
  Var lse = add(log(sum(exp(sub(x, m)), {a}, true)), m);
  return keepdim ? lse : squeeze(lse, a);
}

// logits (..., V), targets (...) int -> () mean over the targets not ignored, sum, or (...) none;
// loss_i = -log_softmax(logits_i)[t_i] (Note [log-sum-exp rows]: stable for any gap), 0 where
// t_i == ignore_index. dlogits_i = (softmax(logits_i) - onehot(t_i)) * dy_i, dy_i = dy / count for the
// mean, and 0 rows where ignored. One node; the log-probabilities (N, V) are kept for the backward.
Var cross_entropy(Var logits, Var targets, Reduction reduction, int64_t ignore_index) {
  Graph& g = graph_of("cross_entropy", {logits, targets});
  logits = widened(logits);
  const Tensor& z = logits.value();
  const Tensor& t = targets.value();
  need_float("cross_entropy", "logits", z);
  need_index("cross_entropy", "targets", t);
  if (z.ndim() < 1 || t.ndim() != z.ndim() - 1)
    throw Error("[cross_entropy] logits " + z.shape().str() + " and targets " + t.shape().str() +
                " do not match: targets need the logits' shape without its last axis (classes)");
  for (int d = 0; d < t.ndim(); ++d)
    if (t.dim(d) != z.dim(d))
      throw Error("[cross_entropy] logits " + z.shape().str() + " and targets " + t.shape().str() +
                  " do not match: targets need the logits' shape without its last axis (classes)");
  const int64_t v = z.dim(z.ndim() - 1), n = t.numel();
  if (n == 0) throw Error("[cross_entropy] empty batch: logits " + z.shape().str());
  if (v == 0) throw Error("[cross_entropy] no classes: logits " + z.shape().str());
  const Tensor z2 = z.reshape(Shape{n, v}), t1 = t.reshape(Shape{n});
  Tensor lp = like(z2);
  kernels::log_softmax_rows(z2, lp);
  Tensor losses = Tensor::empty(t.shape(), z.dtype(), z.device());
  Tensor count = Tensor::empty(Shape{}, z.dtype(), z.device());
  Tensor l1 = losses.reshape(Shape{n});
  kernels::nll_rows(lp, t1, ignore_index, l1, count);
  Tensor out = losses;
  if (reduction != Reduction::none) {
    out = Tensor::empty(Shape{}, z.dtype(), z.device());
    kernels::sum_all(losses, out);
    if (reduction == Reduction::mean) kernels::binary(kernels::Binary::div, out, count, out);
  }
  // saved: the log-probabilities, and the mean's divisor (undefined for sum and none)
  return g.record("cross_entropy", std::move(out), {logits, targets}, [](BackwardContext& ctx) {
    // dlogits over the saved log-probabilities when nothing reads them after this pass (no fresh
    // buffer; the kernel reads each element before it writes it), else into a new tensor
    Tensor d2 = ctx.take_saved(0);
    const Tensor lp = d2.defined() ? d2 : ctx.saved(0);
    if (!d2.defined()) d2 = like(lp);
    Tensor dz = d2.reshape(ctx.input(0).shape());
    kernels::nll_log_softmax_backward(lp, ctx.input(1).reshape(Shape{lp.dim(0)}), static_cast<int64_t>(ctx.scalar()),
                                      ctx.grad_output(), ctx.saved(1), d2);
    ctx.accumulate(0, dz);
  }, {std::move(lp), reduction == Reduction::mean ? count : Tensor()}, static_cast<double>(ignore_index));
}

}  // namespace tapegrad::ops
