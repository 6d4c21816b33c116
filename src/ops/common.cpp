// The N-d helpers of op front-ends (common.hpp).
#include "tapegrad/ops/common.hpp"

#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops::detail {

int normalize_axis(const char* op, int axis, int ndim) {
  const int n = std::max(ndim, 1);  // a 0-d tensor takes axis 0 or -1, as in PyTorch
  if (axis < -n || axis >= n)
    throw Error(std::string("[") + op + "] axis " + std::to_string(axis) + " is out of range for a tensor of " +
                std::to_string(ndim) + " dimension" + (ndim == 1 ? "" : "s"));
  return axis < 0 ? axis + n : axis;
}

std::vector<bool> axes_mask(const char* op, const std::vector<int>& axes, int ndim) {
  std::vector<bool> mask(static_cast<size_t>(ndim), axes.empty());
  for (int a : axes) {
    const int d = normalize_axis(op, a, ndim);
    if (d >= ndim) continue;  // axis 0 of a 0-d tensor: nothing to reduce
    if (mask[static_cast<size_t>(d)])
      throw Error(std::string("[") + op + "] axis " + std::to_string(a) + " is given twice");
    mask[static_cast<size_t>(d)] = true;
  }
  return mask;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int d = 0; d < n; ++d) {
    const int da = d - (n - a.ndim()), db = d - (n - b.ndim());
    const int64_t ea = da < 0 ? 1 : a[da], eb = db < 0 ? 1 : b[db];
    if (ea != eb && ea != 1 && eb != 1)
      throw Error(std::string("[") + op + "] cannot broadcast shapes " + a.str() + " and " + b.str() + ": axis " +
                  std::to_string(d) + " has sizes " + std::to_string(ea) + " and " + std::to_string(eb));
    out.push_back(ea == 1 ? eb : ea);
  }
  return out;
}

Tensor operand(const Tensor& v, DType compute) {
  if (v.dtype() == compute) return v;
  if (compute == DType::bf16)  // a weight's current bf16 copy (Note [bf16 weight copies]) in place of a cast
    if (Tensor kept = current_bf16_copy(v); kept.defined()) return kept;
  Tensor c = Tensor::empty(v.shape(), compute, v.device());
  kernels::cast(v, c);
  return c;
}

DType promote(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return a.dtype();
  const bool narrow = (a.dtype() == DType::f32 && b.dtype() == DType::bf16) ||
                      (a.dtype() == DType::bf16 && b.dtype() == DType::f32);
  if (!narrow) same_dtype(op, a, b);  // the error
  return DType::f32;
}

Var widened(Var x) { return x.defined() && x.dtype() == DType::bf16 ? to(x, DType::f32) : x; }

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int n = g.ndim(), lead = n - shape.ndim();
  Shape kept;
  for (int d = 0; d < n; ++d) kept.push_back(d < lead ? 1 : shape[d - lead]);
  Tensor out = Tensor::empty(shape, g.dtype(), g.device());
  kernels::reduce(kernels::Reduce::sum, g, kept, out);
  return out;
}

Tensor expand(const Tensor& t, const Shape& from, const Shape& to) {
  Tensor out = Tensor::empty(to, t.dtype(), t.device());
  kernels::copy_strided(t, kernels::contiguous_view(from), out, kernels::contiguous_view(to));
  return out;
}

Var constant(Graph& g, double value, const Tensor& like) {
  const DType t = like.dtype();
  if (like.device().is_cpu() || (t != DType::f32 && t != DType::f64))
    return g.input(Tensor::scalar(value, t, like.device()));
  // On a device, a fill rather than a copy from the host, so that a captured step may hold it (a
  // replay cannot repeat a host copy). The value is rounded to the dtype on the host first, so the
  // fill writes the bits Tensor::scalar would.
  Tensor out = Tensor::empty(Shape{}, t, like.device());
  kernels::fill(out, Tensor::scalar(value, t).item());
  return g.input(std::move(out));
}

Tensor host_ints(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, Shape{static_cast<int64_t>(values.size())});
}

std::vector<int64_t> ints_of(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

// ---- linear's parts

Shape as_matrix_of_rows(const Shape& s) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < s.ndim(); ++i) rows *= s[i];  // fits: a Shape's extents' product does
  return Shape{rows, s[s.ndim() - 1]};
}

DType product_dtype(const char* op, const Tensor& x, const Tensor& w) {
  need_float_or_bf16(op, "input", x);
  need_float_or_bf16(op, "weight", w);
  if (x.dtype() == DType::f64 || w.dtype() == DType::f64) {
    same_dtype(op, x, w);
    return DType::f64;
  }
  if (x.dtype() == DType::bf16 || w.dtype() == DType::bf16) return DType::bf16;
  return compute_dtype(DType::f32);
}

std::array<Tensor, 2> saved_copies(const Tensor& x, const Tensor& xc, const Tensor& w, const Tensor& wc) {
  return {xc.dtype() != x.dtype() ? xc : Tensor(), wc.dtype() != w.dtype() ? wc : Tensor()};
}

void accumulate_linear_param_grads(BackwardContext& ctx, const Tensor& dy, const Tensor& dyc, const Tensor& xc) {
  const Tensor& W = ctx.input(1);
  const bool want_w = ctx.needs_grad(1), want_b = ctx.node().inputs.size() == 3 && ctx.needs_grad(2);
  if (want_w && want_b && xc.dtype() == DType::bf16 && W.dtype() == DType::f32 && ctx.input(2).dtype() == DType::f32) {
    Tensor dW = like(W), db = like(ctx.input(2));
    kernels::matmul_weight_bias_grad(dyc, xc, dW, db);
    ctx.accumulate(1, dW);
    ctx.accumulate(2, db);
    return;
  }
  if (want_w) {
    Tensor dW = like(W);
    kernels::matmul(dyc, true, xc, false, dW);
    ctx.accumulate(1, dW);
  }
  if (want_b) {
    const Tensor& b = ctx.input(2);
    const DType sums = b.dtype() == DType::bf16 ? DType::f32 : b.dtype();
    Tensor s = Tensor::empty(b.shape(), sums, dy.device());
    kernels::sum_rows(operand(dy, sums), s);
    ctx.accumulate(2, operand(s, b.dtype()));
  }
}

}  // namespace tapegrad::ops::detail
