// attention_bench: the fused scaled_dot_product_attention on the CUDA device it finds (not a timed
// test). For q, k, v (B, H, T, hd) f32 it times the forward kernels, the backward kernels and both,
// causal and not, and the op with its backward through the engine; it prints the median of each
// in ms and in TFLOP/s, counting 4 B H T^2 hd for the forward and 2.5 times that for the backward
// (halved when causal), as flash-attention papers count; then the forward and backward kernels with
// bf16 products (autocast). bench/attention_torch.py times PyTorch's
// scaled_dot_product_attention at the same sizes.
//
//   ./build-cuda/bench/attention_bench [reps] [B H T hd]     (default 20 8 16 1024 64)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/fused/attention.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;

namespace {

using Clock = std::chrono::steady_clock;

// Median wall time of f in ms over reps runs after up to 3 warm-up runs; f synchronizes.
double median_ms(int reps, const std::function<void()>& f) {
  for (int i = 0; i < std::min(reps, 3); ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

Tensor normal(const Shape& s, std::mt19937_64& rng, Device dev) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = n(rng);
  return Tensor::from_doubles(v, s, DType::f32, dev);
}

void row(const std::string& name, double ms, double flops) {
  std::printf("| %-56s | %9.3f ms | %7.2f TFLOP/s |\n", name.c_str(), ms, flops / (ms * 1e-3) / 1e12);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::printf("attention_bench: no CUDA device (%s)\n", cuda::no_device_reason().c_str());
    return 0;
  }
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  int64_t b = 8, h = 16, t = 1024, hd = 64;
  if (argc > 5) b = std::atoll(argv[2]), h = std::atoll(argv[3]), t = std::atoll(argv[4]), hd = std::atoll(argv[5]);
  const Device dev = Device::cuda(0);
  std::mt19937_64 rng(7);
  const Shape shape{b, h, t, hd}, rows{b, h, t};
  const Tensor q = normal(shape, rng, dev), k = normal(shape, rng, dev), v = normal(shape, rng, dev);
  const Tensor dout = normal(shape, rng, dev);
  Tensor out = Tensor::empty(shape, DType::f32, dev), lse = Tensor::empty(rows, DType::f32, dev);
  Tensor delta = Tensor::empty(rows, DType::f32, dev), dq = Tensor::empty(shape, DType::f32, dev);
  Tensor dk = Tensor::empty(shape, DType::f32, dev), dv = Tensor::empty(shape, DType::f32, dev);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const std::string size = " (" + std::to_string(b) + ", " + std::to_string(h) + ", " + std::to_string(t) + ", " +
                           std::to_string(hd) + ") f32";
  for (bool causal : {false, true}) {
    const double fwd_flops = 4.0 * b * h * t * t * hd / (causal ? 2 : 1), bwd_flops = 2.5 * fwd_flops;
    const std::string mode = causal ? ", causal" : "";
    auto forward = [&] { kernels::attention_forward(q, k, v, causal, scale, out, lse); };
    auto backward = [&] { kernels::attention_backward(q, k, v, out, dout, lse, causal, scale, delta, dq, dk, dv); };
    row("tapegrad forward" + size + mode, median_ms(reps, [&] { forward(); synchronize(dev); }), fwd_flops);
    forward();
    row("tapegrad backward" + size + mode, median_ms(reps, [&] { backward(); synchronize(dev); }), bwd_flops);
    row("tapegrad forward + backward" + size + mode, median_ms(reps, [&] {
          forward();
          backward();
          synchronize(dev);
        }),
        fwd_flops + bwd_flops);
    Graph g;  // the op and the engine: y = attention(q, k, v), backward of sum(y * dout)
    Var vq = g.parameter(q), vk = g.parameter(k), vv = g.parameter(v);
    row("tapegrad op + engine backward (+ mul, sum)" + size + mode, median_ms(reps, [&] {
          g.clear();
          g.zero_grad();
          Var y = ops::scaled_dot_product_attention(vq, vk, vv, causal);
          g.backward(ops::sum(ops::mul(y, g.input(dout))));
          synchronize(dev);
        }),
        fwd_flops + bwd_flops);
  }
  // bf16 products (autocast): the tensor-core kernels of Note [bf16 flash attention], through the
  // layout entry points, as qkv_attention calls them
  const kernels::AttentionLayout at = kernels::AttentionLayout::contiguous(b, h, t, t, hd, hd);
  const auto bf16 = kernels::AttentionProducts::bf16;
  // both product kernels where the device has the wgmma ones (Note [wgmma attention])
  for (int wgmma = 0; wgmma < (cuda::attention_wgmma_available(dev.index) ? 2 : 1); ++wgmma)
  for (bool causal : {false, true}) {
    cuda::set_attention_wgmma(wgmma == 1);
    const double fwd_flops = 4.0 * b * h * t * t * hd / (causal ? 2 : 1), bwd_flops = 2.5 * fwd_flops;
    const std::string mode = std::string(causal ? ", causal" : "") + (wgmma ? ", wgmma" : ", mma.sync");
    const std::string size_bf16 = size + " bf16 products";
    auto forward = [&] { kernels::attention_forward(q, k, v, at, causal, scale, out, lse, bf16); };
    auto backward = [&] {
      kernels::attention_backward(q, k, v, out, dout, lse, at, causal, scale, delta, dq, dk, dv, bf16);
    };
    row("tapegrad forward" + size_bf16 + mode, median_ms(reps, [&] { forward(); synchronize(dev); }), fwd_flops);
    if (wgmma) {  // Note [overlapped wgmma forward]: every kernel a product at a time, then dK/dV's overlapped too
      for (unsigned overlap : {0u, 7u}) {
        cuda::set_attention_overlap(overlap);
        const std::string how = overlap ? ", all overlapped" : ", a product at a time";
        row("tapegrad forward" + size_bf16 + mode + how, median_ms(reps, [&] { forward(); synchronize(dev); }), fwd_flops);
        forward();
        row("tapegrad backward" + size_bf16 + mode + how, median_ms(reps, [&] { backward(); synchronize(dev); }),
            bwd_flops);
      }
      cuda::set_attention_overlap(cuda::kOverlapDefault);
    }
    forward();
    row("tapegrad backward" + size_bf16 + mode, median_ms(reps, [&] { backward(); synchronize(dev); }), bwd_flops);
    row("tapegrad forward + backward" + size_bf16 + mode, median_ms(reps, [&] {
          forward();
          backward();
          synchronize(dev);
        }),
        fwd_flops + bwd_flops);
  }
  return 0;
}
