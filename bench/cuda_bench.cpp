// cuda_bench: what the CUDA backend costs, on the device it finds (not a timed test). Prints one
// table: the tiny step (f64) per step on CPU and GPU, a bob-shaped f32 update (gather a (256, 256)
// table, cross-entropy, backward, AdamW) per update op by op, the allocator's cudaMalloc count
// across the loop, and cuBLAS f32 matmul with and without TF32. bench/cuda_torch_baseline.py
// times the same bob-shaped update in PyTorch.
//
//   ./build-cuda/bench/cuda_bench [updates]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "cuda/cuda.hpp"
#include "graph/graph.hpp"
#include "ops/kernels.hpp"
#include "ops/ops.hpp"
#include "optim/sgd.hpp"

using namespace tapegrad;

namespace {

using Clock = std::chrono::steady_clock;

// Median wall time of `f` in microseconds over `reps` runs after `warmup` runs; f synchronizes.
double median_us(int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

Tensor uniform(const Shape& s, DType t, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, t);
}

Tensor bytes(int64_t n, std::mt19937_64& rng) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % 256);
  return Tensor::from_vector(v, Shape{n});
}

void row(const char* name, double value, const char* unit) { std::printf("| %-52s | %12.2f | %-8s |\n", name, value, unit); }

// The tiny step of apps/tiny_step (V = 4, d = 2, B = 3, f64): forward, backward, SGD.
double tiny_step_us(Device dev) {
  std::mt19937_64 rng(7);
  Graph g;
  Var E = g.parameter(uniform(Shape{4, 2}, DType::f64, rng, -0.5, 0.5).to(dev));
  Var W = g.parameter(uniform(Shape{2, 4}, DType::f64, rng, -0.5, 0.5).to(dev));
  Var b = g.parameter(Tensor::zeros(Shape{4}, DType::f64, dev));
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{0, 1, 0}, Shape{3}, dev);
  const Tensor targets = Tensor::from_vector(std::vector<int32_t>{2, 3, 2}, Shape{3}, dev);
  optim::SGD sgd(0.5);
  return median_us(20, 200, [&] {
    g.clear();
    g.zero_grad();
    Var logits = ops::add_row(ops::matmul(ops::gather(E, g.input(ids)), W), b);
    g.backward(ops::cross_entropy(logits, g.input(targets)));
    sgd.step(g.parameters());
    synchronize(dev);
  });
}

// bob's shape: a (256, 256) f32 table, 256 (byte, next byte) pairs, mean cross-entropy, AdamW.
struct BobShaped {
  Graph g;
  Var W;
  Tensor x, y, m, v;
  int step = 0;
  explicit BobShaped(Device dev) {
    std::mt19937_64 rng(11);
    W = g.parameter(uniform(Shape{256, 256}, DType::f32, rng, -0.1, 0.1).to(dev));
    x = bytes(256, rng).to(dev);
    y = bytes(256, rng).to(dev);
    m = Tensor::zeros(Shape{256, 256}, DType::f32, dev);
    v = Tensor::zeros(Shape{256, 256}, DType::f32, dev);
  }
  void update() {
    ++step;
    g.clear();
    g.zero_grad();
    g.backward(ops::cross_entropy(ops::gather(W, g.input(x)), g.input(y)));
    const double bc1 = 1.0 - std::pow(0.9f, step), bc2 = 1.0 - std::pow(0.95f, step);
    const kernels::AdamWScalars s{0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, static_cast<float>(0.1f / bc1),
                                  static_cast<float>(std::sqrt(bc2))};
    Tensor w = W.value();
    kernels::adamw_step(w, W.grad(), m, v, s);
  }
};

double matmul_tflops(bool tf32) {
  const int64_t n = 4096;
  std::mt19937_64 rng(3);
  const Tensor a = uniform(Shape{n, n}, DType::f32, rng, -1, 1).to(Device::cuda());
  const Tensor b = uniform(Shape{n, n}, DType::f32, rng, -1, 1).to(Device::cuda());
  Tensor c = Tensor::empty(Shape{n, n}, DType::f32, Device::cuda());
  cuda::set_allow_tf32(tf32);
  const double us = median_us(3, 20, [&] {
    kernels::matmul(a, false, b, false, c);
    synchronize(Device::cuda());
  });
  cuda::set_allow_tf32(false);
  return 2.0 * n * n * n / (us * 1e-6) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  const int updates = argc > 1 ? std::atoi(argv[1]) : 1000;
  if (cuda::device_count() == 0) {
    std::printf("cuda_bench: skipped: no CUDA device (%s)\n", cuda::no_device_reason().c_str());
    return 0;
  }
  const Device gpu = Device::cuda();
  std::printf("| %-52s | %12s | %-8s |\n", "measure", "value", "unit");
  row("tiny step f64 (fwd + bwd + SGD), CPU", tiny_step_us(Device::cpu()), "us/step");
  row("tiny step f64 (fwd + bwd + SGD), CUDA, sync per step", tiny_step_us(gpu), "us/step");

  BobShaped bob(gpu);
  for (int i = 0; i < 10; ++i) bob.update();
  synchronize(gpu);
  const cuda::AllocatorStats warm = cuda::allocator_stats();
  row("bob-shaped f32 update, CUDA, sync per update", median_us(10, updates, [&] {
        bob.update();
        synchronize(gpu);
      }), "us/upd");
  const auto start = Clock::now();
  for (int i = 0; i < updates; ++i) bob.update();
  synchronize(gpu);
  row("bob-shaped f32 update, CUDA, one sync per run", std::chrono::duration<double, std::micro>(Clock::now() - start).count() / updates,
      "us/upd");
  const cuda::AllocatorStats after = cuda::allocator_stats();
  row("cudaMalloc calls during the timed updates", static_cast<double>(after.cuda_malloc_count - warm.cuda_malloc_count),
      "calls");
  row("device bytes in use after them", static_cast<double>(after.bytes_in_use) / (1 << 20), "MiB");
  row("host fallbacks", static_cast<double>(host_fallback_count()), "count");

  BobShaped bob_cpu(Device::cpu());
  row("bob-shaped f32 update, CPU", median_us(5, std::max(updates / 10, 20), [&] { bob_cpu.update(); }), "us/upd");

  row("cuBLAS f32 matmul 4096^3, FP32", matmul_tflops(false), "TFLOP/s");
  row("cuBLAS f32 matmul 4096^3, TF32 allowed", matmul_tflops(true), "TFLOP/s");
  return 0;
}
