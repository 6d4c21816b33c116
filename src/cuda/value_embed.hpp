// CUDA launchers of the value-embed family: the same signatures as the CPU kernels declared in
// src/ops/value_embed_kernels.hpp, which document each one. Plain C++: src/ops includes this header
// without any CUDA header. The kernels are in src/cuda/value_embed.cu.
//
// Rule: every launch runs on the device's stream and none waits for the device, except
// value_embed_select_touched (the pull must learn how many rows it takes).
#pragma once

#include "ops/value_embed_kernels.hpp"

namespace tapegrad::cuda {

void value_embed_gather(const Tensor& weight, const Tensor& ids, Tensor& planes);
void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, ops::ValueEmbedAccumulate mode, Tensor& sum,
                            Tensor& touched);
int64_t value_embed_select_touched(const Tensor& touched, Tensor& selected);
void value_embed_take_rows(Tensor& sum, Tensor& touched, const Tensor& selected, int64_t count, Tensor& rows,
                           Tensor& grad);
void sparse_sgd_rows(Tensor& table, const Tensor& rows, const Tensor& grad, float lr);
void sparse_adamw_rows(Tensor& table, const Tensor& rows, const Tensor& grad, Tensor& m, Tensor& v,
                       const kernels::AdamWScalars& s);

}  // namespace tapegrad::cuda
