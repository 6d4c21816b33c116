// Microbenchmarks of the tiny step and of recording one op (Google Benchmark; not a timed test).
//
//   ./build/bench/bench_tiny --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
//
// BM_TinyStep: forward + backward + SGD of the tiny step's model (docs/tiny_step.md; B=3, V=4,
// d=2), f64, with the tape cleared each step as a training loop does. BM_RecordOp: one small op
// (mul of two 4-element tensors) recorded on the tape, and the same op under NoGrad for comparison.
// tiny_memory (tiny_memory.cpp) reports peak RSS after N steps.
#include <benchmark/benchmark.h>

#include "bench_main.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/optim/sgd.hpp"
#include "tiny_model.hpp"

using namespace tapegrad;

static void BM_TinyStep(benchmark::State& state) {
  tiny::Model m(tiny::Config{});
  optim::SGD sgd(0.5);
  const std::vector<Var> params = m.g.parameters();
  for (auto _ : state) {
    m.g.clear();
    m.g.zero_grad();
    Var loss = m.loss(m.g);
    m.g.backward(loss);
    sgd.step(params);
    benchmark::DoNotOptimize(loss.value().raw_data());
  }
}
BENCHMARK(BM_TinyStep);

static void record_ops(benchmark::State& state, bool grad) {
  Graph g;
  Var a = g.parameter(Tensor::from_doubles({1, 2, 3, 4}, Shape{4}, DType::f64));
  Var b = g.parameter(Tensor::from_doubles({5, 6, 7, 8}, Shape{4}, DType::f64));
  g.set_grad_enabled(grad);
  int n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ops::mul(a, b).id());
    if (++n == 1024) {  // a step's worth of ops, then the tape is cleared as a loop would
      state.PauseTiming();
      g.clear();
      n = 0;
      state.ResumeTiming();
    }
  }
}
static void BM_RecordOp(benchmark::State& state) { record_ops(state, true); }
static void BM_OpNoGrad(benchmark::State& state) { record_ops(state, false); }
BENCHMARK(BM_RecordOp);
BENCHMARK(BM_OpNoGrad);

int main(int argc, char** argv) { return tapegrad::bench::run_benchmarks(argc, argv); }
