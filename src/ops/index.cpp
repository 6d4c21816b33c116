// Indexing and masks: embedding, index_select, gather along an axis, tril and the causal mask.
// Forward and backward together.
#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

void need_ids(const char* op, Var ids) {
  need_index(op, "ids", ids.value());
  if (ids.requires_grad()) throw Error(std::string("[") + op + "] ids cannot require a gradient");
}

}  // namespace

// table (V, d), ids (s) any shape -> (s..., d): the rows of the ids (gather's rows, reshaped);
// dtable[ids[i]] += dy[i] for every position i, in order
Var embedding(Var table, Var ids) {
  need_ndim("embedding", "table", table.value(), 2);
  need_ids("embedding", ids);
  Shape out = ids.shape();
  out.push_back(table.value().dim(1));
  return reshape(gather(table, reshape(ids, Shape{ids.value().numel()})), out);
}

// x (.., n, ..), ids (k,) -> (.., k, ..) = x[.., ids, ..] along axis;  dx[.., ids[j], ..] += dy[.., j, ..]
Var index_select(Var x, int axis, Var ids) {
  Graph& g = graph_of("index_select", {x, ids});
  const Tensor& v = x.value();
  need_ids("index_select", ids);
  need_ndim("index_select", "ids", ids.value(), 1);
  const int a = normalize_axis("index_select", axis, v.ndim());
  if (v.ndim() == 0) throw Error("[index_select] x must have at least one dimension");
  Shape shape = v.shape();
  shape.set(a, ids.value().numel());
  Tensor out = empty_on(shape, v);
  kernels::index_select(v, a, ids.value(), out);
  return g.record("index_select", std::move(out), {x, ids}, [](BackwardContext& ctx) {
    const Tensor& dy = ctx.grad_output();
    Tensor dx = Tensor::zeros(ctx.input(0).shape(), dy.dtype(), dy.device());
    kernels::index_add(dx, static_cast<int>(ctx.scalar()), ctx.input(1), dy);
    ctx.accumulate(0, dx);
  }, {}, static_cast<double>(a));
}

// x (.., n, ..), ids (.., k, ..) (x's extents outside axis) -> ids' shape, out[.., j, ..] =
// x[.., ids[.., j, ..], ..] (torch.gather);  dx[.., ids[.., j, ..], ..] += dy[.., j, ..]
Var gather(Var x, int axis, Var ids) {
  Graph& g = graph_of("gather_axis", {x, ids});
  const Tensor& v = x.value();
  const Tensor& i = ids.value();
  need_ids("gather", ids);
  const int a = normalize_axis("gather", axis, v.ndim());
  bool ok = i.ndim() == v.ndim() && v.ndim() > 0;
  for (int d = 0; ok && d < v.ndim(); ++d) ok = d == a || i.dim(d) == v.dim(d);
  if (!ok)
    throw Error("[gather] ids " + i.shape().str() + " must have the shape of x " + v.shape().str() + " outside axis " +
                std::to_string(axis));
  Tensor out = empty_on(i.shape(), v);
  kernels::gather_axis(v, a, i, out);
  return g.record("gather_axis", std::move(out), {x, ids}, [](BackwardContext& ctx) {
    const Tensor& dy = ctx.grad_output();
    Tensor dx = Tensor::zeros(ctx.input(0).shape(), dy.dtype(), dy.device());
    kernels::scatter_add_axis(dx, static_cast<int>(ctx.scalar()), ctx.input(1), dy);
    ctx.accumulate(0, dx);
  }, {}, static_cast<double>(a));
}

namespace {

// (rows, cols) u8 on device: 1 where j > i + k (above the k-th diagonal), 0 elsewhere
Tensor triangle_above(int64_t rows, int64_t cols, int64_t k, Device device) {
  Tensor m = Tensor::empty(Shape{rows, cols}, DType::u8);
  uint8_t* p = m.mutable_data<uint8_t>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = j > i + k ? 1 : 0;
  return m.to(device);
}

}  // namespace

Tensor causal_mask(int64_t t, Device device) {
  if (t < 0) throw Error("[causal_mask] size " + std::to_string(t) + " is negative");
  return triangle_above(t, t, 0, device);
}

// x (.., r, c) -> x with the elements above the k-th diagonal set to 0 (where over a mask: the
// gradient passes on and below it)
Var tril(Var x, int64_t k) {
  const Tensor& v = x.value();
  if (v.ndim() < 2) throw Error("[tril] needs at least 2 dimensions, got shape " + v.shape().str());
  Var mask = x.graph().input(triangle_above(v.dim(v.ndim() - 2), v.dim(v.ndim() - 1), k, v.device()));
  return masked_fill(x, mask, 0.0);
}

}  // namespace tapegrad::ops
