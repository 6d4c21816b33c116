// The fused linear cross-entropy (linear_cross_entropy.hpp): forward and backward together.
//
// Note [blocks of rows]
// Rows are taken chunk_rows at a time, in order. A block's x rows and targets are copied out of
// the (N, C) and (N,) inputs (tensors have no views; the copy is C values a row against the V C
// multiply-adds the row's logits cost) and its losses copied back. Each block's logits
// z = x_c W^T go through cross_entropy_rows, one pass that gives the rows' losses and, when a
// gradient is wanted, dz = softmax(z) - onehot(t) in the products' dtype.
// - mean and sum (a scalar loss): the gradients are made in the forward, as Liger-Kernel's fused
//   linear cross-entropy makes them: dx_c = dz W and dW += dz^T x_c per block (the first block's
//   product written, the others' added to it by the product itself, BLAS's beta 1), divided by the count for
//   the mean once all blocks are done. The backward only scales them by dloss: no block is made
//   twice, and at most one (chunk_rows, V) z and its dz are alive at a time. In NoGrad, or when
//   neither x nor W wants a gradient, no dz is made.
// - none (a loss per row): dloss weighs each row, so the backward makes each block's logits again
//   and runs the unfused cross-entropy's backward over them (one more product of x and W).
// Inside an Autocast scope, x's blocks, W and dz are bf16 copies and every product sums in f32
// (Note [autocast]); the forward's logits are bf16 too, as the linear PyTorch's autocast runs
// gives its cross-entropy (half the bytes of the pass that reads them twice), and the softmax
// and the losses f32.
#include "tapegrad/ops/fused/linear_cross_entropy.hpp"

#include <algorithm>
#include <string>

#include "tapegrad/kernels/strided.hpp"
#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/common.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

constexpr const char* kOp = "linear_cross_entropy";

// Rows [r0, r1) of a contiguous (n, ...) tensor: itself when that is all of it, else a copy.
Tensor rows_of(const Tensor& a, int64_t r0, int64_t r1) {
  if (r0 == 0 && r1 == a.dim(0)) return a;
  Shape s = a.shape();
  s.set(0, r1 - r0);
  Tensor out = Tensor::empty(s, a.dtype(), a.device());
  kernels::copy_strided(a, kernels::sliced_view(a.shape(), 0, r0, r1), out, kernels::contiguous_view(s));
  return out;
}

// `part` into rows [r0, r0 + part.dim(0)) of `whole` (nothing to do when part is whole).
void put_rows(const Tensor& part, Tensor& whole, int64_t r0) {
  if (part.raw_data() == whole.raw_data()) return;
  kernels::copy_strided(part, kernels::contiguous_view(part.shape()), whole,
                        kernels::sliced_view(whole.shape(), 0, r0, r0 + part.dim(0)));
}

// A block's rows: the rows themselves when the block is all of them, else a fresh tensor.
Tensor block_like(const Tensor& whole, int64_t rows) {
  if (rows == whole.dim(0)) return whole;
  Shape s = whole.shape();
  s.set(0, rows);
  return Tensor::empty(s, whole.dtype(), whole.device());
}

// A block's share of the gradients from its dz (m, V): rows [r0, r0 + m) of dx = dz W, and
// dW += dz^T x_c (written by the first block, added to by the others' products, beta 1: no block
// of dW's size apart). An undefined dx or dw is not wanted.
void add_block_gradients(const Tensor& dz, const Tensor& xc, const Tensor& Wc, int64_t r0, Tensor& dx, Tensor& dw) {
  if (dx.defined()) {
    Tensor dxc = block_like(dx, dz.dim(0));
    kernels::matmul(dz, false, Wc, false, dxc);  // (m, C) = dz W
    put_rows(dxc, dx, r0);
  }
  if (dw.defined()) kernels::matmul(dz, true, xc, false, dw, /*accumulate=*/r0 > 0);  // (V, C) (+)= dz^T x_c
}

// reduction none: saved = {W's copy in the products' dtype (Note [autocast]; undefined when W is
// their operand itself), the block size as a () i64 on the host}; scalar = ignore_index.
void backward_recomputed(BackwardContext& ctx) {
  const Tensor& W = ctx.input(1);                   // (V, C)
  const int64_t v = W.dim(0), c = W.dim(1), n = ctx.input(2).numel();
  const Tensor x = ctx.input(0).reshape(Shape{n, c});
  const Tensor t = ctx.input(2).reshape(Shape{n});
  const Tensor d1 = ctx.grad_output().reshape(Shape{n});  // the targets' shape
  const int64_t chunk = ctx.saved(1).data<int64_t>()[0];
  const int64_t ignore_index = static_cast<int64_t>(ctx.scalar());
  const bool want_x = ctx.needs_grad(0), want_w = ctx.needs_grad(1);
  const Tensor& Wc = ctx.saved(0).defined() ? ctx.saved(0) : W;  // the forward's products' dtype
  const DType compute = Wc.dtype();
  Tensor dx = want_x ? Tensor::empty(Shape{n, c}, x.dtype(), x.device()) : Tensor();
  Tensor dw = want_w ? like(W) : Tensor();
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk), m = r1 - r0;
    const Tensor xc = operand(rows_of(x, r0, r1), compute), tc = rows_of(t, r0, r1);
    Tensor z = Tensor::empty(Shape{m, v}, W.dtype(), x.device());
    kernels::matmul(xc, false, Wc, true, z);                // (m, V) = x_c W^T
    kernels::log_softmax_rows(z, z);                        // lp, in place
    kernels::nll_log_softmax_backward(z, tc, ignore_index, rows_of(d1, r0, r1), Tensor(), z);
    const Tensor dz = operand(z, compute);
    z = Tensor();
    add_block_gradients(dz, xc, Wc, r0, dx, dw);
  }
  if (want_x) ctx.accumulate(0, dx.reshape(ctx.input(0).shape()));
  if (want_w) ctx.accumulate(1, dw);
}

// mean and sum: saved = {dx (N, C), dW (V, C)} made in the forward in W's dtype (undefined where
// not wanted); dx = dloss * saved dx (rounded to x's dtype, bf16 for an autocast activation), dW =
// dloss * saved dW.
void backward_saved(BackwardContext& ctx) {
  const Tensor& dloss = ctx.grad_output();  // ()
  for (int k = 0; k < 2; ++k) {
    if (!ctx.needs_grad(k) || !ctx.saved(k).defined()) continue;
    Tensor d = like(ctx.saved(k));
    kernels::binary(kernels::Binary::mul, ctx.saved(k), dloss, d);
    ctx.accumulate(k, operand(d, ctx.input(k).dtype()).reshape(ctx.input(k).shape()));
  }
}

}  // namespace

Var linear_cross_entropy(Var x, Var w, Var targets, Reduction reduction, int64_t ignore_index, int64_t chunk_rows) {
  Graph& g = graph_of(kOp, {x, w, targets});
  const Tensor& xv = x.value();
  const Tensor& W = w.value();
  const Tensor& t = targets.value();
  need_float_or_bf16(kOp, "x", xv);
  need_float(kOp, "the weight", W);
  if (!(xv.dtype() == DType::bf16 && W.dtype() == DType::f32)) same_dtype(kOp, xv, W);
  need_index(kOp, "targets", t);
  if (W.ndim() != 2) throw Error("[linear_cross_entropy] the weight must be 2-D (V, C), got shape " + W.shape().str());
  if (xv.ndim() < 1 || xv.dim(xv.ndim() - 1) != W.dim(1))
    throw Error("[linear_cross_entropy] cannot apply a weight of shape " + W.shape().str() + " to x of shape " +
                xv.shape().str() + ": x's last axis must have the weight's " + std::to_string(W.dim(1)) + " features");
  bool match = t.ndim() == xv.ndim() - 1;
  for (int d = 0; match && d < t.ndim(); ++d) match = t.dim(d) == xv.dim(d);
  if (!match)
    throw Error("[linear_cross_entropy] x " + xv.shape().str() + " and targets " + t.shape().str() +
                " do not match: targets need x's shape without its last axis (features)");
  if (chunk_rows < 1) throw Error("[linear_cross_entropy] chunk_rows must be at least 1, got " + std::to_string(chunk_rows));
  const int64_t n = t.numel(), c = W.dim(1), v = W.dim(0);
  if (n == 0) throw Error("[linear_cross_entropy] empty batch: x " + xv.shape().str());
  if (v == 0) throw Error("[linear_cross_entropy] no classes: the weight " + W.shape().str());
  const Tensor x2 = xv.reshape(Shape{n, c}), t1 = t.reshape(Shape{n});
  // Note [autocast]: bf16 for a bf16 x (an autocast activation) or inside a scope
  const DType compute = xv.dtype() == DType::bf16 ? DType::bf16 : compute_dtype(xv.dtype());
  const Tensor Wc = operand(W, compute);
  // gradients in the forward (Note [blocks of rows]) for a scalar loss that one will reach, and
  // the losses, in W's dtype
  const bool scalar = reduction != Reduction::none, grads = scalar && g.grad_enabled();
  const bool want_x = grads && x.requires_grad(), want_w = grads && w.requires_grad();
  Tensor dx = want_x ? Tensor::empty(Shape{n, c}, W.dtype(), xv.device()) : Tensor();
  Tensor dw = want_w ? like(W) : Tensor();
  Tensor losses = Tensor::empty(Shape{n}, W.dtype(), xv.device());
  Tensor count = Tensor::empty(Shape{}, W.dtype(), xv.device()), block_count;
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {  // Note [blocks of rows]
    const int64_t r1 = std::min(n, r0 + chunk_rows), m = r1 - r0;
    const Tensor xc = operand(rows_of(x2, r0, r1), compute);
    Tensor z = Tensor::empty(Shape{m, v}, compute, xv.device());  // bf16 logits under autocast
    kernels::matmul(xc, false, Wc, true, z);              // (m, V) = x_c W^T
    Tensor dz = want_x || want_w ? Tensor::empty(Shape{m, v}, compute, xv.device()) : Tensor();
    Tensor lc = block_like(losses, m);
    if (r0 == 0) {
      kernels::cross_entropy_rows(z, rows_of(t1, r0, r1), ignore_index, lc, count, dz);
    } else {
      if (!block_count.defined()) block_count = like(count);
      kernels::cross_entropy_rows(z, rows_of(t1, r0, r1), ignore_index, lc, block_count, dz);
      kernels::binary(kernels::Binary::add, count, block_count, count);
    }
    put_rows(lc, losses, r0);
    z = Tensor();
    add_block_gradients(dz, xc, Wc, r0, dx, dw);
  }
  Tensor out = losses.reshape(t.shape());
  if (scalar) {
    out = Tensor::empty(Shape{}, W.dtype(), xv.device());
    kernels::sum_all(losses, out);
    if (reduction == Reduction::mean) {
      kernels::binary(kernels::Binary::div, out, count, out);
      if (want_x) kernels::binary(kernels::Binary::div, dx, count, dx);
      if (want_w) kernels::binary(kernels::Binary::div, dw, count, dw);
    }
    return g.record(kOp, std::move(out), {x, w, targets}, backward_saved, {std::move(dx), std::move(dw)});
  }
  // saved: the block size, a () i64 on the host
  Tensor chunk = Tensor::from_vector(std::vector<int64_t>{chunk_rows}, Shape{});
  return g.record(kOp, std::move(out), {x, w, targets}, backward_recomputed,
                  {compute != W.dtype() ? Wc : Tensor(), std::move(chunk)},
                  static_cast<double>(ignore_index));
}

}  // namespace tapegrad::ops
