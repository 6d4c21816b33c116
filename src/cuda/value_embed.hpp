// The value-embed family's CUDA side: its launchers are declared with every device's kernels
// (src/kernels/device_kernels.inc, through cuda_kernels.hpp); this header adds the CUDA path's
// tuning. Plain C++. The kernels are in src/cuda/value_embed.cu.
//
// Rule: every launch runs on the device's stream and none waits for the device, except
// value_embed_select_touched (the pull must learn how many rows it takes).
#pragma once

#include "tapegrad/cuda/cuda_kernels.hpp"

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

}  // namespace tapegrad::cuda
