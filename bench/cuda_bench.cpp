// cuda_bench: what the CUDA backend costs, on the device it finds (not a timed test). Prints one
// table: the tiny step (f64) per step on CPU and GPU; bob's update (apps/bob: gather a (256, 256)
// table, cross-entropy, backward, AdamW) per update, replayed as one CUDA graph of an invocation's
// 10 updates, op by op, and on the CPU, with the allocator's cudaMalloc count across the replays;
// and cuBLAS f32 matmul with and without TF32. bench/cuda_torch_baseline.py times the same update
// in PyTorch (eager, fused, and a CUDA graph of 10).
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

#include "bob_model.hpp"
#include "tapegrad/cuda/cuda.hpp"
#include "default_corpus.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/optim/sgd.hpp"

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

void row(const char* name, double value, const char* unit) {
  std::printf("| %-52s | %12.2f | %-8s |\n", name, value, unit);
  std::fflush(stdout);
}

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

// bob's model (apps/bob) on the record of its built-in corpus.
bob::Model bob_model(Device dev) {
  return bob::Model(io::make_record(bob::default_corpus, 0, {"Down the Rabbit", "she had peeped into th", ""}), dev);
}

// Median microseconds per update over `reps` invocations of 10 updates, synchronizing after each.
double bob_us(bob::Model& model, int reps) {
  return median_us(5, reps, [&] {
           model.updates(bob::updates_per_invocation);
           synchronize(model.table().value().device());
         }) /
         static_cast<double>(bob::updates_per_invocation);
}

// Device microseconds of `op` alone: 100 of it captured in one graph, the graph replayed 20 times.
double in_graph_us(const std::function<void()>& op) {
  const Device gpu = Device::cuda();
  op();  // warm: handles, first-use allocations
  std::unique_ptr<CapturedGraph> graph = capture(gpu, [&] {
    for (int k = 0; k < 100; ++k) op();
  });
  return median_us(2, 20, [&] {
           graph->replay();
           synchronize(gpu);
         }) /
         100.0;
}

// bob's update, kernel by kernel, on the tensors an update uses (each timed in a graph of 100).
void bob_kernels(bob::Model& model) {
  model.update();  // W has its gradient; the tape holds the last update
  const Tensor& w = model.table().value();
  const Tensor x = model.inputs().first, y = model.inputs().second;
  const Device gpu = Device::cuda();
  Tensor logits = Tensor::empty(Shape{256, 256}, DType::f32, gpu), probs = Tensor::empty(Shape{256, 256}, DType::f32, gpu);
  Tensor losses = Tensor::empty(Shape{256}, DType::f32, gpu), loss = Tensor::empty(Shape{}, DType::f32, gpu);
  Tensor seed = Tensor::empty(Shape{}, DType::f32, gpu), dlogits = Tensor::empty(Shape{256, 256}, DType::f32, gpu);
  Tensor dw = Tensor::zeros(Shape{256, 256}, DType::f32, gpu);
  Tensor w2 = w.clone(), m = Tensor::zeros(Shape{256, 256}, DType::f32, gpu), v = Tensor::zeros(Shape{256, 256}, DType::f32, gpu);
  kernels::gather_rows(w, x, logits);
  const kernels::AdamWScalars s{0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.5f, 0.5f};
  row("  in a graph: gather (256 rows of 256)", in_graph_us([&] { kernels::gather_rows(w, x, logits); }), "us");
  row("  in a graph: cross-entropy with its mean", in_graph_us([&] {
        kernels::cross_entropy_reduced(logits, y, probs, losses, loss, true);
      }), "us");
  row("  in a graph: the backward's seed (fill)", in_graph_us([&] { kernels::fill(seed, 1.0); }), "us");
  row("  in a graph: cross-entropy backward", in_graph_us([&] {
        kernels::cross_entropy_backward(probs, y, seed, 256.0, dlogits);
      }), "us");
  row("  in a graph: zeros for dW (memset)", in_graph_us([&] { dw.zero_(); }), "us");
  row("  in a graph: gather backward into an existing dW", in_graph_us([&] {
        kernels::scatter_rows(dw, x, dlogits, false);
      }), "us");
  row("  in a graph: gather backward into a new dW (no memset)", in_graph_us([&] {
        kernels::scatter_rows_fresh(dw, x, dlogits, false);
      }), "us");
  row("  in a graph: AdamW", in_graph_us([&] { kernels::adamw_step(w2, dw, m, v, s); }), "us");
}

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

  // bob: an invocation's 10 updates as one CUDA graph (the default), op by op, and on the CPU
  const int invocations = std::max(updates / 10, 20);
  bob::Model graphed = bob_model(gpu);
  graphed.updates(bob::updates_per_invocation);  // captures
  synchronize(gpu);
  const cuda::AllocatorStats warm = cuda::allocator_stats();
  const uint64_t fallbacks = host_fallback_count();
  row("bob update, CUDA graph of 10 updates, sync per 10", bob_us(graphed, invocations), "us/upd");
  row("  the graph's nodes (kernels, fills), per update",
      static_cast<double>(graphed.graph_nodes()) / bob::updates_per_invocation, "nodes");
  const cuda::AllocatorStats after = cuda::allocator_stats();
  row("  cudaMalloc calls during the timed replays", static_cast<double>(after.cuda_malloc_count - warm.cuda_malloc_count),
      "calls");
  row("  graph pool", static_cast<double>(after.graph_pool_bytes) / (1 << 20), "MiB");
  bob_kernels(graphed);
  bob::Model eager = bob_model(gpu);
  eager.set_graphs(false);
  row("bob update, CUDA op by op, sync per 10", bob_us(eager, invocations), "us/upd");
  row("bob update, CUDA op by op, sync per update", median_us(10, updates, [&] {
        eager.update();
        synchronize(gpu);
      }), "us/upd");
  row("host fallbacks during the CUDA updates", static_cast<double>(host_fallback_count() - fallbacks), "count");
  bob::Model on_cpu = bob_model(Device::cpu());
  row("bob update, CPU", bob_us(on_cpu, invocations / 4), "us/upd");

  row("cuBLAS f32 matmul 4096^3, FP32", matmul_tflops(false), "TFLOP/s");
  row("cuBLAS f32 matmul 4096^3, TF32 allowed", matmul_tflops(true), "TFLOP/s");
  return 0;
}
