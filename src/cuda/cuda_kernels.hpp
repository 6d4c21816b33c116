// CUDA kernels: the list every device implements (src/kernels/device_kernels.inc, the CPU's too),
// documented at the facades in src/kernels/kernels.hpp. Plain C++: src/ops includes
// this header without any CUDA header. Launchers live in src/cuda/*.cu, one file per family.
//
// Rules: every kernel runs on its device's stream (src/cuda/common.cuh) and never falls back to
// the host; f64 results equal the CPU's bit for bit (correctly rounded sums, exp and log; exact
// elementwise arithmetic), but for matmul's, which are cuBLAS's (the CPU's are OpenBLAS's); f32
// reductions run in a fixed order, so every run gives the same bits;
// an out-of-range index is recorded on the device and reported at the next synchronization.
#pragma once

#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/kernels/value_embed_kernels.hpp"

namespace tapegrad::cuda {

using kernels::AdamWScalars;
using kernels::Binary;
using kernels::Unary;

// elementwise.cu, strided.cu, linalg.cu, rows.cu, optim.cu, value_embed.cu
#include "tapegrad/kernels/device_kernels.inc"

// attention with operands anywhere in their tensors (attention.cu; kernels.hpp's layout facades):
// the flash kernels' cases alone (f32, heads up to 128), which attention_takes_layout tells.
bool attention_takes_layout(DType dtype, const kernels::AttentionLayout& at);
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionLayout& at,
                       bool causal, double scale, Tensor& out, Tensor& lse,
                       kernels::AttentionProducts products = kernels::AttentionProducts::f32);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const kernels::AttentionLayout& at, bool causal, double scale,
                        Tensor& delta, Tensor& dq, Tensor& dk, Tensor& dv,
                        kernels::AttentionProducts products = kernels::AttentionProducts::f32);
// the bf16 products of those (flash_bf16.cu, Note [bf16 flash attention]) for a head of D = 64 or
// 128 columns (d, dv <= D): operands and results all f32 or all bf16, lse f32 and natural-log as
// the f32 kernels'.
void flash_bf16_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttentionLayout& at, int D,
                        bool causal, double scale, Tensor& out, Tensor& lse);
void flash_bf16_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                         const Tensor& lse, const kernels::AttentionLayout& at, int D, bool causal, double scale,
                         Tensor& dq, Tensor& dk, Tensor& dv);

// out (n, m) bf16 or f32 = x (n, k) bf16 @ w (m, k)^T bf16 + bias (m,) f32 or bf16, summed in f32
// and rounded once: one cuBLASLt GEMM (Note [bias in the epilogue] in linalg.cu); all contiguous.
// False, with nothing done, where cuBLASLt has no kernel for it.
bool matmul_bias(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
// dw (m, k) f32 = dy (n, m)^T @ x (n, k) and db (m,) f32 = dy's column sums, dy and x bf16: one
// cuBLASLt GEMM with the BGRADB epilogue; false, with nothing done, where it has no kernel.
bool matmul_weight_bias_grad(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db);
// act (n, h) bf16 = gelu_tanh(x (n, k) @ w (h, k)^T + bias) and pre (n, h) bf16 = the product plus
// the bias (undefined: none; else bf16 (h,)), both from the f32 sums: one cuBLASLt GEMM with the
// GELU_AUX (GELU_AUX_BIAS) epilogue (Note [the MLP's epilogues] in
// src/ops/fused/mlp.cpp). dpre (n, h) bf16 = (dy (n, m) @ w (m, h)) * gelu_tanh'(pre): one with
// the DGELU epilogue. False, with nothing done, where cuBLASLt has no kernel for it (h not a
// multiple of 8 among them: the aux matrix's rows must be).
bool matmul_gelu(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& act);
bool matmul_dgelu(const Tensor& dy, const Tensor& w, const Tensor& pre, Tensor& dpre);

// kernels::add_norm_rows for f32 sums (a f32, r f32 or bf16; the facade runs the rest), one kernel
// (Note [the add before a norm] in norm.cu).
void add_norm_rows(kernels::Norm kind, const Tensor& a, const Tensor& r, const Tensor& weight, const Tensor& bias,
                   double eps, Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd);

// cross_entropy_rows keeps a long row in shared memory between its two reads (kKeep in
// log_softmax.cu) unless this is switched off (tests and benchmarks compare the two: same bits).
void set_cross_entropy_kept_rows(bool keep);

// Note [wgmma attention]'s layouts alone (tests): a, b (64, 64) bf16 -> c1 = a b^T, c2 = a b, f32,
// through the Wgmma policy's scores and pz; compute capability 9.0 only.
void attention_wgmma_probe(const Tensor& a, const Tensor& b, Tensor& c1, Tensor& c2);

// binary's broadcasting path (strided.cu), which its flat path hands unequal shapes to
void binary_walk(Binary op, const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace tapegrad::cuda
