// CUDA launchers of the value-embed family: the same signatures as the CPU kernels declared in
// src/ops/value_embed_kernels.hpp, which document each one. Plain C++: src/ops includes this header
// without any CUDA header. The kernels are in src/cuda/value_embed.cu.
//
// Rule: every launch runs on the device's stream and none waits for the device, except
// value_embed_select_touched (the pull must learn how many rows it takes).
#pragma once

#include "tapegrad/kernels/value_embed_kernels.hpp"

namespace tapegrad::cuda {

// The atomic backward's choice of path (Note [combining duplicate ids]); tests and value_embed --bench
// change it, the op uses the defaults.
struct ValueEmbedTuning {
  // Combine duplicate ids from this many reductions up (P*T*D/8: 6 Mi is T = 16384 at P=4, D=768);
  // below, grouping costs more than it saves, and each contribution is its own reduction.
  int64_t combine_min_reductions = int64_t{6} << 20;
  bool group_only = false;  // stop after grouping the ids (the bench times its share)
};
ValueEmbedTuning& value_embed_tuning();

void value_embed_gather(const Tensor& weight, const Tensor& ids, Tensor& planes);
int64_t value_embed_workspace_elements(Device device, int64_t vocab);
void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, kernels::ValueEmbedAccumulate mode,
                            kernels::ValueEmbedBuffer& buffer);
int64_t value_embed_select_touched(const Tensor& touched, Tensor& selected);
void value_embed_take_rows(Tensor& sum, Tensor& touched, const Tensor& selected, int64_t count, Tensor& rows,
                           Tensor& grad);
void sparse_sgd_rows(Tensor& table, const Tensor& rows, const Tensor& grad, float lr);
void sparse_adamw_rows(Tensor& table, const Tensor& rows, const Tensor& grad, Tensor& m, Tensor& v,
                       const kernels::AdamWScalars& s);

}  // namespace tapegrad::cuda
