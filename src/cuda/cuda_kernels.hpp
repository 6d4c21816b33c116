// CUDA kernels: the same signatures as the facades in src/ops/kernels.hpp (and as the CPU
// kernels in src/ops/cpu/cpu_kernels.hpp), which document each one. Plain C++: src/ops includes
// this header without any CUDA header. Launchers live in src/cuda/*.cu, one file per family.
//
// Rules: every kernel runs on its device's stream (src/cuda/common.cuh) and never falls back to
// the host; f64 results equal the CPU's bit for bit (correctly rounded sums, exp and log; exact
// elementwise arithmetic); f32 reductions run in a fixed order, so every run gives the same bits;
// an out-of-range index is recorded on the device and reported at the next synchronization.
#pragma once

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::cuda {

using kernels::AdamWScalars;
using kernels::Binary;
using kernels::Unary;

// elementwise.cu
void fill(Tensor& out, double value);
void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor);
void unary(Unary op, const Tensor& x, Tensor& y);
void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx);
void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out);
void scale(const Tensor& x, double s, Tensor& y);

// linalg.cu
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out);
void transpose(const Tensor& x, Tensor& out);
void add_row(const Tensor& x, const Tensor& b, Tensor& out);
void sum_rows(const Tensor& x, Tensor& out);
void sum_all(const Tensor& x, Tensor& out);
void mean_all(const Tensor& x, Tensor& out);

// rows.cu
void gather_rows(const Tensor& table, const Tensor& ids, Tensor& out);
void scatter_rows(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite);
void scatter_rows_fresh(Tensor& dst, const Tensor& ids, const Tensor& rows, bool overwrite);
void softmax_rows(const Tensor& x, Tensor& y);
void softmax_rows_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses);
void cross_entropy_reduced(const Tensor& logits, const Tensor& targets, Tensor& probs, Tensor& losses, Tensor& out,
                           bool mean);
void cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dloss, double divisor,
                            Tensor& dlogits);

// optim.cu
void sgd_step(Tensor& param, const Tensor& grad, double lr);
// AdamW: the facade's adamw_step comes here as a group of one.
void adamw_step_many(const std::vector<kernels::AdamWSlot>& slots, const AdamWScalars& s);

}  // namespace tapegrad::cuda
