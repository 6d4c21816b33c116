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
// this is its Value::row_copies. Undefined if an id is out of range (the kernel then refuses it).
Tensor first_positions(const Tensor& ids, int64_t rows) {
  const int64_t b = ids.numel();
  Tensor out = Tensor::empty(Shape{b}, DType::i32);
  int32_t* first = out.data<int32_t>();
  bool in_range = true;
  auto walk = [&]<class I>(const I* id) {
    for (int64_t i = 0; i < b; ++i) in_range = in_range && id[i] >= 0 && static_cast<int64_t>(id[i]) < rows;
    if (!in_range) return;
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
  return in_range ? out : Tensor();
}

// Whether some row is a copy of an earlier one.
bool has_copies(const Tensor& row_copies) {
  const int32_t* c = row_copies.data<int32_t>();
  for (int64_t i = 0; i < row_copies.numel(); ++i)
    if (c[i] != i) return true;
  return false;
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
  // Rows with the same id are copies of one table row; say so where the ids are readable here,
  // and on the host write only the first of each kind (Note [deferred row copies] in graph.cpp).
  // Bad ids make no map, and the kernel reports the first one.
  Tensor copies = i.device().is_cpu() && i.numel() <= INT32_MAX ? first_positions(i, t.dim(0)) : Tensor();
  const bool pending = copies.defined() && t.device().is_cpu() && has_copies(copies);
  kernels::gather_rows(t, i, out, pending ? copies : Tensor());
  Var y = g.record("gather", std::move(out), {table, ids}, [](BackwardContext& ctx) {
    // dtable[ids[i]] += dy[i]: from a row source block by block when dy came as one (cross_entropy)
    if (const RowSource* rows = ctx.grad_output_source()) ctx.accumulate_rows(0, ctx.input(1), *rows);
    else ctx.accumulate_rows(0, ctx.input(1), ctx.grad_output());
  });
  Value& v = g.value(y.id());
  v.row_copies = std::move(copies);
  v.copies_pending = pending;
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
  // With row_copies the kernel reads only first rows, so the logits are taken as recorded, any
  // copies still pending (Note [deferred row copies] in graph.cpp).
  const Value& recorded = g.checked(logits);
  const Tensor& z = recorded.row_copies.defined() ? recorded.data : logits.value();
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
  const Tensor copies = recorded.row_copies;  // which rows repeat, when the producer knows
  Tensor out = losses;
  if (reduction == Reduction::none) {
    kernels::cross_entropy(z, t, probs, losses, &prob_rows, copies);
  } else {
    out = Tensor::empty(Shape{}, z.dtype(), z.device());
    kernels::cross_entropy_reduced(z, t, probs, losses, out, reduction == Reduction::mean, &prob_rows, copies);
  }
  Node* node = nullptr;
  Var y = g.record("cross_entropy", std::move(out), {logits, targets}, [](BackwardContext& ctx) {
    const Tensor& prob_rows = ctx.saved(1);
    if (prob_rows.defined()) {
      // A row map: dlogits as a row source, each row computed from its distinct row when asked
      // (Note [row sources] in graph.cpp); the handles keep what it reads alive.
      const Tensor probs = ctx.saved(0), map = prob_rows, targets = ctx.input(1), dloss = ctx.grad_output();
      const double divisor = ctx.scalar();
      ctx.accumulate(0, RowSource{Shape{map.numel(), probs.dim(1)}, probs.dtype(), probs.device(),
                                  [=](int64_t begin, Tensor& rows) {
                                    kernels::cross_entropy_backward(probs, targets, dloss, divisor, rows, map, begin);
                                  }});
      return;
    }
    // (B, V) probabilities: dlogits over them when nothing reads them after this pass (no fresh
    // buffer), else into a new tensor.
    Tensor dz = ctx.take_saved(0);
    const Tensor probs = dz.defined() ? dz : ctx.saved(0);
    if (!dz.defined()) dz = like(probs);
    kernels::cross_entropy_backward(probs, ctx.input(1), ctx.grad_output(), ctx.scalar(), dz);
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
