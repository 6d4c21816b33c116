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

// x (n, m) -> (n, m), each row exp(x - max) / sum;  dx = y * (dy - sum_j dy*y)
Var softmax(Var x) {
  Graph& g = graph_of("softmax", {x});
  const Tensor& v = x.value();
  need_ndim("softmax", "input", v, 2);
  need_float("softmax", "input", v);
  if (v.dim(1) == 0) throw Error("[softmax] rows of length 0 in " + v.shape().str());
  Tensor out = like(v);
  kernels::softmax_rows(v, out);
  return g.record("softmax", std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::softmax_rows_backward(ctx.output(), ctx.grad_output(), dx);
    ctx.accumulate(0, dx);
  });
}

// logits (B, V), targets (B,) int -> () mean or sum, or (B,) none.
// dlogits = ((softmax(logits) - onehot(targets)) / divisor) * dy, divisor B for the mean, 1 otherwise.
// See Note [cross-entropy arithmetic] in cpu/rows.cpp for why f64 and f32 compute the loss differently.
Var cross_entropy(Var logits, Var targets, Reduction reduction) {
  Graph& g = graph_of("cross_entropy", {logits, targets});
  const Tensor& z = logits.value();
  const Tensor& t = targets.value();
  need_ndim("cross_entropy", "logits", z, 2);
  need_ndim("cross_entropy", "targets", t, 1);
  need_float("cross_entropy", "logits", z);
  need_index("cross_entropy", "targets", t);
  if (z.dim(0) != t.dim(0))
    throw Error("[cross_entropy] logits " + z.shape().str() + " have " + std::to_string(z.dim(0)) + " rows but targets " +
                t.shape().str() + " have " + std::to_string(t.dim(0)));
  if (z.dim(0) == 0) throw Error("[cross_entropy] empty batch: logits " + z.shape().str());
  if (z.dim(1) == 0) throw Error("[cross_entropy] no classes: logits " + z.shape().str());
  Tensor probs = like(z);  // (B, V)
  Tensor losses = Tensor::empty(Shape{z.dim(0)}, z.dtype(), z.device());
  const double divisor = reduction == Reduction::mean ? static_cast<double>(z.dim(0)) : 1.0;
  Tensor out = losses;
  if (reduction == Reduction::none) {
    kernels::cross_entropy(z, t, probs, losses);
  } else {
    out = Tensor::empty(Shape{}, z.dtype(), z.device());
    kernels::cross_entropy_reduced(z, t, probs, losses, out, reduction == Reduction::mean);
  }
  return g.record("cross_entropy", std::move(out), {logits, targets}, [](BackwardContext& ctx) {
    // dlogits over the saved probabilities when nothing reads them after this pass (no fresh
    // buffer), else into a new tensor.
    Tensor dz = ctx.take_saved(0);
    const Tensor probs = dz.defined() ? dz : ctx.saved(0);
    if (!dz.defined()) dz = like(probs);
    kernels::cross_entropy_backward(probs, ctx.input(1), ctx.grad_output(), ctx.scalar(), dz);
    ctx.accumulate(0, dz);
  }, {std::move(probs)}, divisor);
}

}  // namespace tapegrad::ops
