// N-d ops on the CPU against libtorch, in one binary (Google Benchmark; not a timed test): an
// elementwise chain, softmax and one causal self-attention block, each forward and backward
// through each library's engine, f32, on 1 and 2 threads. docs/perf-cpu.md has the figures and the
// machine.
//
//   ./build/bench/bench_nd --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// - Chain: y = gelu_tanh(x * w + b), x (rows, 768), w and b (768,) broadcast over the rows;
//   loss = sum(y * r). Arguments {elements, threads}.
// - Softmax: y = softmax(x, -1) over rows of 768; loss = sum(y * r). Arguments {elements, threads}.
// - Attention block (B = 16, T = 64, C = 128, H = 4): qkv = x W_qkv^T + b, split into heads,
//   causal scaled_dot_product_attention, heads joined, out = y W_o^T + b; loss = sum(out * r).
//   Argument {threads}. tapegrad's runs through ops::linear and the fused attention; libtorch's
//   through at::linear and the composite softmax(q k^T / sqrt(hd) + mask) v that libtorch 1.13 runs
//   on the CPU.
// Threads: Debian's libtorch multiplies through libblas.so.3, OpenBLAS here, whose own threads
// at::set_num_threads does not govern; with libtorch's two OpenMP threads each starting OpenBLAS's
// two, a 2-thread attention block took 52 ms instead of 8. So libtorch's benchmarks set OpenBLAS to
// one thread, as tapegrad's kernels do (Note [BLAS threads] in src/kernels/cpu/linalg.cpp): each
// library's thread count is its own intra-op threads.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <random>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/fused/attention.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tensor/parallel.hpp"

#if TAPEGRAD_BENCH_TORCH
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#endif

namespace {

using namespace tapegrad;
constexpr int64_t kC = 768;

std::vector<float> values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}
Tensor random(const Shape& s, uint64_t seed) { return Tensor::from_vector(values(s.numel(), seed), s); }

int64_t rows_of(const benchmark::State& state) { return std::max<int64_t>(1, state.range(0) / kC); }

void BM_TapegradChain(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = rows_of(state);
  const Tensor x = random({n, kC}, 1), w = random({kC}, 2), b = random({kC}, 3), r = random({n, kC}, 4);
  Graph g;
  Var X = g.parameter(x), W = g.parameter(w), B = g.parameter(b);
  for (auto _ : state) {
    g.clear();
    g.zero_grad();
    Var y = ops::gelu(ops::add(ops::mul(X, W), B), ops::Gelu::tanh);
    g.backward(ops::sum(ops::mul(y, g.input(r))));
    benchmark::DoNotOptimize(X.grad().raw_data());
  }
  state.counters["elements"] = static_cast<double>(n * kC);
}

void BM_TapegradSoftmax(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = rows_of(state);
  const Tensor x = random({n, kC}, 1), r = random({n, kC}, 4);
  Graph g;
  Var X = g.parameter(x);
  for (auto _ : state) {
    g.clear();
    g.zero_grad();
    g.backward(ops::sum(ops::mul(ops::softmax(X, -1), g.input(r))));
    benchmark::DoNotOptimize(X.grad().raw_data());
  }
  state.counters["elements"] = static_cast<double>(n * kC);
}

constexpr int64_t kB = 16, kT = 64, kD = 128, kH = 4, kHd = kD / kH;

void BM_TapegradAttentionBlock(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Graph g;
  Var x = g.parameter(random({kB, kT, kD}, 1));
  Var wqkv = g.parameter(random({3 * kD, kD}, 2)), bqkv = g.parameter(random({3 * kD}, 3));
  Var wo = g.parameter(random({kD, kD}, 4)), bo = g.parameter(random({kD}, 5));
  const Tensor r = random({kB, kT, kD}, 6);
  for (auto _ : state) {
    g.clear();
    g.zero_grad();
    std::vector<Var> qkv = ops::split(ops::linear(x, wqkv, bqkv), {kD, kD, kD}, -1);
    auto heads = [](Var t) { return ops::transpose(ops::reshape(t, {kB, kT, kH, kHd}), 1, 2); };  // (B, H, T, hd)
    Var y = ops::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true);
    Var out = ops::linear(ops::reshape(ops::transpose(y, 1, 2), {kB, kT, kD}), wo, bo);
    g.backward(ops::sum(ops::mul(out, g.input(r))));
    benchmark::DoNotOptimize(x.grad().raw_data());
  }
}

#if TAPEGRAD_BENCH_TORCH
at::Tensor torch_random(at::IntArrayRef shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v = values(n, seed);
  return at::from_blob(v.data(), shape, at::kFloat).clone();
}

void BM_TorchChain(benchmark::State& state) {
  openblas_set_num_threads(1);
  at::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = rows_of(state);
  at::Tensor x = torch_random({n, kC}, 1).requires_grad_(), w = torch_random({kC}, 2).requires_grad_(),
             b = torch_random({kC}, 3).requires_grad_(), r = torch_random({n, kC}, 4);
  for (auto _ : state) {
    x.mutable_grad().reset();
    w.mutable_grad().reset();
    b.mutable_grad().reset();
    at::Tensor y = at::gelu(x * w + b, "tanh");
    (y * r).sum().backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.counters["elements"] = static_cast<double>(n * kC);
}

void BM_TorchSoftmax(benchmark::State& state) {
  openblas_set_num_threads(1);
  at::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t n = rows_of(state);
  at::Tensor x = torch_random({n, kC}, 1).requires_grad_(), r = torch_random({n, kC}, 4);
  for (auto _ : state) {
    x.mutable_grad().reset();
    (at::softmax(x, -1) * r).sum().backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.counters["elements"] = static_cast<double>(n * kC);
}

void BM_TorchAttentionBlock(benchmark::State& state) {
  openblas_set_num_threads(1);
  at::set_num_threads(static_cast<int>(state.range(0)));
  at::Tensor x = torch_random({kB, kT, kD}, 1).requires_grad_();
  at::Tensor wqkv = torch_random({3 * kD, kD}, 2).requires_grad_(), bqkv = torch_random({3 * kD}, 3).requires_grad_();
  at::Tensor wo = torch_random({kD, kD}, 4).requires_grad_(), bo = torch_random({kD}, 5).requires_grad_();
  at::Tensor r = torch_random({kB, kT, kD}, 6);
  at::Tensor mask = at::ones({kT, kT}, at::kBool).triu(1);
  for (auto _ : state) {
    for (at::Tensor* p : {&x, &wqkv, &bqkv, &wo, &bo}) p->mutable_grad().reset();
    std::vector<at::Tensor> qkv = at::linear(x, wqkv, bqkv).split(kD, -1);
    auto heads = [](const at::Tensor& t) { return t.reshape({kB, kT, kH, kHd}).transpose(1, 2); };
    at::Tensor att = at::matmul(heads(qkv[0]), heads(qkv[1]).transpose(-2, -1)) / std::sqrt(static_cast<double>(kHd));
    at::Tensor y = at::matmul(at::softmax(att.masked_fill(mask, -INFINITY), -1), heads(qkv[2]));
    at::Tensor out = at::linear(y.transpose(1, 2).reshape({kB, kT, kD}), wo, bo);
    (out * r).sum().backward();
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
}
#endif

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {100000, 1000000, 10000000})
    for (int64_t t : {1, 2}) b->Args({n, t});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
void threads(benchmark::internal::Benchmark* b) { b->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime(); }

BENCHMARK(BM_TapegradChain)->Apply(sizes);
BENCHMARK(BM_TapegradSoftmax)->Apply(sizes);
BENCHMARK(BM_TapegradAttentionBlock)->Apply(threads);
#if TAPEGRAD_BENCH_TORCH
BENCHMARK(BM_TorchChain)->Apply(sizes);
BENCHMARK(BM_TorchSoftmax)->Apply(sizes);
BENCHMARK(BM_TorchAttentionBlock)->Apply(threads);
#endif

}  // namespace

BENCHMARK_MAIN();
