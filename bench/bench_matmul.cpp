// CPU matrix products: tapegrad against OpenBLAS called directly, in the same binary (Google
// Benchmark; not a timed test). For f32 and f64, square products of n = 256 and 1024 and a batch
// (16, 4, 64, 64) @ (16, 4, 64, 64), with 1 and 2 threads, each benchmark reports GFLOP/s
// (2 n m k per product):
//   kernel  kernels::matmul into a tensor made once (set_num_threads(threads));
//   op      ops::matmul of two parameters: the output's allocation and the tape's record included;
//   cblas   cblas_sgemm / cblas_dgemm (one call per product of the batch), OpenBLAS set to the
//           thread count.
//
//   ./build/bench/bench_matmul --benchmark_repetitions=7 --benchmark_enable_random_interleaving=true
//       --benchmark_report_aggregates_only=true --benchmark_format=json > matmul.json   (one line)
//   python3 bench/matmul_table.py matmul.json     # the medians and the ratios, as docs/perf.md shows them
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <string>
#include <vector>

#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tensor/parallel.hpp"

using namespace tapegrad;

namespace {

struct Product {
  const char* name;
  Shape a, b;  // (..., n, k) and (..., k, m): the same batch, or none
};

const Product kProducts[] = {
    {"n=256", {256, 256}, {256, 256}},
    {"n=1024", {1024, 1024}, {1024, 1024}},
    {"batch=(16,4,64,64)", {16, 4, 64, 64}, {16, 4, 64, 64}},
};

Tensor random(const Shape& s, DType t) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, t);
}

Shape out_shape(const Product& p) {
  Shape s = p.a;
  s.set(s.ndim() - 1, p.b[p.b.ndim() - 1]);
  return s;
}

double flops(const Product& p) {
  const Shape out = out_shape(p);
  return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(p.a[p.a.ndim() - 1]);
}

void report(benchmark::State& state, const Product& p) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops(p) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void kernel(benchmark::State& state, const Product& p, DType t, int threads) {
  set_num_threads(threads);
  const Tensor a = random(p.a, t), b = random(p.b, t);
  Tensor out = Tensor::empty(out_shape(p), t);
  for (auto _ : state) {
    kernels::matmul(a, false, b, false, out);
    benchmark::DoNotOptimize(out.raw_data());
  }
  report(state, p);
}

void op(benchmark::State& state, const Product& p, DType t, int threads) {
  set_num_threads(threads);
  Graph g;
  Var a = g.parameter(random(p.a, t)), b = g.parameter(random(p.b, t));
  for (auto _ : state) {
    g.clear();
    benchmark::DoNotOptimize(ops::matmul(a, b).value().raw_data());
  }
  report(state, p);
}

void cblas(benchmark::State& state, const Product& p, DType t, int threads) {
  openblas_set_num_threads(threads);
  const Tensor a = random(p.a, t), b = random(p.b, t);
  Tensor out = Tensor::empty(out_shape(p), t);
  const int n = static_cast<int>(p.a[p.a.ndim() - 2]), k = static_cast<int>(p.a[p.a.ndim() - 1]),
            m = static_cast<int>(p.b[p.b.ndim() - 1]);
  const int64_t count = out.numel() / (int64_t{n} * m);
  for (auto _ : state) {
    for (int64_t i = 0; i < count; ++i) {
      if (t == DType::f64)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0, a.data<double>() + i * n * k, k,
                    b.data<double>() + i * k * m, m, 0.0, out.data<double>() + i * n * m, m);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0f, a.data<float>() + i * n * k, k,
                    b.data<float>() + i * k * m, m, 0.0f, out.data<float>() + i * n * m, m);
    }
    benchmark::DoNotOptimize(out.raw_data());
  }
  report(state, p);
}

}  // namespace

int main(int argc, char** argv) {
  using Fn = void (*)(benchmark::State&, const Product&, DType, int);
  const std::pair<const char*, Fn> impls[] = {{"kernel", kernel}, {"op", op}, {"cblas", cblas}};
  for (const Product& p : kProducts)
    for (DType t : {DType::f32, DType::f64})
      for (int threads : {1, 2})
        for (const auto& [impl, fn] : impls) {
          const std::string name = std::string("matmul/") + dtype_name(t) + "/" + p.name + "/threads=" +
                                   std::to_string(threads) + "/" + impl;
          benchmark::RegisterBenchmark(name.c_str(), fn, p, t, threads)->UseRealTime()->Unit(benchmark::kMicrosecond);
        }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
