// Kernel facades: pick cpu:: or cuda:: by the inputs' device (see kernels.hpp).
#include "tapegrad/kernels/kernels.hpp"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

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
  return visit_binary(op, []<class F>() { return F::name; });
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
  if (a.dtype() == DType::bf16 || b.dtype() == DType::bf16 || out.dtype() == DType::bf16) {  // Note [bf16 elementwise]
    auto narrow = [](DType t) { return t == DType::f32 || t == DType::bf16; };
    if (!(a.shape() == b.shape() && a.shape() == out.shape()) || !narrow(a.dtype()) || !narrow(b.dtype()) ||
        !narrow(out.dtype()))
      throw Error(std::string("[") + binary_name(op) + "] bf16 takes f32 and bf16 of one shape: got " + a.shape().str() +
                  " " + dtype_name(a.dtype()) + ", " + b.shape().str() + " " + dtype_name(b.dtype()) + " into " +
                  out.shape().str() + " " + dtype_name(out.dtype()));
  }
  TG_DISPATCH(binary_name(op), binary(op, a, b, out), &a, &b, &out);
}
void scale(const Tensor& x, double s, Tensor& y) { TG_DISPATCH("scale", scale(x, s, y), &x, &y); }
void binary_backward(Binary op, int k, const Tensor& a, const Tensor& b, const Tensor& y, const Tensor& dy, Tensor& d) {
  TG_DISPATCH(binary_name(op), binary_backward(op, k, a, b, y, dy, d), &a, &b, &y, &dy, &d);
}
void compare(Compare op, const Tensor& a, const Tensor& b, Tensor& out) {
  TG_DISPATCH("compare", compare(op, a, b, out), &a, &b, &out);
}
void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  TG_DISPATCH("where", where(cond, a, b, out), &cond, &a, &b, &out);
}
void copy_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view) {
  TG_DISPATCH("copy", copy_strided(src, src_view, dst, dst_view), &src, &dst);
}
void add_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view) {
  TG_DISPATCH("add_strided", add_strided(src, src_view, dst, dst_view), &src, &dst);
}
void reduce(Reduce op, const Tensor& x, const Shape& kept, Tensor& out) {
  TG_DISPATCH("reduce", reduce(op, x, kept, out), &x, &out);
}
void argmax(const Tensor& x, int axis, Tensor& out) { TG_DISPATCH("argmax", argmax(x, axis, out), &x, &out); }
void gather_axis(const Tensor& x, int axis, const Tensor& ids, Tensor& out) {
  TG_DISPATCH("gather", gather_axis(x, axis, ids, out), &x, &ids, &out);
}
void scatter_add_axis(Tensor& dst, int axis, const Tensor& ids, const Tensor& src) {
  TG_DISPATCH("gather_backward", scatter_add_axis(dst, axis, ids, src), &dst, &ids, &src);
}
void index_select(const Tensor& x, int axis, const Tensor& ids, Tensor& out) {
  TG_DISPATCH("index_select", index_select(x, axis, ids, out), &x, &ids, &out);
}
void index_add(Tensor& dst, int axis, const Tensor& ids, const Tensor& src) {
  TG_DISPATCH("index_select_backward", index_add(dst, axis, ids, src), &dst, &ids, &src);
}
void log_softmax_rows(const Tensor& x, Tensor& y) { TG_DISPATCH("log_softmax", log_softmax_rows(x, y), &x, &y); }
void log_softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  TG_DISPATCH("log_softmax", log_softmax_rows_backward(y, dy, dx), &y, &dy, &dx);
}
void nll_rows(const Tensor& lp, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count) {
  TG_DISPATCH("cross_entropy", nll_rows(lp, targets, ignore_index, losses, count), &lp, &targets, &losses, &count);
}
void cross_entropy_rows(const Tensor& z, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count,
                        Tensor& dz) {
  const bool grad = dz.defined();
  if (grad && (dz.shape() != z.shape() || (dz.dtype() != z.dtype() && !(z.dtype() == DType::f32 && dz.dtype() == DType::bf16))))
    throw Error("[cross_entropy] the gradient " + dz.shape().str() + " " + dtype_name(dz.dtype()) +
                " does not fit the logits " + z.shape().str() + " " + dtype_name(z.dtype()) +
                ": it needs their shape and dtype (bf16 for f32 logits)");
  const DType stats = z.dtype() == DType::bf16 ? DType::f32 : z.dtype();
  if (losses.dtype() != stats || count.dtype() != stats)
    throw Error("[cross_entropy] losses " + std::string(dtype_name(losses.dtype())) + " and count " +
                dtype_name(count.dtype()) + " do not fit " + dtype_name(z.dtype()) + " logits: they need " +
                dtype_name(stats));
  TG_DISPATCH("cross_entropy", cross_entropy_rows(z, targets, ignore_index, losses, count, dz), &z, &targets, &losses,
              &count, &dz);
}
void nll_log_softmax_backward(const Tensor& lp, const Tensor& targets, int64_t ignore_index, const Tensor& dloss,
                              const Tensor& divisor, Tensor& dlogits) {
  TG_DISPATCH("cross_entropy_backward", nll_log_softmax_backward(lp, targets, ignore_index, dloss, divisor, dlogits),
              &lp, &targets, &dloss, &divisor, &dlogits);
}
void cast(const Tensor& x, Tensor& out) { TG_DISPATCH("to", cast(x, out), &x, &out); }
void clamp(const Tensor& x, double lo, double hi, Tensor& y) { TG_DISPATCH("clamp", clamp(x, lo, hi, y), &x, &y); }
void clamp_backward(const Tensor& x, double lo, double hi, const Tensor& dy, Tensor& dx) {
  TG_DISPATCH("clamp", clamp_backward(x, lo, hi, dy, dx), &x, &dy, &dx);
}
void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, bool accumulate) {
  TG_DISPATCH("matmul", matmul(a, ta, b, tb, out, accumulate), &a, &b, &out);
}
void matmul_bias(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const char* op = "linear";
  if (x.ndim() != 2 || w.ndim() != 2 || bias.ndim() != 1 || out.ndim() != 2 || x.dim(1) != w.dim(1) ||
      bias.dim(0) != w.dim(0) || out.dim(0) != x.dim(0) || out.dim(1) != w.dim(0))
    throw Error(std::string("[") + op + "] x " + x.shape().str() + " @ w " + w.shape().str() + "^T + bias " +
                bias.shape().str() + " does not make out " + out.shape().str());
  if (x.dtype() != DType::bf16 || w.dtype() != DType::bf16 || out.dtype() != DType::bf16 ||
      (bias.dtype() != DType::f32 && bias.dtype() != DType::bf16))
    throw Error(std::string("[") + op + "] the bias epilogue takes bf16 x, w and out and an f32 or bf16 bias, got " +
                dtype_name(x.dtype()) + ", " + dtype_name(w.dtype()) + ", " + dtype_name(out.dtype()) + " and " +
                dtype_name(bias.dtype()));
  Tensor sums = Tensor::empty(out.shape(), DType::f32, out.device()), b32 = bias;
#if TAPEGRAD_WITH_CUDA
  // cuBLASLt rounds to bf16 in the epilogue with a bf16 bias; an f32 bias it adds to f32 sums, cast
  // after (Note [bias in the epilogue])
  if (common_device(op, {&x, &w, &bias, &out}).is_cuda()) {
    if (bias.dtype() == DType::bf16 && cuda::matmul_bias(x, w, bias, out)) return;
    if (bias.dtype() == DType::f32 && cuda::matmul_bias(x, w, bias, sums)) {
      cast(sums, out);
      return;
    }
  }
#else
  (void)common_device(op, {&x, &w, &bias, &out});
#endif
  if (bias.dtype() != DType::f32) {
    b32 = Tensor::empty(bias.shape(), DType::f32, bias.device());
    cast(bias, b32);
  }
  matmul(x, false, w, true, sums);
  add_row(sums, b32, sums);
  cast(sums, out);
}

void linear_rows(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  if (bias.defined() && out.dtype() == DType::bf16) {
    matmul_bias(x, w, bias, out);
    return;
  }
  matmul(x, false, w, true, out);
  if (bias.defined()) add_row(out, bias, out);
}

namespace {

bool mlp_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16; }

}  // namespace

void matmul_activation(Unary f, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& act) {
  const char* op = "mlp";
  const bool with_bias = bias.defined();
  if (x.ndim() != 2 || w.ndim() != 2 || pre.ndim() != 2 || !(act.shape() == pre.shape()) || x.dim(1) != w.dim(1) ||
      pre.dim(0) != x.dim(0) || pre.dim(1) != w.dim(0) || (with_bias && (bias.ndim() != 1 || bias.dim(0) != w.dim(0))))
    throw Error(std::string("[") + op + "] x " + x.shape().str() + " @ w " + w.shape().str() + "^T" +
                (with_bias ? " + bias " + bias.shape().str() : std::string()) + " does not make pre " +
                pre.shape().str() + " and act " + act.shape().str());
  const DType t = x.dtype();
  if (!mlp_dtype(t) || w.dtype() != t || pre.dtype() != t || act.dtype() != t ||
      (with_bias && bias.dtype() != t && !(t == DType::bf16 && bias.dtype() == DType::f32)))
    throw Error(std::string("[") + op + "] the activation's product takes x, w, pre and act of one dtype (f64, f32 or "
                "bf16) and a bias of theirs (or f32 with bf16), got " + dtype_name(x.dtype()) + ", " +
                dtype_name(w.dtype()) + ", " + dtype_name(pre.dtype()) +
                (with_bias ? std::string(", ") + dtype_name(act.dtype()) + " and " + dtype_name(bias.dtype())
                           : std::string(" and ") + dtype_name(act.dtype())));
  const Device device = common_device(op, {&x, &w, &bias, &pre, &act});
#if TAPEGRAD_WITH_CUDA
  if (device.is_cuda() && t == DType::bf16 && f == Unary::gelu_tanh && (!with_bias || bias.dtype() == DType::bf16) &&
      cuda::matmul_gelu(x, w, bias, pre, act))
    return;
#else
  (void)device;
#endif
  linear_rows(x, w, bias, pre);  // linear's kernels, then f's: the unfused ops' bits
  unary(f, pre, act);
}

void matmul_activation_backward(Unary f, const Tensor& dy, const Tensor& w, const Tensor& pre, const Tensor& act,
                                Tensor& dpre) {
  const char* op = "mlp";
  if (dy.ndim() != 2 || w.ndim() != 2 || pre.ndim() != 2 || !(act.shape() == pre.shape()) ||
      !(dpre.shape() == pre.shape()) || dy.dim(1) != w.dim(0) || pre.dim(0) != dy.dim(0) || pre.dim(1) != w.dim(1))
    throw Error(std::string("[") + op + "] dy " + dy.shape().str() + " @ w " + w.shape().str() + " does not fit pre " +
                pre.shape().str() + ", act " + act.shape().str() + " and dpre " + dpre.shape().str());
  const DType t = dy.dtype();
  if (!mlp_dtype(t) || w.dtype() != t || pre.dtype() != t || act.dtype() != t || dpre.dtype() != t)
    throw Error(std::string("[") + op + "] the activation's backward takes dy, w, pre, act and dpre of one dtype (f64, "
                "f32 or bf16), got " + dtype_name(dy.dtype()) + ", " + dtype_name(w.dtype()) + ", " +
                dtype_name(pre.dtype()) + ", " + dtype_name(act.dtype()) + " and " + dtype_name(dpre.dtype()));
  const Device device = common_device(op, {&dy, &w, &pre, &act, &dpre});
#if TAPEGRAD_WITH_CUDA
  if (device.is_cuda() && t == DType::bf16 && f == Unary::gelu_tanh && cuda::matmul_dgelu(dy, w, pre, dpre)) return;
#else
  (void)device;
#endif
  Tensor dact = Tensor::empty(pre.shape(), t, pre.device());  // linear's dx product, then f's backward
  matmul(dy, false, w, false, dact);
  unary_backward(f, pre, act, dact, dpre);
}

void matmul_weight_bias_grad(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  const char* op = "linear";
  if (dy.ndim() != 2 || x.ndim() != 2 || dw.ndim() != 2 || db.ndim() != 1 || dy.dim(0) != x.dim(0) ||
      dw.dim(0) != dy.dim(1) || dw.dim(1) != x.dim(1) || db.dim(0) != dy.dim(1))
    throw Error(std::string("[") + op + "] dy " + dy.shape().str() + " and x " + x.shape().str() +
                " do not make the weight's gradient " + dw.shape().str() + " and the bias's " + db.shape().str());
  if (dy.dtype() != DType::bf16 || x.dtype() != DType::bf16 || dw.dtype() != DType::f32 || db.dtype() != DType::f32)
    throw Error(std::string("[") + op + "] the bias-gradient epilogue takes bf16 dy and x and f32 gradients, got " +
                dtype_name(dy.dtype()) + ", " + dtype_name(x.dtype()) + ", " + dtype_name(dw.dtype()) + " and " +
                dtype_name(db.dtype()));
#if TAPEGRAD_WITH_CUDA
  if (common_device(op, {&dy, &x, &dw, &db}).is_cuda() && cuda::matmul_weight_bias_grad(dy, x, dw, db)) return;
#else
  (void)common_device(op, {&dy, &x, &dw, &db});
#endif
  matmul(dy, true, x, false, dw);
  Tensor wide = Tensor::empty(dy.shape(), DType::f32, dy.device());
  cast(dy, wide);
  sum_rows(wide, db);
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
    if (slot.copy) {
      (void)common_device("adamw", {first, slot.copy});
      if (slot.param->dtype() != DType::f32 || slot.copy->dtype() != DType::bf16 ||
          slot.copy->shape() != slot.param->shape())
        throw Error("[adamw] a weight's bf16 copy must be bf16 of its shape, the weight f32: got " +
                    slot.copy->shape().str() + " " + dtype_name(slot.copy->dtype()) + " for " +
                    slot.param->shape().str() + " " + dtype_name(slot.param->dtype()));
    }
  }
  if (s.grad_scale.defined() &&
      (s.grad_scale.dtype() != DType::f64 || s.grad_scale.numel() != 1 || !(s.grad_scale.device() == first->device())))
    throw Error("[adamw] the gradients' scale must be a () f64 tensor on " + first->device().str() + ", got " +
                s.grad_scale.shape().str() + " " + dtype_name(s.grad_scale.dtype()) + " on " +
                s.grad_scale.device().str());
  if (first->device().is_cpu()) {
    if (s.device_step_scalars)
      throw Error("[adamw] device step scalars are for CUDA graphs; a CPU parameter takes its scalars as arguments");
    if (!s.grad_scale.defined()) {
      cpu::adamw_step_many(slots, s);
    } else {  // the CPU scales copies of the gradients (dense, or a sparse one's rows) first: the same bits
      std::vector<Tensor> scaled;
      scaled.reserve(slots.size());
      std::vector<AdamWSlot> with = slots;
      for (AdamWSlot& slot : with) {
        const Tensor*& g = slot.rows ? slot.rows : slot.grad;
        scaled.push_back(g->clone());
        cpu::scale_many_by({&scaled.back()}, s.grad_scale);
        g = &scaled.back();
      }
      AdamWScalars plain = s;
      plain.grad_scale = Tensor();
      cpu::adamw_step_many(with, plain);
    }
    for (const AdamWSlot& slot : slots)  // the CPU rounds the copies after the update; CUDA's kernel as it writes
      if (slot.copy) cast(*slot.param, *slot.copy);
    return;
  }
#if TAPEGRAD_WITH_CUDA
  cuda::adamw_step_many(slots, s);
#else
  throw DeviceError("[adamw] this tapegrad was built without CUDA");
#endif
}

// ---- convolution and pooling
void im2col(const Tensor& x, const Window2d& win, Tensor& cols) { TG_DISPATCH("im2col", im2col(x, win, cols), &x, &cols); }
void col2im(const Tensor& cols, const Window2d& win, Tensor& dx) { TG_DISPATCH("col2im", col2im(cols, win, dx), &cols, &dx); }
void conv2d_columns_to_planes(const Tensor& cols, const Tensor& bias, Tensor& out) {
  TG_DISPATCH("conv2d", conv2d_columns_to_planes(cols, bias, out), &cols, &bias, &out);
}
void conv2d_planes_to_rows(const Tensor& dy, Tensor& rows) {
  TG_DISPATCH("conv2d_backward", conv2d_planes_to_rows(dy, rows), &dy, &rows);
}
void max_pool2d(const Tensor& x, const Window2d& win, Tensor& out, Tensor& indices) {
  TG_DISPATCH("max_pool2d", max_pool2d(x, win, out, indices), &x, &out, &indices);
}
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Window2d& win, Tensor& dx) {
  TG_DISPATCH("max_pool2d_backward", max_pool2d_backward(dy, indices, win, dx), &dy, &indices, &dx);
}
void avg_pool2d(const Tensor& x, const Window2d& win, Tensor& out) {
  TG_DISPATCH("avg_pool2d", avg_pool2d(x, win, out), &x, &out);
}
void avg_pool2d_backward(const Tensor& dy, const Window2d& win, Tensor& dx) {
  TG_DISPATCH("avg_pool2d_backward", avg_pool2d_backward(dy, win, dx), &dy, &dx);
}

// ---- stateful optimizers and gradient transforms
void sgd_momentum_step(Tensor& param, const Tensor& grad, Tensor& buf, const SGDScalars& s) {
  if (s.momentum != 0 && !(buf.defined() && buf.numel() == param.numel() && buf.dtype() == param.dtype()))
    throw Error("[sgd] momentum needs a buffer of the parameter's size and dtype, " + param.shape().str() + " " +
                dtype_name(param.dtype()));
  TG_DISPATCH("sgd", sgd_momentum_step(param, grad, buf, s), &param, &grad, &buf);
}
// ---- multi-tensor gradient transforms
namespace {

// Each of xs defined, f32 or f64, and on the device of `first` (or of xs[0]); else an error naming
// the tensor by its index in xs.
template <class P>
void check_float_tensors(const char* op, const std::vector<P>& xs, const Tensor* first) {
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = *xs[i];
    const std::string which = std::string("[") + op + "] tensor " + std::to_string(i) + " of " +
                              std::to_string(xs.size());
    if (!x.defined()) throw Error(which + " is undefined");
    if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
      throw Error(which + " is " + dtype_name(x.dtype()) + "; " + op + " takes f32 and f64 tensors");
    (void)common_device(op, {first ? first : xs.front(), &x});
  }
}

}  // namespace

void sum_squares_chunks(const std::vector<const Tensor*>& xs, Tensor& out) {
  check_float_tensors("sum_squares_chunks", xs, &out);
  int64_t chunks = 0;
  for (const Tensor* x : xs) chunks += sum_squares_chunk_count(x->numel());
  if (!out.defined() || out.dtype() != DType::f64 || out.ndim() != 1 || out.numel() != chunks) {
    const std::string got = out.defined() ? out.shape().str() + " " + dtype_name(out.dtype()) : "undefined";
    throw Error("[sum_squares_chunks] out is " + got + ": the " + std::to_string(xs.size()) + " tensors' chunks of " +
                std::to_string(kSquaresChunk) + " go into a (" + std::to_string(chunks) + ",) f64 tensor");
  }
  if (chunks == 0) return;
  TG_DISPATCH("sum_squares_chunks", sum_squares_chunks(xs, out), &out);
}

void sum_squares(const Tensor& x, Tensor& out, int64_t slot) {
  if (!out.defined() || out.dtype() != DType::f64 || out.ndim() != 1 || slot < 0 || slot >= out.numel())
    throw Error("[sum_squares] slot " + std::to_string(slot) + " of " +
                (out.defined() ? out.shape().str() + " " + dtype_name(out.dtype()) : std::string("undefined")) +
                ": the sums go into a 1-D f64 tensor with that slot");
  check_float_tensors("sum_squares", std::vector<const Tensor*>{&x}, &out);
  Tensor total = out.flat_view(slot, Shape{});
  const int64_t chunks = sum_squares_chunk_count(x.numel());
  if (chunks == 0) return total.zero_();
  Tensor sums = Tensor::empty(Shape{chunks}, DType::f64, x.device());
  sum_squares_chunks({&x}, sums);
  sum_all(sums, total);
  out.mark_modified();
}

namespace {

// Each tensor scaled once: two tensors on the same bytes (a reshape of the other) would be scaled
// twice, and on CUDA by two blocks at once.
void need_distinct_bytes(const char* op, const std::vector<Tensor*>& xs) {
  std::vector<std::pair<const void*, size_t>> bytes;
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i]->numel() > 0) bytes.emplace_back(xs[i]->raw_data(), i);
  std::sort(bytes.begin(), bytes.end());
  const auto shared =
      std::adjacent_find(bytes.begin(), bytes.end(), [](const auto& a, const auto& b) { return a.first == b.first; });
  if (shared != bytes.end())
    throw Error(std::string("[") + op + "] tensors " + std::to_string(shared->second) + " and " +
                std::to_string(std::next(shared)->second) + " share their bytes; list each tensor once");
}

}  // namespace

void scale_many(const std::vector<Tensor*>& xs, double s) {
  if (xs.empty()) return;
  check_float_tensors("scale_many", xs, nullptr);
  need_distinct_bytes("scale_many", xs);
  TG_DISPATCH("scale_many", scale_many(xs, s), xs.front());
}

namespace {
void need_f64_scalar(const char* op, const char* what, const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::f64 || t.ndim() != 0)
    throw Error(std::string("[") + op + "] " + what + " must be a () f64 tensor, got " +
                (t.defined() ? t.shape().str() + " " + dtype_name(t.dtype()) : std::string("undefined")));
}
}  // namespace

void scale_many_by(const std::vector<Tensor*>& xs, const Tensor& factor) {
  need_f64_scalar("scale_many_by", "factor", factor);
  if (xs.empty()) return;
  check_float_tensors("scale_many_by", xs, &factor);
  need_distinct_bytes("scale_many_by", xs);
  TG_DISPATCH("scale_many_by", scale_many_by(xs, factor), xs.front(), &factor);
}

void clip_factor(const Tensor& sumsq, double max_norm, Tensor& norm, Tensor& factor) {
  need_f64_scalar("clip_factor", "sumsq", sumsq);
  need_f64_scalar("clip_factor", "norm", norm);
  need_f64_scalar("clip_factor", "factor", factor);
  TG_DISPATCH("clip_factor", clip_factor(sumsq, max_norm, norm, factor), &sumsq, &norm, &factor);
}

}  // namespace tapegrad::kernels
