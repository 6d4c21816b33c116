// Microbenchmarks of the optimizer kernels added with parameter groups (Google Benchmark; not a
// timed test):
//
//   ./build/bench/bench_optim --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// BM_SumSquares: clip_grad_norm's sum of squares of n f32 elements (Note [sum of squares order]),
// against BM_SumAll, the library's f32 sum of the same elements (one pass over the same bytes, in
// its own fixed order). BM_SGDMomentum: one SGD update with momentum and weight decay of n f32
// elements. BM_ClipGradNorm: clip_grad_norm over a small GPT's 75 parameters (every gradient read
// for the norm, then scaled).
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/optim/clip.hpp"

using namespace tapegrad;

namespace {

Tensor wave(int64_t n, double phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(std::sin(phase + 0.001 * i));
  return Tensor::from_vector(v, Shape{n});
}

}  // namespace

static void BM_SumSquares(benchmark::State& state) {
  const Tensor x = wave(state.range(0), 0.0);
  Tensor out = Tensor::zeros(Shape{1}, DType::f64);
  for (auto _ : state) {
    kernels::sum_squares(x, out, 0);
    benchmark::DoNotOptimize(out.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.nbytes()));
}
BENCHMARK(BM_SumSquares)->Arg(1 << 10)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);

static void BM_SumAll(benchmark::State& state) {
  const Tensor x = wave(state.range(0), 0.0);
  Tensor out = Tensor::zeros(Shape{}, DType::f32);
  for (auto _ : state) {
    kernels::sum_all(x, out);
    benchmark::DoNotOptimize(out.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.nbytes()));
}
BENCHMARK(BM_SumAll)->Arg(1 << 10)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);

static void BM_SGDMomentum(benchmark::State& state) {
  Tensor p = wave(state.range(0), 0.0), buf = wave(state.range(0), 1.0);
  const Tensor g = wave(state.range(0), 2.0);
  const kernels::SGDScalars s{.lr = 1e-3, .momentum = 0.9, .weight_decay = 1e-4};
  for (auto _ : state) {
    kernels::sgd_momentum_step(p, g, buf, s);
    benchmark::DoNotOptimize(p.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(4 * p.nbytes()));  // read p g buf, write p buf
}
BENCHMARK(BM_SGDMomentum)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);

static void BM_ClipGradNorm(benchmark::State& state) {
  // A small GPT's shapes (d = 384, 6 blocks, 8192 tokens): per block (384, 1152) (384, 384)
  // (384, 1536) (1536, 384) matrices with their biases and two norms' weights and biases, and a
  // (8192, 384) embedding: 14M f32 gradients, 75 tensors.
  Graph g;
  std::vector<Var> params;
  auto add = [&](Shape shape) { params.push_back(g.parameter(Tensor::zeros(shape, DType::f32))); };
  add(Shape{8192, 384});
  for (int block = 0; block < 6; ++block) {
    for (const Shape& s : {Shape{384, 1152}, Shape{384, 384}, Shape{384, 1536}, Shape{1536, 384}}) add(s);
    for (const Shape& s : {Shape{1152}, Shape{384}, Shape{1536}, Shape{384}, Shape{384}, Shape{384}}) add(s);
  }
  add(Shape{384});
  for (const Var& p : params) {  // every gradient all ones
    g.clear();
    g.backward(ops::sum(p));
  }
  g.clear();
  // A limit just below the norm: every call clips, by a factor close to 1 (the values stay normal).
  const double limit = 0.999 * optim::grad_norm(params);
  for (auto _ : state) benchmark::DoNotOptimize(optim::clip_grad_norm(params, limit));
  state.SetBytesProcessed(state.iterations() * 14 * 1000 * 1000 * 4 * 3);  // read twice, write once (about)
}
BENCHMARK(BM_ClipGradNorm)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
