// Kernel facades: pick cpu:: or cuda:: by the inputs' device (see kernels.hpp).
#include "tapegrad/kernels/kernels.hpp"

#include "tapegrad/config.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/matmul_plan.hpp"
#if TAPEGRAD_WITH_CUDA
#include "tapegrad/cuda/cuda_kernels.hpp"
#endif

namespace tapegrad::kernels {

const char* unary_name(Unary op) {
  return visit_unary(op, []<class F>() { return F::name; });
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
void matmul_fsum(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out) {
  if (a.ndim() != 2 || b.ndim() != 2 || out.ndim() != 2)
    throw Error("[matmul_fsum] takes 2-D matrices, got a " + a.shape().str() + ", b " + b.shape().str() + " and out " +
                out.shape().str());
  if (a.dtype() != DType::f64)
    throw Error(std::string("[matmul_fsum] is an f64 kernel (the reference's arithmetic), got ") + dtype_name(a.dtype()));
  (void)plan_matmul("matmul_fsum", a, ta, b, tb, out);  // the shapes and dtypes fit, or an error naming them
  TG_DISPATCH("matmul_fsum", matmul_fsum(a, ta, b, tb, out), &a, &b, &out);
}
void transpose(const Tensor& x, Tensor& out) { TG_DISPATCH("transpose", transpose(x, out), &x, &out); }
void add_row(const Tensor& x, const Tensor& b, Tensor& out) { TG_DISPATCH("add_row", add_row(x, b, out), &x, &b, &out); }
void sum_rows(const Tensor& x, Tensor& out) { TG_DISPATCH("sum_rows", sum_rows(x, out), &x, &out); }
void sum_all(const Tensor& x, Tensor& out) { TG_DISPATCH("sum", sum_all(x, out), &x, &out); }
void mean_all(const Tensor& x, Tensor& out) { TG_DISPATCH("mean", mean_all(x, out), &x, &out); }
void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out) {
  TG_DISPATCH("gather", gather_rows(table, ids, out), &table, &ids, &out);
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
void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses) {
  TG_DISPATCH("cross_entropy", cross_entropy(logits, targets, probs, losses), &logits, &targets, &probs, &losses);
}
void cross_entropy_reduced(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor& out,
                           bool mean) {
  TG_DISPATCH("cross_entropy", cross_entropy_reduced(logits, targets, probs, losses, out, mean), &logits, &targets,
              &probs, &losses, &out);
}
void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits) {
  TG_DISPATCH("cross_entropy_backward", cross_entropy_backward(probs, targets, dloss, divisor, dlogits), &probs,
              &targets, &dloss, &dlogits);
}

// CPU-only kernels: on any other device an error that names the kernel.
#define TG_CPU_ONLY(op, call, ...)                                                                          \
  do {                                                                                                      \
    const Device device = common_device(op, {__VA_ARGS__});                                                 \
    if (!device.is_cpu())                                                                                   \
      throw DeviceError(std::string("[") + op + "] is a CPU kernel; there is none for " + device.str());   \
    return cpu::call;                                                                                       \
  } while (0)

void cross_entropy_of_rows(const Tensor& table, const Tensor& rows, const Tensor& row_of, const Tensor& targets,
                           Tensor& probs, Tensor& losses) {
  TG_CPU_ONLY("cross_entropy_of_rows", cross_entropy_of_rows(table, rows, row_of, targets, probs, losses), &table,
              &rows, &row_of, &targets, &probs, &losses);
}
void cross_entropy_backward_of_rows(const Tensor& probs, const Tensor& row_of, const Tensor& targets,
                                    const Tensor& dloss, double divisor, Tensor& dlogits, int64_t row_begin) {
  TG_CPU_ONLY("cross_entropy_backward_of_rows",
              cross_entropy_backward_of_rows(probs, row_of, targets, dloss, divisor, dlogits, row_begin), &probs,
              &row_of, &targets, &dloss, &dlogits);
}
#undef TG_CPU_ONLY

void sgd_step(Tensor& param, const Tensor& grad, double lr) {
  TG_DISPATCH("sgd", sgd_step(param, grad, lr), &param, &grad);
}
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s) {
  adamw_step_many({AdamWSlot{&param, &grad, &m, &v}}, s);
}
void adamw_step_many(const std::vector<AdamWSlot>& slots, const AdamWScalars& s) {
  if (slots.empty()) return;
  const Tensor* first = slots.front().param;
  for (const AdamWSlot& slot : slots) {  // one device for all, or an error naming the two
    (void)common_device("adamw", {first, slot.param, slot.grad, slot.m, slot.v});
    if (slot.rows) (void)common_device("adamw", {first, slot.rows, slot.row_ids});
    if (slot.rows && !first->device().is_cpu())
      throw DeviceError("[adamw] a row-sparse gradient is a CPU form; on " + first->device().str() + " pass it dense");
  }
  if (first->device().is_cpu()) {
    if (s.device_step_scalars)
      throw Error("[adamw] device step scalars are for CUDA graphs; a CPU parameter takes its scalars as arguments");
    return cpu::adamw_step_many(slots, s);
  }
#if TAPEGRAD_WITH_CUDA
  cuda::adamw_step_many(slots, s);
#else
  throw DeviceError("[adamw] this tapegrad was built without CUDA");
#endif
}

}  // namespace tapegrad::kernels
