// Image ops on (N, C, H, W): conv2d as im2col + GEMM, max and average pooling. PyTorch's semantics
// (floor-mode output sizes, zero padding for the convolution, -inf padding for the max pool, the
// padding counted in the average). Forward and backward together; each backward rebuilds what it
// needs from the inputs and the window (saved as a small host tensor, Note [saved windows]).
//
// Note [conv2d as one GEMM]
// The whole batch is one matrix product: im2col lays every window of x out as a column of
// cols (C*kh*kw, N*Ho*Wo), so y (O, N*Ho*Wo) = W @ cols with W viewed as (O, C*kh*kw), and
// conv2d_columns_to_planes moves each row's runs of Ho*Wo values into the output planes (adding
// the bias): whole planes copied, no element moved alone. The backward runs the same products the
// other way round on drows (N*Ho*Wo, O), dy laid out as rows: dW = drows^T @ cols^T (the batch
// summed inside the product: one GEMM), dcols = W^T @ drows^T and dx = col2im(dcols), db = the
// column sums of drows (sum over N, H, W).
// cols is not kept for the backward (it is kh*kw times x's size); the backward rebuilds it only
// when the weight needs a gradient.
//
// Note [saved windows]
// A node keeps one scalar, but a window is eight integers (kernel, stride, padding, output size,
// per axis). They ride in the node's saved tensor as an i64 host tensor of 8, which the backward
// rule reads on the host whatever the op's device.
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;
using kernels::Window2d;

namespace {

std::string str(int64_t v) { return std::to_string(v); }
std::string pair(int64_t a, int64_t b) { return "(" + str(a) + ", " + str(b) + ")"; }

// The shape `dims`, or an error naming the op and what it is when its size does not fit 64 bits.
Shape checked_shape(const char* op, const char* what, std::initializer_list<int64_t> dims) {
  try {
    return Shape(dims);
  } catch (const Error& e) {
    throw Error(std::string("[") + op + "] " + what + " would have too many elements: " + e.what());
  }
}

// The window of a kh x kw kernel moved by `stride` over x (N, C, H, W) with `padding` on each side,
// output sizes (H + 2 padding - kh) / stride + 1 and likewise for W; errors name the op.
Window2d window_of(const char* op, const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  const std::string at = std::string("[") + op + "] ";
  if (stride < 1) throw Error(at + "stride must be at least 1, got " + str(stride));
  if (padding < 0) throw Error(at + "padding must be at least 0, got " + str(padding));
  int64_t padded_h, padded_w;
  if (__builtin_add_overflow(x.dim(2), 2 * padding, &padded_h) || __builtin_add_overflow(x.dim(3), 2 * padding, &padded_w))
    throw Error(at + "x " + x.shape().str() + " padded by " + str(padding) + " is too large to index");
  if (padded_h < kh || padded_w < kw)
    throw Error(at + "kernel " + pair(kh, kw) + " is larger than x " + x.shape().str() + " padded by " + str(padding) +
                " on each side to " + pair(padded_h, padded_w) + ": the output would be empty");
  return Window2d{kh, kw, stride, stride, padding, padding, (padded_h - kh) / stride + 1, (padded_w - kw) / stride + 1};
}

Tensor window_tensor(const Window2d& w) {
  return Tensor::from_vector(std::vector<int64_t>{w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_h, w.pad_w,
                                                  w.out_h, w.out_w},
                             Shape{8});
}
Window2d window_from(const Tensor& t) {
  const int64_t* v = t.data<int64_t>();
  return Window2d{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
}

// The checks both pools share: x (N, C, H, W) floats, a kernel of at least 1 with padding at most
// half of it (PyTorch's rule: every window holds a pixel of x); the window.
Window2d pool_window(const char* op, const Tensor& v, int kernel, std::optional<int> stride, int padding) {
  need_ndim(op, "x (N, C, H, W)", v, 4);
  need_float(op, "x", v);
  if (kernel < 1) throw Error(std::string("[") + op + "] kernel size must be at least 1, got " + str(kernel));
  if (padding > kernel / 2)
    throw Error(std::string("[") + op + "] padding " + str(padding) + " is more than half the kernel size " +
                str(kernel) + ": a window could hold only padding");
  return window_of(op, v, kernel, kernel, stride.value_or(kernel), padding);
}

}  // namespace

// x (N, C, H, W) * weight (O, C, kh, kw) (+ bias (O,)) -> y (N, O, Ho, Wo), Ho = (H + 2p - kh) / s + 1:
// y[n, o, oh, ow] = b[o] + sum_{c, i, j} w[o, c, i, j] * x[n, c, oh*s - p + i, ow*s - p + j] (0 in the padding).
// dx[n, c, h, v] = sum of w[o, c, i, j] * dy[n, o, oh, ow] over the windows holding (h, v);
// dw[o, c, i, j] = sum_{n, oh, ow} dy[n, o, oh, ow] * x[n, c, oh*s - p + i, ow*s - p + j];
// db[o] = sum_{n, oh, ow} dy[n, o, oh, ow]. As matrix products: Note [conv2d as one GEMM].
Var conv2d(Var x, Var weight, Var bias, int stride, int padding) {
  Graph& g = bias.defined() ? graph_of("conv2d", {x, weight, bias}) : graph_of("conv2d", {x, weight});
  const Tensor& v = x.value();
  const Tensor& w = weight.value();
  const Tensor b = bias.defined() ? bias.value() : Tensor();
  need_ndim("conv2d", "x (N, C, H, W)", v, 4);
  need_ndim("conv2d", "weight (O, C, kh, kw)", w, 4);
  need_float("conv2d", "x", v);
  same_dtype("conv2d", v, w);
  (void)kernels::common_device("conv2d", {&v, &w, &b});
  const int64_t N = v.dim(0), C = v.dim(1), O = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  if (w.dim(1) != C)
    throw Error("[conv2d] weight " + w.shape().str() + " expects " + str(w.dim(1)) + " input channels, x " +
                v.shape().str() + " has " + str(C));
  if (kh == 0 || kw == 0) throw Error("[conv2d] weight " + w.shape().str() + " has an empty kernel " + pair(kh, kw));
  if (b.defined()) {
    same_dtype("conv2d", v, b);
    if (b.ndim() != 1 || b.dim(0) != O)
      throw Error("[conv2d] bias " + b.shape().str() + " must be (O,) = (" + str(O) + ",) for weight " + w.shape().str());
  }
  const Window2d win = window_of("conv2d", v, kh, kw, stride, padding);
  const Shape out_shape = checked_shape("conv2d", "the output", {N, O, win.out_h, win.out_w});
  const int64_t rows = checked_shape("conv2d", "the im2col matrix", {N, win.out_h, win.out_w}).numel();
  const int64_t width = checked_shape("conv2d", "the im2col matrix", {C, kh, kw}).numel();
  Tensor cols = empty_on(checked_shape("conv2d", "the im2col matrix", {width, rows}), v);
  kernels::im2col(v, win, cols);
  Tensor y_columns = empty_on(Shape{O, rows}, v);
  kernels::matmul(w.reshape(Shape{O, width}), false, cols, false, y_columns);
  Tensor out = empty_on(out_shape, v);
  kernels::conv2d_columns_to_planes(y_columns, b, out);
  auto backward = [](BackwardContext& ctx) {
    const Window2d win = window_from(ctx.saved(0));
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    const Tensor& dy = ctx.grad_output();
    const int64_t O = w.dim(0), rows = dy.dim(0) * win.out_h * win.out_w, width = w.dim(1) * w.dim(2) * w.dim(3);
    Tensor drows = empty_on(Shape{rows, O}, dy);
    kernels::conv2d_planes_to_rows(dy, drows);
    if (ctx.needs_grad(0)) {
      Tensor dcols = empty_on(Shape{width, rows}, dy);
      kernels::matmul(w.reshape(Shape{O, width}), true, drows, true, dcols);
      Tensor dx = like(x);
      kernels::col2im(dcols, win, dx);
      ctx.accumulate(0, dx);
    }
    if (ctx.needs_grad(1)) {
      Tensor cols = empty_on(Shape{width, rows}, x);
      kernels::im2col(x, win, cols);
      Tensor dw = empty_on(Shape{O, width}, w);
      kernels::matmul(drows, true, cols, true, dw);
      ctx.accumulate(1, dw.reshape(w.shape()));
    }
    if (ctx.node().inputs.size() == 3 && ctx.needs_grad(2)) {
      Tensor db = like(ctx.input(2));
      kernels::sum_rows(drows, db);
      ctx.accumulate(2, db);
    }
  };
  if (bias.defined()) return g.record("conv2d", std::move(out), {x, weight, bias}, backward, {window_tensor(win)});
  return g.record("conv2d", std::move(out), {x, weight}, backward, {window_tensor(win)});
}

// x (N, C, H, W) -> (N, C, Ho, Wo), y = the max of each k x k window (padding -inf), Ho = (H + 2p - k) / s + 1;
// dx[pixel] = sum of dy over the windows whose max it is (the first max of a tie; a NaN wins)
Var max_pool2d(Var x, int kernel, std::optional<int> stride, int padding) {
  Graph& g = graph_of("max_pool2d", {x});
  const Tensor& v = x.value();
  const Window2d win = pool_window("max_pool2d", v, kernel, stride, padding);
  const Shape out_shape = checked_shape("max_pool2d", "the output", {v.dim(0), v.dim(1), win.out_h, win.out_w});
  Tensor out = empty_on(out_shape, v);
  Tensor indices = Tensor::empty(out_shape, DType::i64, v.device());
  kernels::max_pool2d(v, win, out, indices);
  return g.record("max_pool2d", std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::max_pool2d_backward(ctx.grad_output(), ctx.saved(0), window_from(ctx.saved(1)), dx);
    ctx.accumulate(0, dx);
  }, {std::move(indices), window_tensor(win)});
}

// x (N, C, H, W) -> (N, C, Ho, Wo), y = the sum of each k x k window / k^2 (the padding counts, as 0);
// dx[pixel] = sum of dy over the windows holding it / k^2
Var avg_pool2d(Var x, int kernel, std::optional<int> stride, int padding) {
  Graph& g = graph_of("avg_pool2d", {x});
  const Tensor& v = x.value();
  const Window2d win = pool_window("avg_pool2d", v, kernel, stride, padding);
  Tensor out = empty_on(checked_shape("avg_pool2d", "the output", {v.dim(0), v.dim(1), win.out_h, win.out_w}), v);
  kernels::avg_pool2d(v, win, out);
  return g.record("avg_pool2d", std::move(out), {x}, [](BackwardContext& ctx) {
    Tensor dx = like(ctx.input(0));
    kernels::avg_pool2d_backward(ctx.grad_output(), window_from(ctx.saved(0)), dx);
    ctx.accumulate(0, dx);
  }, {window_tensor(win)});
}

}  // namespace tapegrad::ops
