// CPU kernels: the list every device implements (device_kernels.inc, documented at the facades in
// kernels.hpp) and the CPU's own. The CPU versions are the reference every other device's kernels
// are checked against.
#pragma once

#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/kernels/value_embed_kernels.hpp"

namespace tapegrad::cpu {

using kernels::AdamWScalars;
using kernels::Binary;
using kernels::Reduce;
using kernels::Unary;

#include "tapegrad/kernels/device_kernels.inc"

// CPU-only: the fused embedding_cross_entropy's distinct-row kernels (kernels.hpp), and AdamW on
// one parameter (adamw_step_many runs it on each slot).
void cross_entropy_of_rows(const Tensor& table, const Tensor& rows, const Tensor& row_of, const Tensor& targets,
                           Tensor& probs, Tensor& losses);
void cross_entropy_backward_of_rows(const Tensor& probs, const Tensor& row_of, const Tensor& targets,
                                    const Tensor& dloss, double divisor, Tensor& dlogits, int64_t row_begin);
void adamw_step(const kernels::AdamWSlot& slot, const AdamWScalars& s);
// binary's broadcasting path (cpu/strided.cpp), which its flat path hands unequal shapes to
void binary_walk(Binary op, const Tensor& a, const Tensor& b, Tensor& out);

// cpuperf: the f32 softmax of one row (rows.cpp's, the bits of softmax_rows), with its max and
// sum of exponentials; and y[j] = expf(x[j] - shift) for j < n through the path's exponentials
// (the C library's bits). The attention's f32 blocks use them (cpu/attention.cpp).
void softmax_row_f32(const float* x, float* y, int64_t m, double* top, double* total);
void exp_shifted_row(const float* x, float shift, float* y, int64_t n);

}  // namespace tapegrad::cpu
