// Neural-network ops: embedding gather, softmax, cross-entropy. Forward and backward together.
#include <cstdint>
#include <vector>

#include "ops/common.hpp"
#include "ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

// For host ids (B,) into a table of `rows` rows: (B,) i32, each position's first position with the
// same id (its own when it is the first). gather's output rows repeat exactly as the ids do, so
// this is its Value::row_copies. Ids out of range have been refused by the kernel already.
Tensor first_positions(const Tensor& ids, int64_t rows) {
  const int64_t b = ids.numel();
  Tensor out = Tensor::empty(Shape{b}, DType::i32);
  int32_t* first = out.data<int32_t>();
  auto walk = [&]<class I>(const I* id) {
    if (rows <= 4 * b + 1024) {  // a slot per table row
      std::vector<int32_t> slot(static_cast<size_t>(rows), -1);
      for (int64_t i = 0; i < b; ++i) {
        int32_t& s = slot[static_cast<size_t>(id[i])];
        if (s < 0) s = static_cast<int32_t>(i);
        first[i] = s;
      }
      return;
    }
    size_t capacity = 16;  // a large table: open addressing over the ids seen
    while (capacity < 2 * static_cast<size_t>(b)) capacity *= 2;
    std::vector<int32_t> slots(capacity, -1);
    for (int64_t i = 0; i < b; ++i) {
      size_t at = static_cast<size_t>((static_cast<uint64_t>(id[i]) * 0x9e3779b97f4a7c15ull) >> 20) & (capacity - 1);
      while (slots[at] >= 0 && id[slots[at]] != id[i]) at = (at + 1) & (capacity - 1);
      if (slots[at] < 0) slots[at] = static_cast<int32_t>(i);
      first[i] = slots[at];
    }
  };
  if (ids.dtype() == DType::i32) walk(ids.data<int32_t>());
  else walk(ids.data<int64_t>());
  return out;
}

}  // namespace

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
  // Rows with the same id are copies of one table row; say so where the ids are readable here.
  Tensor copies = i.device().is_cpu() && i.numel() <= INT32_MAX ? first_positions(i, t.dim(0)) : Tensor();
  Var y = g.record("gather", std::move(out), {table, ids}, [](BackwardContext& ctx) {
    ctx.accumulate_rows(0, ctx.input(1), ctx.grad_output());
  });
  g.value(y.id()).row_copies = std::move(copies);
  return y;
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
  Tensor probs, prob_rows;  // (B, V), or (k, V) distinct rows and their (B,) map (kernels.hpp)
  Tensor losses = Tensor::empty(Shape{z.dim(0)}, z.dtype(), z.device());
  // z points into the graph's value list, which record() below may reallocate: take what we need now.
  const double divisor = reduction == Reduction::mean ? static_cast<double>(z.dim(0)) : 1.0;
  const Tensor copies = g.value(logits.id()).row_copies;  // which rows repeat, when the producer knows
  Tensor out = losses;
  if (reduction == Reduction::none) {
    kernels::cross_entropy(z, t, probs, losses, &prob_rows, copies);
  } else {
    out = Tensor::empty(Shape{}, z.dtype(), z.device());
    kernels::cross_entropy_reduced(z, t, probs, losses, out, reduction == Reduction::mean, &prob_rows, copies);
  }
  Node* node = nullptr;
  Var y = g.record("cross_entropy", std::move(out), {logits, targets}, [](BackwardContext& ctx) {
    // dlogits over the probabilities when they are (B, V) and nothing reads them after this pass:
    // no fresh buffer. With a row map, a fresh (B, V) gradient read from the distinct rows.
    const Tensor& prob_rows = ctx.saved(1);
    Tensor dz = prob_rows.defined() ? Tensor() : ctx.take_saved(0);
    const Tensor probs = dz.defined() ? dz : ctx.saved(0);
    if (!dz.defined()) dz = like(ctx.input(0));
    kernels::cross_entropy_backward(probs, ctx.input(1), ctx.grad_output(), ctx.scalar(), dz, prob_rows);
    ctx.accumulate(0, dz);
  }, &node);
  if (node) {
    node->saved[0] = std::move(probs);
    node->saved[1] = std::move(prob_rows);
    node->scalar = divisor;
  }
  return y;
}

}  // namespace tapegrad::ops
