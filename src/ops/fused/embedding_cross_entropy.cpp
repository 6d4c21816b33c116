// The fused embedding cross-entropy (embedding_cross_entropy.hpp): forward and backward together.
//
// Note [embedding cross-entropy]
// A batch of B ids drawn from a table of V rows repeats ids (bob: 256 bytes of text, about 26
// distinct), and every logits row of a repeated id has the same bits. So on the CPU the op:
// - forward: maps each position to its distinct id (row_of, (B,) i32, in order of first
//   appearance) and computes the softmax and logsumexp of each distinct table row once, reading the
//   table itself (cross_entropy_of_rows): probs is (k, C) for k distinct ids, and nothing of size
//   (B, C) is written. Each position's loss is its row's logsumexp minus its target's logit (f32),
//   or -log p[target] (f64): the bits cross_entropy gives.
// - backward: makes dlogits a block of rows at a time (about 16 KiB, so the block and the rows it
//   adds into stay in L1) from the k rows of probs, and adds each block's rows into a (k, C) tensor
//   at row_of, in position order: row j of it is 0 + d_first + d_second + ..., the additions a dense
//   scatter of the (B, C) dlogits into the (V, C) gradient makes. It hands the table a RowSparse
//   gradient: those k rows at their ids. Var::grad() makes it dense with the same bits; AdamW reads it
//   as it is and updates the other rows as a +0 gradient would.
// While the engine observes contributions (overwrite-bug mode, a record: Note [fused ops and the
// door] in graph.cpp), the backward hands the (B, C) dlogits to accumulate_rows instead, so repeated
// ids meet in the engine as they would after a gather. On CUDA the op runs gather_rows,
// cross_entropy_reduced and their backward (the unfused ops' kernels) inside one node.
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tapegrad/ops/common.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

constexpr const char* kOp = "embedding_cross_entropy";

// Host ids (B,) into a table of v rows: row_of (B,) i32, each position's index among the distinct
// ids in order of first appearance, and rows (k,) i32, those ids. An out-of-range id is an error
// naming it, as the gather's.
template <class I>
void distinct_ids(const I* id, int64_t b, int64_t v, const Shape& table_shape, Tensor& row_of, Tensor& rows) {
  for (int64_t i = 0; i < b; ++i)
    if (id[i] < 0 || static_cast<int64_t>(id[i]) >= v)
      throw Error(std::string("[") + kOp + "] index " + std::to_string(static_cast<int64_t>(id[i])) + " at position " +
                  std::to_string(i) + " is out of range for a table of " + std::to_string(v) + " rows (shape " +
                  table_shape.str() + ")");
  row_of = Tensor::empty(Shape{b}, DType::i32);
  int32_t* of = row_of.mutable_data<int32_t>();
  std::vector<int32_t> distinct;
  auto index_of = [&](int32_t& slot, I value) {
    if (slot < 0) {
      slot = static_cast<int32_t>(distinct.size());
      distinct.push_back(static_cast<int32_t>(value));
    }
    return slot;
  };
  if (v <= 4 * b + 1024) {  // a slot per table row
    std::vector<int32_t> slot(static_cast<size_t>(v), -1);
    for (int64_t i = 0; i < b; ++i) of[i] = index_of(slot[static_cast<size_t>(id[i])], id[i]);
  } else {  // a large table: open addressing over the ids seen
    size_t capacity = 16;
    while (capacity < 2 * static_cast<size_t>(b)) capacity *= 2;
    std::vector<int64_t> keys(capacity, -1);
    std::vector<int32_t> slots(capacity, -1);
    for (int64_t i = 0; i < b; ++i) {
      size_t at = static_cast<size_t>((static_cast<uint64_t>(id[i]) * 0x9e3779b97f4a7c15ull) >> 20) & (capacity - 1);
      while (keys[at] >= 0 && keys[at] != static_cast<int64_t>(id[i])) at = (at + 1) & (capacity - 1);
      keys[at] = static_cast<int64_t>(id[i]);
      of[i] = index_of(slots[at], id[i]);
    }
  }
  rows = Tensor::from_vector(distinct, Shape{static_cast<int64_t>(distinct.size())});
}

// The distinct ids again, from the ids and row_of (the backward's RowSparse ids).
Tensor distinct_from(const Tensor& ids, const Tensor& row_of, int64_t k) {
  Tensor rows = Tensor::empty(Shape{k}, DType::i32);
  int32_t* r = rows.mutable_data<int32_t>();
  const int32_t* of = row_of.data<int32_t>();
  auto fill = [&](const auto* id) {
    for (int64_t i = 0; i < ids.numel(); ++i) r[of[i]] = static_cast<int32_t>(id[i]);
  };
  if (ids.dtype() == DType::i32) fill(ids.data<int32_t>());
  else fill(ids.data<int64_t>());
  return rows;
}

void backward(BackwardContext& ctx) {
  const Tensor& probs = ctx.saved(0);  // (k, C) with a row map, else (B, C)
  const Tensor& row_of = ctx.saved(1);
  const Tensor& ids = ctx.input(1);
  const Tensor& targets = ctx.input(2);
  const Tensor& dloss = ctx.grad_output();
  const double divisor = ctx.scalar();
  const int64_t b = ids.dim(0), c = probs.dim(1);
  if (row_of.defined() && !ctx.contributions_observed()) {
    // Note [embedding cross-entropy]: dlogits a block at a time, summed into the k distinct rows
    const int64_t k = probs.dim(0);
    const int64_t block = std::max<int64_t>(1, (16 << 10) / (c * static_cast<int64_t>(dtype_size(probs.dtype()))));
    Tensor sums = Tensor::empty(Shape{k, c}, probs.dtype());
    Tensor buffer = Tensor::empty(Shape{std::min(block, b), c}, probs.dtype());
    Tensor map = Tensor::empty(Shape{std::min(block, b)}, DType::i32);
    for (int64_t begin = 0; begin < b; begin += block) {
      const int64_t r = std::min(block, b - begin);
      if (r < buffer.dim(0)) {  // the last, shorter block
        buffer = Tensor::empty(Shape{r, c}, probs.dtype());
        map = Tensor::empty(Shape{r}, DType::i32);
      }
      kernels::cross_entropy_backward_of_rows(probs, row_of, targets, dloss, divisor, buffer, begin);
      std::memcpy(map.raw_data(), row_of.data<int32_t>() + begin, static_cast<size_t>(r) * sizeof(int32_t));
      if (begin == 0) kernels::scatter_rows_fresh(sums, map, buffer, false);  // rows no block reached yet: +0
      else kernels::scatter_rows(sums, map, buffer, false);
    }
    ctx.accumulate(0, RowSparse{distinct_from(ids, row_of, k), std::move(sums)});
    return;
  }
  Tensor dlogits;
  if (row_of.defined()) {
    dlogits = Tensor::empty(Shape{b, c}, probs.dtype(), probs.device());
    kernels::cross_entropy_backward_of_rows(probs, row_of, targets, dloss, divisor, dlogits, 0);
  } else {
    // over the probabilities when nothing reads them after this pass (taking them empties saved(0))
    dlogits = ctx.take_saved(0);
    const Tensor p = dlogits.defined() ? dlogits : ctx.saved(0);
    if (!dlogits.defined()) dlogits = like(p);
    kernels::cross_entropy_backward(p, targets, dloss, divisor, dlogits);
  }
  ctx.accumulate_rows(0, ids, dlogits);  // the rows of repeated ids meet in the engine
}

}  // namespace

// table (V, C), ids (B,), targets (B,) -> () or (B,); see embedding_cross_entropy.hpp
Var embedding_cross_entropy(Var table, Var ids, Var targets, Reduction reduction) {
  Graph& g = graph_of(kOp, {table, ids, targets});
  const Tensor& w = table.value();
  const Tensor& i = ids.value();
  const Tensor& t = targets.value();
  need_ndim(kOp, "table", w, 2);
  need_ndim(kOp, "ids", i, 1);
  need_ndim(kOp, "targets", t, 1);
  need_float(kOp, "table", w);
  need_index(kOp, "ids", i);
  need_index(kOp, "targets", t);
  if (ids.requires_grad()) throw Error(std::string("[") + kOp + "] ids cannot require a gradient");
  if (i.dim(0) != t.dim(0))
    throw Error(std::string("[") + kOp + "] ids " + i.shape().str() + " and targets " + t.shape().str() +
                " differ in length");
  if (i.dim(0) == 0) throw Error(std::string("[") + kOp + "] empty batch: ids " + i.shape().str());
  if (w.dim(1) == 0) throw Error(std::string("[") + kOp + "] no classes: table " + w.shape().str());
  if (i.dim(0) > INT32_MAX || w.dim(0) > INT32_MAX)
    throw Error(std::string("[") + kOp + "] ids " + i.shape().str() + " into a table " + w.shape().str() +
                ": batch and table must each have fewer than 2^31 rows");
  const Device device = kernels::common_device(kOp, {&w, &i, &t});
  const int64_t b = i.dim(0), c = w.dim(1);
  const double divisor = reduction == Reduction::mean ? static_cast<double>(b) : 1.0;
  Tensor losses = Tensor::empty(Shape{b}, w.dtype(), device);
  Tensor out = reduction == Reduction::none ? losses : Tensor::empty(Shape{}, w.dtype(), device);
  Tensor probs, row_of;
  if (device.is_cpu()) {
    Tensor rows;
    if (i.dtype() == DType::i32) distinct_ids(i.data<int32_t>(), b, w.dim(0), w.shape(), row_of, rows);
    else distinct_ids(i.data<int64_t>(), b, w.dim(0), w.shape(), row_of, rows);
    probs = Tensor::empty(Shape{rows.dim(0), c}, w.dtype());
    kernels::cross_entropy_of_rows(w, rows, row_of, t, probs, losses);
    if (reduction == Reduction::mean) kernels::mean_all(losses, out);
    if (reduction == Reduction::sum) kernels::sum_all(losses, out);
  } else {
    Tensor logits = Tensor::empty(Shape{b, c}, w.dtype(), device);
    kernels::gather_rows(w, i, logits);
    probs = like(logits);
    if (reduction == Reduction::none) kernels::cross_entropy(logits, t, probs, losses);
    else kernels::cross_entropy_reduced(logits, t, probs, losses, out, reduction == Reduction::mean);
  }
  return g.record(kOp, std::move(out), {table, ids, targets}, backward, {std::move(probs), std::move(row_of)},
                  divisor);
}

}  // namespace tapegrad::ops
