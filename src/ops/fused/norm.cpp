// layer_norm and rms_norm (norm.hpp): forward and backward together.
//
// Per row of C values (the last axis), with mean and rstd saved by the forward:
//   layer_norm: mean = sum(x) / C, var = sum((x - mean)^2) / C, rstd = 1 / sqrt(var + eps),
//               xhat = (x - mean) * rstd, y = xhat * w + b
//   rms_norm:   rstd = 1 / sqrt(sum(x^2) / C + eps), xhat = x * rstd, y = xhat * w
// Backward, with g = dy * w (g = dy without a weight) and means taken over the row:
//   layer_norm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   rms_norm:   dx = rstd * (g - xhat * mean(g * xhat))
//   dw = sum over rows of dy * xhat,  db = sum over rows of dy
// (d xhat_j / d x_k = rstd * ([j == k] - 1/C - xhat_j * xhat_k / C) for layer_norm, without the
// 1/C term for rms_norm; dx is g times that Jacobian.) Note [norm arithmetic] in
// src/kernels/cpu/norm.cpp gives the order of every sum.
#include "tapegrad/ops/fused/norm.hpp"

#include <cmath>
#include <cstdio>

#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

using kernels::Norm;

const char* op_name(Norm kind) { return kind == Norm::layer ? "layer_norm" : "rms_norm"; }

// The graph of x, w and b (the defined ones), after checking them; sets *c to C.
Graph& checked_graph(Norm kind, const Var& x, const Var& weight, const Var& bias, double eps, int64_t* c) {
  const char* op = op_name(kind);
  Graph& g = graph_of(op, {x});
  const Tensor& v = x.value();
  need_float(op, "x", v);
  if (v.ndim() == 0) throw Error(std::string("[") + op + "] x must have at least 1 dimension, got shape ()");
  *c = v.dim(v.ndim() - 1);
  if (*c == 0)
    throw Error(std::string("[") + op + "] the last axis of x " + v.shape().str() + " is empty: nothing to normalise");
  for (const auto& [what, p] : {std::pair<const char*, const Var*>{"weight", &weight}, {"bias", &bias}}) {
    if (!p->defined()) continue;
    graph_of(op, {x, *p});
    const Tensor& t = p->value();
    if (t.ndim() != 1 || t.dim(0) != *c)
      throw Error(std::string("[") + op + "] " + what + " " + t.shape().str() + " does not match the last axis of x " +
                  v.shape().str());
    same_dtype(op, v, t);
  }
  if (!(std::isfinite(eps) && eps >= 0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", eps);
    throw Error(std::string("[") + op + "] eps must be a finite number >= 0, got " + buf);
  }
  return g;
}

// The inputs are x, then the weight when there is one, then the bias when there is one.
template <Norm K, bool W, bool B>
void norm_backward(BackwardContext& ctx) {
  constexpr int kWeight = 1, kBias = W ? 2 : 1;
  const Tensor& x = ctx.input(0);
  Tensor dx, dweight, dbias, weight;
  bool dx_adds = false;  // dx added into x's gradient so far (a residual stream's), as the kernel writes it
  if (ctx.needs_grad(0)) {
    dx = ctx.gradient_to_add_into(0);
    dx_adds = dx.defined();
    if (!dx_adds) dx = like(x);
  }
  if constexpr (W) {
    weight = ctx.input(kWeight);
    if (ctx.needs_grad(kWeight)) dweight = like(weight);
  }
  if constexpr (B)
    if (ctx.needs_grad(kBias)) dbias = like(ctx.input(kBias));
  const Tensor mean = K == Norm::layer ? ctx.saved(0) : Tensor();
  const Tensor& rstd = ctx.saved(K == Norm::layer ? 1 : 0);
  kernels::norm_rows_backward(K, ctx.grad_output(), x, weight, mean, rstd, dx, dweight, dbias, dx_adds);
  if (dx_adds) ctx.added_into(0);
  else if (dx.defined()) ctx.accumulate(0, dx);
  if (dweight.defined()) ctx.accumulate(kWeight, dweight);
  if (dbias.defined()) ctx.accumulate(kBias, dbias);
}

template <Norm K>
BackwardFn backward_for(bool w, bool b) {
  if constexpr (K == Norm::rms) return w ? norm_backward<K, true, false> : norm_backward<K, false, false>;
  else if (w) return b ? norm_backward<K, true, true> : norm_backward<K, true, false>;
  else return b ? norm_backward<K, false, true> : norm_backward<K, false, false>;
}

// The statistics and the output of a norm of v: y (v's shape, in the compute dtype: under autocast
// an f32 v is normalised into a bf16 y, Note [bf16 activations]), mean (layer_norm only) and rstd.
struct Made {
  Tensor y, mean, rstd;
};
template <Norm K>
Made outputs_for(const Tensor& v, int64_t c) {
  const Shape rows{v.numel() / c};
  Made m{Tensor::empty(v.shape(), compute_dtype(v.dtype()), v.device()), Tensor(), empty_on(rows, v)};
  if (K == Norm::layer) m.mean = empty_on(rows, v);
  return m;
}

// The norm's node: x's normalised rows made, with their statistics, for its backward.
template <Norm K>
Var record_norm(Graph& g, Var x, Var weight, Var bias, Made m) {
  const BackwardFn rule = backward_for<K>(weight.defined(), bias.defined());
  std::array<Tensor, 2> saved = K == Norm::layer ? std::array<Tensor, 2>{m.mean, m.rstd} : std::array<Tensor, 2>{m.rstd, Tensor()};
  const char* op = op_name(K);
  if (weight.defined() && bias.defined()) return g.record(op, std::move(m.y), {x, weight, bias}, rule, std::move(saved));
  if (weight.defined()) return g.record(op, std::move(m.y), {x, weight}, rule, std::move(saved));
  if (bias.defined()) return g.record(op, std::move(m.y), {x, bias}, rule, std::move(saved));
  return g.record(op, std::move(m.y), {x}, rule, std::move(saved));
}

Tensor value_or_none(const Var& v) { return v.defined() ? v.value() : Tensor(); }

template <Norm K>
Var norm(Var x, Var weight, Var bias, double eps) {
  int64_t c = 0;
  Graph& g = checked_graph(K, x, weight, bias, eps, &c);
  Made m = outputs_for<K>(x.value(), c);
  kernels::norm_rows(K, x.value(), value_or_none(weight), value_or_none(bias), eps, m.y, m.mean, m.rstd);
  return record_norm<K>(g, x, weight, bias, std::move(m));
}

// x + r and its norm: the two nodes that `s = x + r` and `norm(s, ...)` record, with their values
// made by one kernel where the sum is f32 of equal shapes on one device (x f32, r f32 or bf16, or
// the other way round: a + r and r + a are the same f32 sums); anything else is that add and that
// norm in turn (f64, bf16 sums, a broadcast r), the same values and errors either way.
template <Norm K>
SumAndNorm add_norm(Var x, Var r, Var weight, Var bias, double eps) {
  graph_of(K == Norm::layer ? "add_layer_norm" : "add_rms_norm", {x, r});
  const Tensor &u = x.value(), &v = r.value();
  auto f32_with = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == DType::f32 && (b.dtype() == DType::f32 || b.dtype() == DType::bf16);
  };
  const bool one_kernel = u.shape() == v.shape() && u.device() == v.device() && (f32_with(u, v) || f32_with(v, u));
  if (!one_kernel) {
    Var s = ops::add(x, r);
    return {s, norm<K>(widened(s), weight, bias, eps)};
  }
  const bool swap = u.dtype() != DType::f32;  // the f32 operand first
  const Var& wide = swap ? r : x;
  int64_t c = 0;
  Graph& g = checked_graph(K, wide, weight, bias, eps, &c);
  Tensor sum = like(wide.value());
  Made m = outputs_for<K>(sum, c);
  kernels::add_norm_rows(K, swap ? v : u, swap ? u : v, value_or_none(weight), value_or_none(bias), eps, sum, m.y,
                         m.mean, m.rstd);
  Var s = record_add(g, std::move(sum), x, r);
  return {s, record_norm<K>(g, s, weight, bias, std::move(m))};
}

}  // namespace

// A bf16 x (an autocast activation) is normalised in f32: widened by a recorded cast, as
// torch.autocast runs its norms; under autocast the f32 result is rounded to bf16 as it is
// written, for the product that reads it (Note [bf16 activations] in autocast.hpp).
Var layer_norm(Var x, Var weight, Var bias, double eps) { return norm<Norm::layer>(widened(x), weight, bias, eps); }

Var rms_norm(Var x, Var weight, double eps) { return norm<Norm::rms>(widened(x), weight, Var(), eps); }

SumAndNorm add_layer_norm(Var x, Var r, Var weight, Var bias, double eps) {
  return add_norm<Norm::layer>(x, r, weight, bias, eps);
}

SumAndNorm add_rms_norm(Var x, Var r, Var weight, double eps) { return add_norm<Norm::rms>(x, r, weight, Var(), eps); }

}  // namespace tapegrad::ops
