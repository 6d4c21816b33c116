// CPU matrix products: tapegrad against OpenBLAS called directly, in the same binary (Google
// Benchmark; not a timed test). For f32 and f64, square products of n = 256 and 1024 and a batch
// (16, 4, 64, 64) @ (16, 4, 64, 64), with 1 and 2 threads, one benchmark runs three ways in turn,
// in short blocks, and reports each one's GFLOP/s (2 n m k per product), so that a machine shared
// with other work loads all three alike:
//   kernel  kernels::matmul into a tensor made once (set_num_threads(threads));
//   op      ops::matmul of two parameters: the output's allocation and the tape's record included;
//   cblas   cblas_sgemm / cblas_dgemm (one call per product of the batch), OpenBLAS set to the
//           thread count (its own threads).
// A second set times kernels::matmul_fsum, f64, one call per product: correctly rounded sums, what
// f64 matmul computed before BLAS (n = 1024 left out: seconds a product).
//
//   ./build/bench/bench_matmul --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
//       --benchmark_format=json > matmul.json   (one line)
//   python3 bench/matmul_table.py matmul.json     # medians and best runs, as docs/perf-cpu.md shows them
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
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

using Clock = std::chrono::steady_clock;

void cblas_products(const Product& p, DType t, const Tensor& a, const Tensor& b, Tensor& out) {
  const int n = static_cast<int>(p.a[p.a.ndim() - 2]), k = static_cast<int>(p.a[p.a.ndim() - 1]),
            m = static_cast<int>(p.b[p.b.ndim() - 1]);
  const int64_t count = out.numel() / (int64_t{n} * m);
  for (int64_t i = 0; i < count; ++i) {
    if (t == DType::f64)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0, a.data<double>() + i * n * k, k,
                  b.data<double>() + i * k * m, m, 0.0, out.mutable_data<double>() + i * n * m, m);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0f, a.data<float>() + i * n * k, k,
                  b.data<float>() + i * k * m, m, 0.0f, out.mutable_data<float>() + i * n * m, m);
  }
}

// kernel, op and cblas in turn (the file's comment), in blocks of about 10 ms each, every block
// after 2 ms of untimed calls. A pool's threads spin for a while after their last work, and the
// next way's calls would share the cores with them: tapegrad's workers for 500 us (Note
// [intra-op threads]), which the untimed calls cover, and OpenBLAS's for 2^28 TSC cycles (its
// THREAD_TIMEOUT default, about 0.1 s at 2.6 GHz), calling sched_yield, which would cover the
// kernel's and the op's blocks that follow. Hence, after a threaded cblas block, an untimed pause
// of kOpenBlasSpin before the next way (OPENBLAS_THREAD_TIMEOUT would shorten the spin, but then
// every threaded call would pay to wake its threads). The benchmark's own time is all of it; the
// counters are each way's GFLOP/s.
constexpr auto kOpenBlasSpin = std::chrono::milliseconds(250);  // 2^28 cycles down to a 1.1 GHz TSC

void three_ways(benchmark::State& state, const Product& p, DType t, int threads) {
  set_num_threads(threads);
  const Tensor a = random(p.a, t), b = random(p.b, t);
  Tensor out = Tensor::empty(out_shape(p), t), direct = Tensor::empty(out_shape(p), t);
  Graph g;
  Var va = g.parameter(a.clone()), vb = g.parameter(b.clone());
  auto call = [&](int way) {
    if (way == 0) {
      kernels::matmul(a, false, b, false, out);
    } else if (way == 1) {
      g.clear();
      benchmark::DoNotOptimize(ops::matmul(va, vb).value().raw_data());
    } else {
      openblas_set_num_threads(threads);
      cblas_products(p, t, a, b, direct);
    }
    benchmark::DoNotOptimize(out.raw_data());
    benchmark::DoNotOptimize(direct.raw_data());
  };
  auto seconds_since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  double seconds[3] = {0, 0, 0};
  int64_t calls[3] = {0, 0, 0};
  for (auto _ : state) {
    for (int way = 0; way < 3; ++way) {
      const Clock::time_point warm = Clock::now();
      while (seconds_since(warm) < 2e-3) call(way);
      const Clock::time_point t0 = Clock::now();
      do {
        call(way);
        ++calls[way];
      } while (seconds_since(t0) < 10e-3);
      seconds[way] += seconds_since(t0);
      if (way == 2 && threads > 1) std::this_thread::sleep_for(kOpenBlasSpin);
    }
  }
  const char* names[3] = {"kernel", "op", "cblas"};
  for (int way = 0; way < 3; ++way)
    state.counters[names[way]] = flops(p) * static_cast<double>(calls[way]) * 1e-9 / seconds[way];
}

void fsum(benchmark::State& state, const Product& p, DType t, int threads) {
  set_num_threads(threads);
  const int64_t n = p.a[p.a.ndim() - 2], k = p.a[p.a.ndim() - 1], m = p.b[p.b.ndim() - 1];
  std::vector<Tensor> as, bs, outs;  // the batch's products, one 2-D call each
  for (int64_t i = 0; i < out_shape(p).numel() / (n * m); ++i) {
    as.push_back(random(Shape{n, k}, t));
    bs.push_back(random(Shape{k, m}, t));
    outs.push_back(Tensor::empty(Shape{n, m}, t));
  }
  for (auto _ : state) {
    for (size_t i = 0; i < outs.size(); ++i) kernels::matmul_fsum(as[i], false, bs[i], false, outs[i]);
    benchmark::DoNotOptimize(outs.back().raw_data());
  }
  state.counters["fsum"] = benchmark::Counter(flops(p) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  for (const Product& p : kProducts)
    for (DType t : {DType::f32, DType::f64})
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark(
            (std::string("matmul/") + dtype_name(t) + "/" + p.name + "/threads=" + std::to_string(threads)).c_str(),
            three_ways, p, t, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
  for (const Product& p : kProducts)
    for (int threads : {1, 2})
      if (p.a[p.a.ndim() - 1] < 1024)
        benchmark::RegisterBenchmark(
            (std::string("matmul_fsum/f64/") + p.name + "/threads=" + std::to_string(threads)).c_str(), fsum, p,
            DType::f64, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
