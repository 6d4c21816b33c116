// layer_norm and rms_norm on the CPU against libtorch, in one binary (Google Benchmark; not a timed
// test). f32 rows of C = 768, 10^5 to 10^7 elements, on 1 and 2 threads; docs/perf-cpu.md
// ("Normalisation") has the figures and the machine.
//
//   ./build/bench/bench_norm --benchmark_enable_random_interleaving=true --benchmark_repetitions=9
//       --benchmark_min_time=0.2 --benchmark_report_aggregates_only=true --benchmark_out=norm.json
//   python3 bench/norm_table.py norm.json   (docs/perf-cpu.md's tables)
//
// Arguments of every benchmark: {elements, threads}.
// - Kernels: BM_*Kernels is tapegrad's forward kernel then its backward kernel (dx, dweight, dbias
//   from a given dy), outputs allocated each time; BM_TorchLayerNormKernels is ATen's
//   native_layer_norm then native_layer_norm_backward, the kernels torch's autograd calls.
// - Ops: BM_*Op is the forward and backward through each library's engine, x, w and b wanting
//   gradients, the backward started at y with dy (torch: y.backward(dy); tapegrad: the Seed op).
// - rms_norm: libtorch 1.13 has no fused rms_norm, so BM_TorchRmsNormKernels is the composite
//   x * rsqrt(mean(x^2) + eps) * w through autograd (what a torch 1.13 user writes), and
//   BM_TapegradRmsNormOp is the matching run through tapegrad's engine.
// - Forward only: BM_*Forward, the forward kernel alone (no tape).
#include <benchmark/benchmark.h>

#include <random>

#include "tapegrad/graph/function.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tensor/parallel.hpp"

#if TAPEGRAD_BENCH_TORCH
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#endif

namespace {

using namespace tapegrad;
constexpr int64_t kC = 768;

Tensor random(Shape s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> u(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, DType::f32);
}

int64_t rows_of(const benchmark::State& state) { return std::max<int64_t>(1, state.range(0) / kC); }

void set_counters(benchmark::State& state) {
  state.counters["rows"] = static_cast<double>(rows_of(state));
  state.counters["threads"] = static_cast<double>(state.range(1));
}

struct Inputs {
  Tensor x, w, b, dy;
  explicit Inputs(int64_t rows)
      : x(random({rows, kC}, 1)), w(random({kC}, 2)), b(random({kC}, 3)), dy(random({rows, kC}, 4)) {}
};

void tapegrad_kernels(benchmark::State& state, kernels::Norm kind, bool backward) {
  set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = rows_of(state);
  const Inputs in(n);
  const Tensor bias = kind == kernels::Norm::layer ? in.b : Tensor();
  for (auto _ : state) {
    Tensor y = Tensor::empty(in.x.shape(), DType::f32), rstd = Tensor::empty({n}, DType::f32);
    Tensor mean = kind == kernels::Norm::layer ? Tensor::empty({n}, DType::f32) : Tensor();
    kernels::norm_rows(kind, in.x, in.w, bias, 1e-5, y, mean, rstd);
    benchmark::DoNotOptimize(y.raw_data());
    if (!backward) continue;
    Tensor dx = Tensor::empty(in.x.shape(), DType::f32), dw = Tensor::empty({kC}, DType::f32);
    Tensor db = bias.defined() ? Tensor::empty({kC}, DType::f32) : Tensor();
    kernels::norm_rows_backward(kind, in.dy, in.x, in.w, mean, rstd, dx, dw, db);
    benchmark::DoNotOptimize(dx.raw_data());
  }
  set_counters(state);
}

// A custom op that starts the backward at y with a given dy, as torch's y.backward(dy) does: its
// value is a placeholder 0 (no reduction is timed) and its rule hands dy to y.
struct Seed {
  static constexpr const char* name = "seed";
  static Tensor forward(const std::vector<Tensor>& in, Saved&) { return Tensor::zeros({}, in[0].dtype()); }
  static void backward(BackwardContext& ctx) { ctx.accumulate(0, ctx.input(1)); }
};

void tapegrad_op(benchmark::State& state, kernels::Norm kind) {
  set_num_threads(static_cast<int>(state.range(1)));
  const Inputs in(rows_of(state));
  Graph g;
  Var x = g.parameter(in.x), w = g.parameter(in.w), b = g.parameter(in.b);
  for (auto _ : state) {
    g.clear();
    g.zero_grad();
    Var y = kind == kernels::Norm::layer ? ops::layer_norm(x, w, b) : ops::rms_norm(x, w, 1e-5);
    g.backward(apply<Seed>({y, g.input(in.dy)}));
    benchmark::DoNotOptimize(x.grad().raw_data());
  }
  set_counters(state);
}

void BM_TapegradLayerNormForward(benchmark::State& state) { tapegrad_kernels(state, kernels::Norm::layer, false); }
void BM_TapegradLayerNormKernels(benchmark::State& state) { tapegrad_kernels(state, kernels::Norm::layer, true); }
void BM_TapegradLayerNormOp(benchmark::State& state) { tapegrad_op(state, kernels::Norm::layer); }
void BM_TapegradRmsNormKernels(benchmark::State& state) { tapegrad_kernels(state, kernels::Norm::rms, true); }
void BM_TapegradRmsNormOp(benchmark::State& state) { tapegrad_op(state, kernels::Norm::rms); }

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {1, 2})
    for (int64_t elements : {100000, 1000000, 10000000}) b->Args({elements, threads});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_TapegradLayerNormForward)->Apply(sizes);
BENCHMARK(BM_TapegradLayerNormKernels)->Apply(sizes);
BENCHMARK(BM_TapegradLayerNormOp)->Apply(sizes);
BENCHMARK(BM_TapegradRmsNormKernels)->Apply(sizes);
BENCHMARK(BM_TapegradRmsNormOp)->Apply(sizes);

#if TAPEGRAD_BENCH_TORCH

struct TorchInputs {
  at::Tensor x, w, b, dy;
  TorchInputs(const Inputs& in, int64_t rows) {
    auto from = [](const Tensor& t, at::IntArrayRef shape) {
      return at::from_blob(t.raw_data(), shape, at::TensorOptions().dtype(at::kFloat)).clone();
    };
    x = from(in.x, {rows, kC});
    w = from(in.w, {kC});
    b = from(in.b, {kC});
    dy = from(in.dy, {rows, kC});
  }
};

void torch_layer_norm_kernels(benchmark::State& state, bool backward) {
  at::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = rows_of(state);
  const Inputs in(n);
  const TorchInputs t(in, n);
  for (auto _ : state) {
    auto [y, mean, rstd] = at::native_layer_norm(t.x, {kC}, t.w, t.b, 1e-5);
    benchmark::DoNotOptimize(y.data_ptr());
    if (!backward) continue;
    auto [dx, dw, db] = at::native_layer_norm_backward(t.dy, t.x, {kC}, mean, rstd, t.w, t.b, {true, true, true});
    benchmark::DoNotOptimize(dx.data_ptr());
  }
  set_counters(state);
}

// Forward and backward through torch's autograd: layer_norm or the rms_norm composite, then
// y.backward(dy).
void torch_autograd(benchmark::State& state, bool layer) {
  at::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = rows_of(state);
  const Inputs in(n);
  TorchInputs t(in, n);
  for (at::Tensor* p : {&t.x, &t.w, &t.b}) p->requires_grad_(true);
  for (auto _ : state) {
    for (at::Tensor* p : {&t.x, &t.w, &t.b}) p->mutable_grad() = at::Tensor();
    at::Tensor y = layer ? at::layer_norm(t.x, {kC}, t.w, t.b, 1e-5)
                         : t.x * at::rsqrt(t.x.pow(2).mean({-1}, true) + 1e-5) * t.w;
    y.backward(t.dy);
    benchmark::DoNotOptimize(t.x.grad().data_ptr());
  }
  set_counters(state);
}

// libtorch 1.13 has no rms_norm kernels: the composite through autograd stands in for them
void BM_TorchRmsNormKernels(benchmark::State& state) { torch_autograd(state, false); }
void BM_TorchLayerNormForward(benchmark::State& state) { torch_layer_norm_kernels(state, false); }
void BM_TorchLayerNormKernels(benchmark::State& state) { torch_layer_norm_kernels(state, true); }
void BM_TorchLayerNormOp(benchmark::State& state) { torch_autograd(state, true); }

BENCHMARK(BM_TorchLayerNormForward)->Apply(sizes);
BENCHMARK(BM_TorchLayerNormKernels)->Apply(sizes);
BENCHMARK(BM_TorchLayerNormOp)->Apply(sizes);
BENCHMARK(BM_TorchRmsNormKernels)->Apply(sizes);

#endif

}  // namespace

BENCHMARK_MAIN();
