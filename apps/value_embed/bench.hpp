// value_embed --bench: the value-embed path timed on cuda:0 (CUDA builds only; bench.cu).
//
// What it measures, for T = 2048, 8192, 49152 and uniform or Zipf-like ids over a bf16 table of P
// planes of (V, D): the forward gather, the backward into the f16 buffer (atomic), both together,
// the other modes (deterministic, f32 buffer), the atomic backward's two paths (each contribution its
// own reduction, or duplicate ids combined), the pull alone and with sparse AdamW, the peak device
// memory beyond the inputs, each mode's error against an fp64 reference sum, and a device-to-device
// copy's bandwidth to set the GB/s against. bench/value_embed/run_device.sh runs it beside the
// PyTorch baselines (bench/value_embed/baseline.py) in one call; docs/value_embed.md has the results.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ve_app {

struct BenchConfig {
  int planes = 4;
  int64_t vocab = 50304, dim = 768;
  int runs = 50;        // timings per number; the median is shown
  std::string out_dir;  // when set: the inputs and this path's buffers, for baseline.py to compare with the seed
};

// Prints the tables to `out`; throws tapegrad::DeviceError when there is no device.
void run_bench(const BenchConfig& config, std::FILE* out);

}  // namespace ve_app
