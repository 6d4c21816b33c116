// The main of tapegrad's Google Benchmark programs: BENCHMARK_MAIN, with the CPU path the kernels
// take in the report's context (TAPEGRAD_CPU_PATH forces one: src/kernels/cpu/simd.hpp).
#pragma once

#include <benchmark/benchmark.h>

#include "tapegrad/kernels/cpu/simd.hpp"

namespace tapegrad::bench {

inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("tapegrad_cpu_path", cpu::simd::name(cpu::simd::active()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace tapegrad::bench
