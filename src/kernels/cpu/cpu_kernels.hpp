// CPU kernels (xtensor over the tensors' storage). The same signatures as the facades in
// src/ops/kernels.hpp, which document each one; the CPU versions are the reference every other
// device's kernels are checked against.
#pragma once

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::cpu {

using kernels::AdamWScalars;
using kernels::Binary;
using kernels::Unary;

void fill(Tensor& out, double value);
void fill_from_scalar(Tensor& out, const Tensor& scalar, double divisor);
void unary(Unary op, const Tensor& x, Tensor& y);
void unary_backward(Unary op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx);
void binary(Binary op, const Tensor& a, const Tensor& b, Tensor& out);
void scale(const Tensor& x, double s, Tensor& y);
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& out);
void transpose(const Tensor& x, Tensor& out);
void add_row(const Tensor& x, const Tensor& b, Tensor& out);
void sum_rows(const Tensor& x, Tensor& out);
void sum_all(const Tensor& x, Tensor& out);
void mean_all(const Tensor& x, Tensor& out);
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
void cross_entropy_of_rows(const Tensor& table, const Tensor& rows, const Tensor& row_of, const Tensor& targets,
                           Tensor& probs, Tensor& losses);
void cross_entropy_backward_of_rows(const Tensor& probs, const Tensor& row_of, const Tensor& targets,
                                    const Tensor& dloss, double divisor, Tensor& dlogits, int64_t row_begin);
void sgd_step(Tensor& param, const Tensor& grad, double lr);
void adamw_step(const kernels::AdamWSlot& slot, const AdamWScalars& s);

}  // namespace tapegrad::cpu
