// Kernel facades: pick cpu:: or cuda:: by the inputs' device (see kernels.hpp).
#include "ops/kernels.hpp"

#include "config.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#if TAPEGRAD_WITH_CUDA
#include "cuda/cuda_kernels.hpp"
#endif

namespace tapegrad::kernels {

const char* unary_name(Unary op) {
  switch (op) {
    case Unary::neg: return "neg";
    case Unary::exp: return "exp";
    case Unary::log: return "log";
    case Unary::tanh: return "tanh";
    case Unary::relu: return "relu";
  }
  return "?";
}

const char* binary_name(Binary op) {
  switch (op) {
    case Binary::add: return "add";
    case Binary::sub: return "sub";
    case Binary::mul: return "mul";
    case Binary::div: return "div";
  }
  return "?";
}

Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) first = t;
    else if (!(t->device() == first->device()))
      throw Error(std::string("[") + op + "] inputs are on different devices: " + first->device().str() + " and " +
                  t->device().str() + "; move them with .to(device) first");
  }
  return first ? first->device() : Device::cpu();
}

// TG_DISPATCH(op, call, &tensor, ...): run cuda::call or cpu::call by the tensors' one device;
// `op` names the op in errors ("[add] inputs are on different devices: cpu and cuda:0 ...").
#if TAPEGRAD_WITH_CUDA
#define TG_DISPATCH(op, call, ...)                                                    \
  do {                                                                                \
    if (common_device(op, {__VA_ARGS__}).is_cuda()) return cuda::call;                \
    return cpu::call;                                                                 \
  } while (0)
#else
#define TG_DISPATCH(op, call, ...)                                                    \
  do {                                                                                \
    if (common_device(op, {__VA_ARGS__}).is_cuda())                                  \
      throw DeviceError(std::string("[") + op + "] this tapegrad was built without CUDA"); \
    return cpu::call;                                                                 \
  } while (0)
#endif

void fill(Tensor& out, double value) { TG_DISPATCH("fill", fill(out, value), &out); }
void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor) {
  TG_DISPATCH("fill_from_scalar", fill_from_scalar(out, scalar, divisor), &out, &scalar);
}
void unary(Unary op, const Tensor& x, Tensor& y) { TG_DISPATCH(unary_name(op), unary(op, x, y), &x, &y); }
void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  TG_DISPATCH(unary_name(op), unary_backward(op, x, y, dy, dx), &x, &y, &dy, &dx);
}
void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  TG_DISPATCH(binary_name(op), binary(op, a, b, out), &a, &b, &out);
}
void scale(const Tensor& x, double s, Tensor& y) { TG_DISPATCH("scale", scale(x, s, y), &x, &y); }
void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out) {
  TG_DISPATCH("matmul", matmul(a, ta, b, tb, out), &a, &b, &out);
}
void transpose(const Tensor& x, Tensor& out) { TG_DISPATCH("transpose", transpose(x, out), &x, &out); }
void add_row(const Tensor& x, const Tensor& b, Tensor& out) { TG_DISPATCH("add_row", add_row(x, b, out), &x, &b, &out); }
void sum_rows(const Tensor& x, Tensor& out) { TG_DISPATCH("sum_rows", sum_rows(x, out), &x, &out); }
void sum_all(const Tensor& x, Tensor& out) { TG_DISPATCH("sum", sum_all(x, out), &x, &out); }
void mean_all(const Tensor& x, Tensor& out) { TG_DISPATCH("mean", mean_all(x, out), &x, &out); }
void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out, const Tensor& row_copies) {
  if (common_device("gather", {&table, &ids, &out}).is_cpu()) return cpu::gather_rows(table, ids, out, row_copies);
  if (row_copies.defined()) throw Error("[gather] writing first rows only is a CPU path; CUDA writes every row");
#if TAPEGRAD_WITH_CUDA
  cuda::gather_rows(table, ids, out);
#else
  throw DeviceError("[gather] this tapegrad was built without CUDA");
#endif
}
void fill_row_copies(Tensor& x, const Tensor& row_copies) {
  if (!x.device().is_cpu() || !row_copies.device().is_cpu())
    throw Error("[gather] row copies are filled on the host; this value is on " + x.device().str());
  cpu::fill_row_copies(x, row_copies);
}
void scatter_rows(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite) {
  TG_DISPATCH("gather_backward", scatter_rows(dst, ids, rows, overwrite), &dst, &ids, &rows);
}
void scatter_rows_fresh(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite) {
  TG_DISPATCH("gather_backward", scatter_rows_fresh(dst, ids, rows, overwrite), &dst, &ids, &rows);
}
void softmax_rows(const Tensor& x, Tensor& y) { TG_DISPATCH("softmax", softmax_rows(x, y), &x, &y); }
void softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  TG_DISPATCH("softmax_backward", softmax_rows_backward(y, dy, dx), &y, &dy, &dx);
}
void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor* prob_rows,
                   const Tensor& row_copies) {
  if (prob_rows) *prob_rows = Tensor();
  if (common_device("cross_entropy", {&logits, &targets, &probs, &losses}).is_cpu())
    return cpu::cross_entropy(logits, targets, probs, losses, prob_rows, row_copies);
#if TAPEGRAD_WITH_CUDA
  if (!probs.defined()) probs = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  cuda::cross_entropy(logits, targets, probs, losses);
#else
  throw DeviceError("[cross_entropy] this tapegrad was built without CUDA");
#endif
}
void cross_entropy_reduced(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor& out,
                           bool mean, Tensor* prob_rows, const Tensor& row_copies) {
  if (prob_rows) *prob_rows = Tensor();
  if (common_device("cross_entropy", {&logits, &targets, &probs, &losses, &out}).is_cpu()) {
    cpu::cross_entropy(logits, targets, probs, losses, prob_rows, row_copies);
    if (mean) cpu::mean_all(losses, out);
    else cpu::sum_all(losses, out);
    return;
  }
#if TAPEGRAD_WITH_CUDA
  if (!probs.defined()) probs = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  cuda::cross_entropy_reduced(logits, targets, probs, losses, out, mean);
#else
  throw DeviceError("[cross_entropy] this tapegrad was built without CUDA");
#endif
}
void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits, const Tensor& prob_rows, int64_t row_begin) {
  if (common_device("cross_entropy_backward", {&probs, &targets, &dloss, &dlogits, &prob_rows}).is_cpu())
    return cpu::cross_entropy_backward(probs, prob_rows, targets, dloss, divisor, dlogits, row_begin);
#if TAPEGRAD_WITH_CUDA
  if (prob_rows.defined())  // cuda::cross_entropy never makes a row map
    throw Error("[cross_entropy_backward] CUDA takes probabilities of shape (B, V), not a row map");
  if (row_begin != 0) throw Error("[cross_entropy_backward] CUDA writes every row (row_begin must be 0)");
  cuda::cross_entropy_backward(probs, targets, dloss, divisor, dlogits);
#else
  throw DeviceError("[cross_entropy_backward] this tapegrad was built without CUDA");
#endif
}
void sgd_step(Tensor& param, const Tensor& grad, double lr) {
  TG_DISPATCH("sgd", sgd_step(param, grad, lr), &param, &grad);
}
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s) {
  adamw_step_many({{&param, &grad, &m, &v}}, s);
}
void adamw_step_many(const std::vector<AdamWSlot>& slots, const AdamWScalars& s) {
  if (slots.empty()) return;
  const Tensor* first = slots.front().param;
  for (const AdamWSlot& slot : slots)  // one device for all, or an error naming the two
    (void)common_device("adamw", {first, slot.param, slot.grad, slot.m, slot.v});
  if (first->device().is_cpu()) {
    if (s.device_step_scalars)
      throw Error("[adamw] device step scalars are for CUDA graphs; a CPU parameter takes its scalars as arguments");
    for (const AdamWSlot& slot : slots)
      cpu::adamw_step(*slot.param, *slot.grad, *slot.m, *slot.v, s, slot.zero_blocks, slot.grad_rows, slot.grad_row_elems);
    return;
  }
#if TAPEGRAD_WITH_CUDA
  cuda::adamw_step_many(slots, s);
#else
  throw DeviceError("[adamw] this tapegrad was built without CUDA");
#endif
}

}  // namespace tapegrad::kernels
