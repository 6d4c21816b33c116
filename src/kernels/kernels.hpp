// Kernel facades: one function per kernel family, dispatching on the inputs' device to cpu:: or
// cuda:: (src/kernels/cpu/cpu_kernels.hpp, src/cuda/cuda_kernels.hpp; the same signatures on both).
//
// Rules: a kernel writes into outputs its caller allocated (same device as the inputs); inputs on
// different devices are an error naming the op and both devices; a device without a kernel for a
// dtype says so ("[gather_backward] no CUDA kernel for bf16"). Backward rules and optimizers call
// these facades, never a device directly, so a rule written once runs everywhere.
//
// Arithmetic order: f64 reductions are correctly rounded (like Python's math.fsum) on every
// device, and so are f64 exp and log (src/kernels/cr_math.hpp), so the tiny step matches its Python
// reference and CPU and CUDA agree bit for bit. Matrix products are the exception: matmul is BLAS's
// arithmetic (below); matmul_fsum is the correctly rounded one.
// f32 reductions run in a fixed order (deterministic, not necessarily equal across devices).
#pragma once

#include "tapegrad/kernels/binary_ops.hpp"
#include "tapegrad/kernels/optim_ops.hpp"
#include "tapegrad/kernels/strided.hpp"
#include "tapegrad/kernels/unary_ops.hpp"
#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::kernels {

const char* unary_name(Unary op);
const char* binary_name(Binary op);

// Throws "[op] inputs are on different devices: cpu and cuda:0" unless all defined tensors share one.
Device common_device(const char* op, std::initializer_list<const Tensor*> tensors);

// ---- elementwise (any shape, same numel; f64 / f32)
void fill(Tensor& out, double value);
// out (any) = scalar (shape ()) / divisor everywhere, computed in double and rounded to out's dtype;
// read on the device, so a backward rule needs no host sync (sum's and mean's backward).
void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor);
void unary(Unary op, const Tensor& x, Tensor& y);  // y = f(x), f the op's functor (unary_ops.hpp)
// dx = dy * f'(x) given x and y = f(x): the functor's backward
void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx);
// out = a op b (binary_ops.hpp); a and b broadcast to out's shape (NumPy rules; equal shapes are
// the flat, fastest case).
// bf16 (Note [bf16 elementwise] in cpu/elementwise.cpp): unary ops of bf16 tensors compute in f32
// and round once; a binary op takes any mix of f32 and bf16 among a, b and out, of equal shapes.
void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out);
void scale(const Tensor& x, double s, Tensor& y);  // y = x * s

// ---- N-d kernels over strided walks (strided.hpp, Note [strided walks])
// d (dy's shape) = the gradient of a op b reaching operand k (0: a, 1: b) at each element of y =
// a op b, before any sum over broadcast axes (the front-end's reduce).
void binary_backward(Binary op, int k, const Tensor& a, const Tensor& b, const Tensor& y, const Tensor& dy, Tensor& d);
void compare(Compare op, const Tensor& a, const Tensor& b, Tensor& out);       // out u8, a and b broadcast
void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);  // cond u8; all broadcast to out
// The elements of src seen through src_view (which broadcasts to dst_view.shape) written into dst
// through dst_view; any dtype (src's and dst's must be equal).
void copy_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view);
// The same with dst's elements added to: dst[j] = dst[j] + src[i] for each pair the views walk, each
// sum rounded once in dst's dtype as binary's add rounds it (f64, f32; bf16 in f32, rounded once);
// src's and dst's dtypes equal, dst_view naming each element at most once. The engine's door for a
// contribution to part of a gradient (BackwardContext::accumulate with a region).
void add_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view);
enum class Reduce : uint8_t { sum, mean, max, min };
// out (numel of kept) = x (contiguous) reduced over the axes where `kept` has extent 1 and x does
// not, in row-major order over those axes, accumulated in double; max and min propagate NaN.
void reduce(Reduce op, const Tensor& x, const Shape& kept, Tensor& out);
void argmax(const Tensor& x, int axis, Tensor& out);  // out i64 (x's shape without axis): first largest, NaN largest
// x (outer, n, inner), ids (outer, k, inner) i32/i64 -> out (outer, k, inner) = x[o, ids[o, j, i], i]
void gather_axis(const Tensor& x, int axis, const Tensor& ids, Tensor& out);
void scatter_add_axis(Tensor& dst, int axis, const Tensor& ids, const Tensor& src);  // gather_axis's adjoint: dst += ...
// x (outer, n, inner), ids (k,) -> out (outer, k, inner) = x[:, ids, :]
void index_select(const Tensor& x, int axis, const Tensor& ids, Tensor& out);
void index_add(Tensor& dst, int axis, const Tensor& ids, const Tensor& src);  // index_select's adjoint: dst += ...
void cast(const Tensor& x, Tensor& out);  // out = x converted to out's dtype (f64 f32 bf16 i32 i64 u8)
void clamp(const Tensor& x, double lo, double hi, Tensor& y);  // clamp_of (binary_ops.hpp)
void clamp_backward(const Tensor& x, double lo, double hi, const Tensor& dy, Tensor& dx);

// ---- linear algebra
// out (..., n, m) = op(a) (..., n, k) @ op(b) (..., k, m), op = transposing the last two axes when
// the flag is set (a stored (..., k, n), b (..., m, k)). The batch axes (all but the last two) of
// a, b and out line up from the right and broadcast (NumPy's rule: a missing axis or one of size 1
// repeats); every product of the broadcast batch lands in its out matrix, and the products that
// land in the same one (along an axis where out has size 1 or none and a or b more) are summed.
// That is a batched product and both its gradients: da = sum over b's repeats of dy @ b^T. f32 and
// f64, or bf16 operands with an f32 or bf16 out (autocast's products: each product of two bf16
// values is exact in f32, the sums are f32's, a bf16 out is the f32 result rounded once; the CPU
// widens the operands and runs its f32 product), through BLAS on the CPU (OpenBLAS, Note [BLAS threads] in cpu/linalg.cpp) and cuBLAS on
// CUDA: their rounding (fused multiply-adds, their own blocking), the same bits on every run of one
// machine, and on the CPU for every thread count. Shapes that do not fit are an error naming them.
// With accumulate, out += the product instead (BLAS's and cuBLAS's beta = 1: each out value plus
// its sum, rounded once where the library rounds it; a bf16 out widened, added to and rounded).
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out,
            bool accumulate = false);
// out (n, m) bf16 = x (n, k) @ w (m, k)^T + bias (m,), for bf16 x and w and an f32 or bf16 bias:
// the products summed in f32, the bias added to the sums and the result rounded once, as
// torch.autocast's linear with a bias. CUDA: one cuBLASLt GEMM with a bias epilogue (Note [bias in
// the epilogue] in src/cuda/linalg.cu, where cuBLASLt has a kernel for it; with an f32 bias it writes
// f32 sums and a cast rounds them); else matmul into f32 sums, add_row and cast. All contiguous; shapes that do not fit are an error naming them.
void matmul_bias(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
// The gradients of matmul_bias's weight and bias: dw (m, k) f32 = dy (n, m)^T @ x (n, k) and
// db (m,) f32 = the column sums of dy, for bf16 dy and x. CUDA: one cuBLASLt GEMM whose BGRADB
// epilogue sums dy's columns as it reads them, where cuBLASLt has a kernel for it; else matmul and
// sum_rows over dy widened. All contiguous; shapes that do not fit are an error naming them.
void matmul_weight_bias_grad(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db);
// linear's forward: out (n, m) = x (n, k) @ w (m, k)^T + bias (m,) (undefined: none), x, w and out
// of one dtype (f64, f32 or bf16; the bias theirs, or f32 with bf16): matmul and add_row, or for a
// bf16 out with a bias matmul_bias (the bias added to the f32 sums before the one rounding).
void linear_rows(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
// The first product of an MLP and its activation (ops::mlp, Note [the MLP's epilogues] in
// src/ops/fused/mlp.cpp): pre (n, h) = x (n, k) @ w (h, k)^T (+ bias (h,)), act (n, h) = f(pre).
// CUDA, bf16, f = gelu_tanh, no bias or a bf16 one: one cuBLASLt GEMM with the GELU_AUX
// (GELU_AUX_BIAS) epilogue, where cuBLASLt has a kernel for it: act = f of the f32 sums (plus the
// bias), pre = those sums (its aux matrix), each rounded once. (An f32 bias, autocast's, has no
// such kernel with bf16 results: cuBLASLt 13.0 refused BIAS so, Note [bias in the epilogue].)
// Else linear_rows and then unary: the unfused ops' bits, in every dtype (f64, f32, or bf16 with an
// f32 or bf16 bias). All contiguous; shapes that do
// not fit are an error naming them.
void matmul_activation(Unary f, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& act);
// Its backward through f and the product after it: dpre (n, h) = (dy (n, m) @ w (m, h)) * f'(pre),
// act = f(pre) (read by the ops whose derivative is written with y). CUDA, bf16, f = gelu_tanh: one
// cuBLASLt GEMM with the DGELU epilogue reading pre (f' scales the f32 sums, one rounding), where
// cuBLASLt has a kernel for it; else matmul into dact, then unary_backward (the unfused ops' bits).
void matmul_activation_backward(Unary f, const Tensor& dy, const Tensor& w, const Tensor& pre, const Tensor& act,
                                Tensor& dpre);
// out (n, m) = op(a) @ op(b), 2-D and f64 only, each cell the correctly rounded sum of its k
// products, each product rounded on its own: the Python reference's math.fsum over them
// (docs/tiny_step.md, "Arithmetic"); the same bits on every device. One exact sum per cell, so
// slow: the tiny step's product, not a model's.
void matmul_fsum(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out);
void transpose(const Tensor& x, Tensor& out);                    // (n, m) -> (m, n)
void add_row(const Tensor& x, const Tensor& b, Tensor& out);     // x (n, m) + b (m,) -> (n, m); out may be x
void sum_rows(const Tensor& x, Tensor& out);                     // x (n, m) -> (m,): column sums

// ---- log-softmax rows and the library's cross-entropy (Note [log-sum-exp rows] in cpu/log_softmax.cpp)
void log_softmax_rows(const Tensor& x, Tensor& y);                               // (n, m), along m
void log_softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx);  // dx = dy - exp(y) * sum(dy)
// losses (N,) = -lp[i, t_i] (0 where t_i == ignore_index); count () = the rows not ignored, in lp's dtype
void nll_rows(const Tensor& lp, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count);
// dlogits (N, V) = (dloss / divisor) * (exp(lp) - onehot(t)) per row, zero rows where ignored;
// dloss () or (N,); divisor a () tensor on the device or undefined (1)
void nll_log_softmax_backward(const Tensor& lp, const Tensor& targets, int64_t ignore_index, const Tensor& dloss,
                              const Tensor& divisor, Tensor& dlogits);
// The loss and its gradient in one pass over logits z (N, V), for linear_cross_entropy's blocks:
// losses (N,) = -lp[i, t_i] and, where dz is defined, dz (N, V) = exp(lp) - onehot(t) (softmax
// minus the target, the gradient of each row's loss), lp = log_softmax(z) with Note [log-sum-exp
// rows]' arithmetic; 0 and zero rows where t_i == ignore_index; count () = the rows not ignored,
// in z's dtype. z f32 or f64, or bf16 (autocast's logits: computed in f32, the losses and the count
// f32); dz z's dtype, or bf16 for an f32 z (autocast: the products' operand).
void cross_entropy_rows(const Tensor& z, const Tensor& targets, int64_t ignore_index, Tensor& losses, Tensor& count,
                        Tensor& dz);

// ---- reductions over every element -> shape ()
void sum_all(const Tensor& x, Tensor& out);
void mean_all(const Tensor& x, Tensor& out);  // sum / n (a division, as the reference does)

// ---- rows: gather, scatter, softmax, cross-entropy
// out (B, d) = table (V, d)[ids (B,)]; ids i32 or i64; an out-of-range id is an error naming it.
void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out);
// dst (V, d)[ids[i]] += rows[i] for i = 0..B-1 in order (overwrite: = rows[i]; the last one wins).
void scatter_rows(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite);
// The same into a gradient that does not exist yet: dst (uninitialized) = zeros, then scatter_rows.
// One pass where a device can (the rows no id touches are written as zeros by the scatter).
void scatter_rows_fresh(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite);
void softmax_rows(const Tensor& x, Tensor& y);                                  // (n, m), along m
void softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx);     // dx = y * (dy - sum(dy*y))
// probs (B, V) = softmax(logits); losses (B,) = -log(probs[i, t_i]) (f64) or logsumexp - logit (f32).
void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses);
// cross_entropy, then out () = mean_all(losses) (mean) or sum_all(losses), with their arithmetic;
// one launch where a device fuses the two (CUDA, f32).
void cross_entropy_reduced(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor& out,
                           bool mean);
// dlogits (B, V)[i, j] = ((probs[i, j] - [j == t_i]) / divisor) * g, g = dloss (shape ()) or
// dloss[i] (shape (B,)). dlogits may be probs itself (each element is read before it is written).
void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits);

// ---- CPU-only kernels: the distinct-row forms the fused embedding_cross_entropy takes on the host
// (src/ops/fused/embedding_cross_entropy.cpp). On another device each is an error that names it;
// the op takes the (B, V) kernels above there.
// For logits rows i = table[rows[row_of[i]]]: probs (k, V) = softmax of the k distinct table rows
// `rows` (k,) i32, losses (B,) as cross_entropy gives them for the B logits rows; row_of (B,) i32.
void cross_entropy_of_rows(const Tensor& table, const Tensor& rows, const Tensor& row_of, const Tensor& targets,
                           Tensor& probs, Tensor& losses);
// dlogits (r, V) = rows row_begin .. row_begin + r - 1 of cross_entropy_backward's result, each
// from its distinct row of probs (k, V): row i reads probs[row_of[i]].
void cross_entropy_backward_of_rows(const Tensor& probs, const Tensor& row_of, const Tensor& targets,
                                    const Tensor& dloss, double divisor, Tensor& dlogits, int64_t row_begin);

// ---- optimizer updates, in place
void sgd_step(Tensor& param, const Tensor& grad, double lr);  // p = p - lr * g
// The AdamW update (see src/optim/adamw.hpp): f32 parameters in fp32 arithmetic, in bob's order
// (docs/bob.md); f64 parameters the same expressions in fp64 from the scalars' f64 forms.
struct AdamWScalars {
  float lr, beta1, beta2, eps, weight_decay;
  float step_size, bc2_sqrt;  // (float)(lr / bc1), (float)sqrt(bc2), computed in fp64 by the caller
  // the same in fp64, for f64 parameters: the config's values and lr / bc1, sqrt(bc2) unrounded
  double lr64 = 0, beta1_64 = 0, beta2_64 = 0, eps64 = 0, weight_decay64 = 0, step_size64 = 0, bc2_sqrt64 = 0;
  // For CUDA graphs: when set, the kernel reads step_size, bc2_sqrt and the decay factor
  // (adamw_decay) from these three floats in the parameter's device memory instead, so a replayed
  // update uses the scalars written before the replay (AdamW::write_schedule). CUDA only.
  const float* device_step_scalars = nullptr;
  // When defined, a () f64 tensor on the parameters' device (clip_grad_factor's coefficient): each
  // gradient element is multiplied by it, rounded to the gradient's dtype, as it is read, which
  // gives the update scale_many_by(grads, grad_scale) and then AdamW would (the gradients are left
  // as they are). Read when the kernel runs, so a captured update reads the value written before.
  Tensor grad_scale = Tensor();
};
// The f32 update's decay factor, 1 - lr * weight_decay in fp32 (one rounding each), as both devices compute it.
inline float adamw_decay(const AdamWScalars& s) { return 1.0f - s.lr * s.weight_decay; }
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s);
// The same update of several parameters (all on one device): on CUDA one launch per 16 of them,
// as fused optimizers do ("multi-tensor apply"); on the CPU adamw_step on each in turn.
struct AdamWSlot {
  Tensor* param;
  const Tensor* grad;  // dense, or undefined when the gradient is row-sparse (below)
  Tensor* m;
  Tensor* v;
  // CPU, optional: one flag per block of adamw_zero_block elements, 1 where m and v are known to
  // be all +0; the kernel reads and updates them (Note [adamw zero blocks] in cpu/elementwise.cpp).
  uint8_t* zero_blocks = nullptr;
  // CPU: a row-sparse gradient instead of grad, the param (n, d) being +0 outside rows (k, d) at
  // row_ids (k,) (distinct): the update of every other row is the one a +0 gradient gives.
  const Tensor* row_ids = nullptr;
  const Tensor* rows = nullptr;
  // Optional, f32 parameters: a bf16 tensor of the param's shape that receives the updated param
  // rounded to bf16, the bits kernels::cast gives (Note [bf16 weight copies] in ops/autocast.hpp).
  Tensor* copy = nullptr;
};
inline constexpr int64_t adamw_zero_block = 256;
void adamw_step_many(const std::vector<AdamWSlot>& slots, const AdamWScalars& s);

// ---- stateful optimizers and gradient transforms (src/optim/sgd.hpp, src/optim/clip.hpp)
// torch.optim.SGD's update of one parameter in place, in its dtype (f32 or f64): SGDElement's math
// (optim_ops.hpp) on every element, with weight decay when weight_decay != 0 and momentum when
// momentum != 0, kept in buf (the parameter's shape and dtype; unused, and may be undefined,
// without momentum), which is set to the decayed gradient when first_step is (PyTorch's buffer
// made at its first step).
void sgd_momentum_step(Tensor& param, const Tensor& grad, Tensor& buf, const SGDScalars& s);
// out (k,) f64, out[slot] = the sum of the squares of x's elements (x f32 or f64, any shape): the
// correctly rounded sum of its chunks' sums (sum_squares_chunks, then sum_all), so the same bits
// on every device and thread count.
void sum_squares(const Tensor& x, Tensor& out, int64_t slot);

// ---- convolution and pooling over images x (N, C, H, W) (src/ops/conv.cpp)
// A kernel_h x kernel_w window moved by stride over x with pad rows and columns of padding on each
// side; out_h x out_w positions, out = (in + 2 pad - kernel) / stride + 1 (PyTorch's floor mode).
// Position (oh, ow) covers input rows oh * stride_h - pad_h .. + kernel_h - 1, columns likewise.
struct Window2d {
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, out_h = 1, out_w = 1;
};
// cols (C*kernel_h*kernel_w, N*out_h*out_w): column (n, oh, ow) holds the window of x (N, C, H, W)
// at (oh, ow), rows in (c, i, j) order, 0 where it lies in the padding.
void im2col(const Tensor& x, const Window2d& win, Tensor& cols);
// dx (N, C, H, W) = im2col's adjoint: each pixel the sum of the cols entries im2col copied it to.
void col2im(const Tensor& cols, const Window2d& win, Tensor& dx);
// out (N, O, out_h, out_w)[n, o, p] = cols (O, N*out_h*out_w)[o, n*out_h*out_w + p] + bias[o]
// (bias (O,), or undefined for none).
void conv2d_columns_to_planes(const Tensor& cols, const Tensor& bias, Tensor& out);
// rows (N*out_h*out_w, O) = dy (N, O, out_h, out_w) as rows: rows[n*out_h*out_w + p, o] = dy[n, o, p].
void conv2d_planes_to_rows(const Tensor& dy, Tensor& rows);
// out (N, C, out_h, out_w) = the max of each window (padding is -inf), indices (same shape, i32 or
// i64) = where it is, h * W + w in its plane: the first max, or the last NaN (PyTorch's CPU).
void max_pool2d(const Tensor& x, const Window2d& win, Tensor& out, Tensor& indices);
// dx (N, C, H, W): each pixel the sum of dy over the windows whose index names it.
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Window2d& win, Tensor& dx);
// out (N, C, out_h, out_w) = the sum of each window (padding is 0) / (kernel_h * kernel_w).
void avg_pool2d(const Tensor& x, const Window2d& win, Tensor& out);
// dx (N, C, H, W): each pixel the sum of dy over the windows that hold it, / (kernel_h * kernel_w).
void avg_pool2d_backward(const Tensor& dy, const Window2d& win, Tensor& dx);
// ---- attention: the fused scaled_dot_product_attention's kernels (src/kernels/attention.cpp
// dispatches; cpu/attention.cpp is the reference, Note [attention arithmetic] there)
// q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv), all contiguous, one float dtype, Tk >= 1;
// causal needs Tq == Tk and lets query i see keys 0..i. out (B, H, Tq, dv) = softmax(scale q k^T) v
// per (b, h); lse (B, H, Tq), the inputs' dtype: each row's log of the sum of exp(scale q k^T).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, Tensor& out,
                       Tensor& lse);
// The gradients of out given dout, from the probabilities recomputed from lse, P = exp(scale q k^T
// - lse): delta (B, H, Tq) f64, scratch the caller allocates, receives rowsum(dout * out); then
// dS = P * (dout v^T - delta), dq = scale dS k, dk = scale dS^T q, dv = P^T dout (each written whole).
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, bool causal, double scale, Tensor& delta, Tensor& dq, Tensor& dk,
                        Tensor& dv);
// The same two with the operands anywhere in their tensors (Note [attention layouts] in
// src/kernels/attention.cpp): element (b, h, t, c) of the (B, H, T, w) operand X at
// X.offset + b X.batch + h X.head + t X.row + c of its tensor. dout is read through out's layout;
// lse and delta stay contiguous (B, H, Tq). The operands may share a tensor (q, k and v the three
// thirds of one (B, T, 3C) projection; dq, dk and dv those of its gradient); the written ones
// must not overlap each other or what is read.
struct HeadRows {
  int64_t offset = 0, batch = 0, head = 0, row = 0;
  View view(int64_t B, int64_t H, int64_t T, int64_t w) const;  // as a (B, H, T, w) View
};
struct AttentionLayout {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, d = 0, dv = 0;
  HeadRows q, k, v, out, dq, dk, dv_;
  // (B, H, T, w) contiguous tensors, one per operand
  static AttentionLayout contiguous(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t d, int64_t dv);
  // q, k, v the thirds of one (B, T, 3C) tensor and out (B, T, C), C = H d: nanoGPT's projection
  // before its split and head permutes; the gradients dq, dk, dv in thirds of a (B, T, 3C) one.
  static AttentionLayout packed(int64_t B, int64_t T, int64_t H, int64_t d);
  bool is_contiguous() const;
};
// products: f32, or bf16 (autocast: Note [bf16 flash attention] in src/cuda/flash_bf16.cu) where the
// CUDA flash kernels take the layout; elsewhere f32.
enum class AttentionProducts : uint8_t { f32, bf16 };
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& at, bool causal,
                       double scale, Tensor& out, Tensor& lse, AttentionProducts products = AttentionProducts::f32);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const AttentionLayout& at, bool causal, double scale, Tensor& delta,
                        Tensor& dq, Tensor& dk, Tensor& dv, AttentionProducts products = AttentionProducts::f32);

// ---- normalisation over the last axis and dropout (cpu/norm.cpp, src/cuda/norm.cu; the facades
// in norm.cpp). x (..., C) is read as n = numel / C rows of C; mean and rstd are (n,) of x's dtype;
// weight and bias are (C,) or undefined tensors (no affine, no bias). Note [norm arithmetic] in
// cpu/norm.cpp gives the order of every sum.
enum class Norm : uint8_t { layer, rms };  // layer: y = (x - mean) * rstd * w + b;  rms: y = x * rstd * w
// y = the normalised rows; mean (layer only; undefined for rms) and rstd = 1 / sqrt(var + eps),
// var the row's mean square deviation (rms: its mean square). y and dy have x's dtype, or are bf16
// for f32 rows (autocast's activations: y the f32 result rounded once, dy widened exactly).
void norm_rows(Norm kind, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
               Tensor& mean, Tensor& rstd);
// sum = a + r (equal shapes: a f32 or f64, r a's dtype or bf16 with an f32 a), then norm_rows of
// sum: the bits of binary(add) and norm_rows one after the other. CUDA's f32 rows make both in one
// kernel, whose later passes read the sum back from the cache (Note [the add before a norm] in
// src/cuda/norm.cu); elsewhere the two kernels run in turn.
void add_norm_rows(Norm kind, const Tensor& a, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                   Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd);
// With xhat = (x - mean) * rstd (rms: x * rstd) and g = dy * weight (dy without a weight), each of
// dx = rstd * (g - mean_row(g) - xhat * mean_row(g * xhat)) (rms: without the mean_row(g) term),
// dweight = sum over rows of dy * xhat and dbias = sum over rows of dy, into every output that is
// defined (an undefined one is not computed). With dx_adds, dx += that dx instead, each element
// rounded as a separate add of the two would round it (Note [adding into a gradient], graph.cpp).
void norm_rows_backward(Norm kind, const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool dx_adds = false);
// y = x * m elementwise, m = 1 / (1 - p) (rounded to x's dtype) where element i's Philox word
// (philox.hpp: word i % 4 of the block of counter offset + i / 4 under key seed) is at least
// dropout_threshold(p), else 0 (p = 1: m = 0 everywhere). The backward is the same call on dy.
void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y);

// ---- multi-tensor gradient transforms (src/optim/clip.cpp): many tensors in one call, all on one
// device, each f32 or f64 (the dtypes may be mixed). On CUDA a launch serves a group of up to 48
// tensors ("multi-tensor apply") rather than one; on the CPU the single-tensor kernel runs on each
// in turn.
// out (C,) f64: the sums of squares of every chunk of xs, in order (Note [sum of squares order] in
// optim_ops.hpp): xs[0]'s sum_squares_chunk_count(n0) chunks, then xs[1]'s, ...; sum_all(out) is
// the sum of squares of all of them, with the same bits however the elements are cut into tensors
// at chunk boundaries.
void sum_squares_chunks(const std::vector<const Tensor*>& xs, Tensor& out);
// x = x * s in place for every x of xs (no two sharing their bytes): the bits of scale(x, s, x).
void scale_many(const std::vector<Tensor*>& xs, double s);
// The same with s read on the device from factor, a () f64 tensor there: no read-back, so it can
// be captured in a CUDA graph.
void scale_many_by(const std::vector<Tensor*>& xs, const Tensor& factor);
// clip_grad_norm's coefficient on the device, () f64 tensors of one device: norm = sqrt(sumsq) and
// factor = max_norm / (norm + 1e-6) where that is below 1 (or NaN), else exactly 1.
void clip_factor(const Tensor& sumsq, double max_norm, Tensor& norm, Tensor& factor);

}  // namespace tapegrad::kernels
