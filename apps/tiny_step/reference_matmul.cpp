// The tiny step's matrix product (reference_matmul.hpp): kernels::matmul_fsum, one node.
#include "reference_matmul.hpp"

#include "tapegrad/kernels/kernels.hpp"

namespace tiny {

using namespace tapegrad;

Var reference_matmul(Var a, Var b) {
  const Tensor& x = a.value();
  const Tensor& w = b.value();
  if (x.ndim() != 2 || w.ndim() != 2)
    throw Error("[matmul] the tiny step multiplies matrices, got " + x.shape().str() + " and " + w.shape().str());
  Tensor out = Tensor::empty(Shape{x.dim(0), w.dim(1)}, x.dtype(), x.device());
  kernels::matmul_fsum(x, false, w, false, out);  // checks the inner sizes and the dtype
  return a.graph().record("matmul", std::move(out), {a, b}, [](BackwardContext& ctx) {
    const Tensor& dy = ctx.grad_output();
    if (ctx.needs_grad(0)) {
      Tensor da = Tensor::empty(ctx.input(0).shape(), dy.dtype(), dy.device());
      kernels::matmul_fsum(dy, false, ctx.input(1), true, da);
      ctx.accumulate(0, da);
    }
    if (ctx.needs_grad(1)) {
      Tensor db = Tensor::empty(ctx.input(1).shape(), dy.dtype(), dy.device());
      kernels::matmul_fsum(ctx.input(0), true, dy, false, db);
      ctx.accumulate(1, db);
    }
  });
}

}  // namespace tiny
