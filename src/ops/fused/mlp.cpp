// The fused MLP (mlp.hpp): forward and backward together.
//
// Note [the MLP's epilogues]
// linear -> f -> linear moves the (N, H) activations (H = 4 C in a transformer: the largest
// tensors of a block) through memory four more times than the products need: f's forward reads
// pre and writes act, its backward reads dact and pre and writes dpre. A GEMM's epilogue, the
// code that turns its f32 sums into the stored result, can do both: cuBLASLt's GELU_AUX writes
// gelu(sums) as the product's result and the sums themselves (pre) as a second, "aux" matrix;
// DGELU scales the sums of dact = dy W_proj by gelu'(pre) before storing them, so dact is never
// stored. The op records two nodes, each with the gradient of what it made:
//   "linear" (x, w_fc, b_fc) -> pre            linear's node and backward (record_linear)
//   "mlp"    (pre, w_proj, b_proj) -> y        y = act W_proj^T + b_proj, act = f(pre) made with
//                                              pre by the first product; its backward gives dpre
// so the engine sees nothing unusual: "mlp" reads act from its saved slot and hands dpre to the
// linear node as the gradient of its output, which it is. cuBLASLt's GELU is the tanh form, so the
// epilogues serve MlpActivation::gelu_tanh (GPT-2's own GELU) with bf16 products on CUDA; there f
// and f' act on the f32 sums before the one rounding (a little more accurate than rounding pre and
// dact first, within bf16's rounding of the three ops). A first bias goes into the forward's
// epilogue too when it is bf16 (GELU_AUX_BIAS); an f32 one, autocast's, has no such kernel with
// bf16 results, so that forward runs unfused. Everywhere else, and where cuBLASLt has no kernel for
// the sizes, kernels::matmul_activation(_backward) run the unfused kernels in the unfused order: the
// three ops' bits, in every dtype.
#include "tapegrad/ops/fused/mlp.hpp"

#include <string>

#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/common.hpp"

namespace tapegrad::ops {

using namespace detail;

namespace {

constexpr const char* kOp = "mlp";

kernels::Unary unary_of(MlpActivation f) {
  switch (f) {
    case MlpActivation::gelu: return kernels::Unary::gelu_erf;
    case MlpActivation::gelu_tanh: return kernels::Unary::gelu_tanh;
    case MlpActivation::relu: return kernels::Unary::relu;
    case MlpActivation::silu: return kernels::Unary::silu;
  }
  throw Error("[mlp] unknown activation");
}

// The "mlp" node: inputs {pre (..., H), W_proj (O, H)[, b_proj (O,)]}; saved {act (N, H) in the
// products' dtype, W_proj's copy in it (undefined: W_proj itself)}; scalar: the activation.
// dpre = (dy W_proj) * f'(pre), one product with f' in its epilogue; dW_proj = dy^T act, db_proj =
// dy's column sums (linear's parameter gradients).
void backward(BackwardContext& ctx) {
  const auto f = static_cast<MlpActivation>(static_cast<int>(ctx.scalar()));
  const Tensor& act = ctx.saved(0);
  const Tensor& Wc = ctx.saved(1).defined() ? ctx.saved(1) : ctx.input(1);
  const Tensor dy = ctx.grad_output().reshape(as_matrix_of_rows(ctx.grad_output().shape()));  // (N, O)
  const Tensor dyc = operand(dy, act.dtype());
  if (ctx.needs_grad(0)) {
    const Tensor pre = ctx.input(0).reshape(act.shape());
    Tensor dpre = like(act);
    kernels::matmul_activation_backward(unary_of(f), dyc, Wc, pre, act, dpre);
    ctx.accumulate(0, dpre.reshape(ctx.input(0).shape()));
  }
  accumulate_linear_param_grads(ctx, dy, dyc, act);
}

void need_bias(const Var& b, const char* what, int64_t extent, DType compute, const Tensor& x) {
  if (!b.defined()) return;
  const Tensor& bv = b.value();
  if (compute == DType::bf16) need_float_or_bf16(kOp, what, bv);
  else same_dtype(kOp, x, bv);
  if (bv.ndim() != 1 || bv.dim(0) != extent)
    throw Error(std::string("[mlp] ") + what + " of shape " + bv.shape().str() + " does not fit: it needs (" +
                std::to_string(extent) + ",)");
}

}  // namespace

const char* mlp_activation_name(MlpActivation f) { return kernels::unary_name(unary_of(f)); }

Var mlp(Var x, Var w_fc, Var w_proj, MlpActivation activation, Var b_fc, Var b_proj) {
  Graph& g = graph_of(kOp, {x, w_fc, w_proj});
  for (const Var* b : {&b_fc, &b_proj})
    if (b->defined()) (void)graph_of(kOp, {x, *b});
  const Tensor& v = x.value();
  const Tensor& Wf = w_fc.value();
  const Tensor& Wp = w_proj.value();
  const DType compute = product_dtype(kOp, v, Wf);  // and the result's (Note [bf16 activations])
  same_dtype(kOp, Wf, Wp);
  if (Wf.ndim() != 2) throw Error("[mlp] w_fc must be 2-D (hidden, in), got shape " + Wf.shape().str());
  if (Wp.ndim() != 2) throw Error("[mlp] w_proj must be 2-D (out, hidden), got shape " + Wp.shape().str());
  if (v.ndim() == 0 || v.dim(v.ndim() - 1) != Wf.dim(1))
    throw Error("[mlp] cannot apply w_fc of shape " + Wf.shape().str() + " to x of shape " + v.shape().str() +
                (v.ndim() == 0 ? std::string(": x must have at least 1 dimension")
                               : ": x's last axis has " + std::to_string(v.dim(v.ndim() - 1)) +
                                     " features, w_fc (hidden, in) takes " + std::to_string(Wf.dim(1))));
  if (Wp.dim(1) != Wf.dim(0))
    throw Error("[mlp] w_proj of shape " + Wp.shape().str() + " does not take w_fc " + Wf.shape().str() + "'s " +
                std::to_string(Wf.dim(0)) + " hidden features");
  need_bias(b_fc, "b_fc", Wf.dim(0), compute, v);
  need_bias(b_proj, "b_proj", Wp.dim(0), compute, v);
  (void)unary_of(activation);  // an unknown value is refused before any work
  const Shape rows = as_matrix_of_rows(v.shape());
  Shape pre_shape(v.shape().begin(), v.shape().end() - 1), out_shape = pre_shape;
  pre_shape.push_back(Wf.dim(0));
  out_shape.push_back(Wp.dim(0));
  // the products' operands: bf16 copies of f32 values under autocast (Note [bf16 activations])
  const Tensor xc = operand(v, compute).reshape(rows), Wfc = operand(Wf, compute), Wpc = operand(Wp, compute);
  Tensor pre = Tensor::empty(pre_shape, compute, v.device());
  Tensor act = Tensor::empty(Shape{rows[0], Wf.dim(0)}, compute, v.device());
  Tensor pre_rows = pre.reshape(act.shape());
  kernels::matmul_activation(unary_of(activation), xc, Wfc, b_fc.defined() ? b_fc.value() : Tensor(), pre_rows, act);
  Var pre_var = record_linear(g, std::move(pre), x, w_fc, b_fc, xc, Wfc);
  Tensor out = Tensor::empty(out_shape, compute, v.device());
  Tensor out_rows = out.reshape(Shape{rows[0], Wp.dim(0)});
  kernels::linear_rows(act, Wpc, b_proj.defined() ? b_proj.value() : Tensor(), out_rows);
  const double f = static_cast<double>(static_cast<int>(activation));
  Tensor w_copy = Wpc.dtype() != Wp.dtype() ? Wpc : Tensor();
  if (b_proj.defined()) return g.record(kOp, std::move(out), {pre_var, w_proj, b_proj}, backward, {act, w_copy}, f);
  return g.record(kOp, std::move(out), {pre_var, w_proj}, backward, {act, w_copy}, f);
}

}  // namespace tapegrad::ops
