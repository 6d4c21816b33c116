// The value embeddings of examples/gpt at GPT-2's sizes, each way the example can look them up,
// timed and sized on one device (a measuring program, not a timed test; docs/nn.md has the figures):
//
//   gpt_value_embed [--device cuda|cpu] [--planes 3] [--vocab 50304] [--dim 768] [--tokens 49152]
//                   [--steps 20]
//
// What one training step of a GPT adds for P value-embed planes, the rest of the model left out
// (its cost is the same with or without them): the lookup, a backward that receives a gradient
// for the (P, T, D) planes, and the update of the (P V, D) f32 table.
// - sparse: ops::value_embed_lookup (deterministic mode, f32 buffer), the pull, SparseAdamW;
// - dense:  ops::embedding over ids + p V, the table's dense gradient, AdamW over the table.
// Reported per way: the median step time (host clock around a synchronized step) and the device
// memory the way holds beyond its inputs: the persistent state (table, moments, buffer or dense
// gradient) and the step's peak (CUDA only: the caching allocator's peak bytes in use).
#include <tapegrad/tapegrad.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/config.hpp"
#if TAPEGRAD_WITH_CUDA
#include "tapegrad/cuda/cuda.hpp"
#endif

using namespace tapegrad;

namespace {

// The device's caching allocator: bytes in use now and at the peak (0 on the CPU).
struct Memory {
  size_t in_use = 0, peak = 0;
};
Memory memory(Device d) {
#if TAPEGRAD_WITH_CUDA
  if (d.is_cuda()) {
    const cuda::AllocatorStats s = cuda::allocator_stats(d.index);
    return {s.bytes_in_use, s.peak_bytes_in_use};
  }
#endif
  (void)d;
  return {};
}
void reset_peak(Device d) {
#if TAPEGRAD_WITH_CUDA
  if (d.is_cuda()) cuda::reset_peak_bytes(d.index);
#endif
  (void)d;
}

Tensor filled(const Shape& s, float v, Device d) {
  return Tensor::from_vector(std::vector<float>(static_cast<size_t>(s.numel()), v), s, d);
}

double mib(size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cuda";
  int64_t P = 3, V = 50304, D = 768, T = 49152;
  int steps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--device") device_name = v;
    else if (a == "--planes") P = std::atoll(v.c_str());
    else if (a == "--vocab") V = std::atoll(v.c_str());
    else if (a == "--dim") D = std::atoll(v.c_str());
    else if (a == "--tokens") T = std::atoll(v.c_str());
    else if (a == "--steps") steps = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "gpt_value_embed: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const Device dev = parse_device(device_name);
    std::mt19937_64 rng(1);
    std::vector<int32_t> ids(static_cast<size_t>(T)), offset_ids(static_cast<size_t>(P * T));
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
    for (auto& t : ids) t = tok(rng);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t t = 0; t < T; ++t)
        offset_ids[static_cast<size_t>(p * T + t)] = ids[static_cast<size_t>(t)] + static_cast<int32_t>(p * V);
    const Tensor ids_t = Tensor::from_vector(ids, Shape{T}, dev);
    const Tensor offset_t = Tensor::from_vector(offset_ids, Shape{P, T}, dev);
    const Tensor r = filled(Shape{P, T, D}, 1e-3f, dev);  // the planes' upstream gradient
    std::printf("value embeddings: P=%lld planes of (V=%lld, D=%lld) f32, T=%lld tokens a step, on %s, %d steps\n",
                static_cast<long long>(P), static_cast<long long>(V), static_cast<long long>(D),
                static_cast<long long>(T), dev.str().c_str(), steps);
    std::printf("%-7s %14s %16s %14s\n", "way", "step (median)", "persistent MiB", "step peak MiB");
    for (const char* way : {"sparse", "dense"}) {
      const bool sparse = std::string(way) == "sparse";
      synchronize(dev);
      const size_t base = memory(dev).in_use;
      Graph g;
      Var table = g.parameter(filled(Shape{P * V, D}, 0.01f, dev), "ve.weight");
      ops::ValueEmbedBuffer buffer;
      std::optional<optim::SparseAdamW> sparse_opt;
      std::optional<optim::AdamW> dense_opt;
      if (sparse) {
        buffer = ops::ValueEmbedBuffer::zeros(table.value(), static_cast<int>(P), DType::f32);
        sparse_opt.emplace(table.value(), optim::AdamWConfig{.weight_decay = 0.0});
      } else {
        dense_opt.emplace(std::vector<Var>{table}, optim::AdamWConfig{.weight_decay = 0.0});
      }
      std::vector<double> ms;
      size_t held = 0, step_peak = 0;
      for (int s = 0; s < steps + 3; ++s) {
        synchronize(dev);
        reset_peak(dev);
        const auto t0 = std::chrono::steady_clock::now();
        g.clear();
        g.zero_grad();
        Var planes = sparse ? ops::value_embed_lookup(table, g.input(ids_t), static_cast<int>(P), buffer,
                                                      {.accumulate = ops::ValueEmbedAccumulate::deterministic, .dtype = std::nullopt})
                            : ops::embedding(table, g.input(offset_t));  // (P, T, D) either way
        g.backward(ops::sum(ops::mul(planes, g.input(r))));
        if (sparse) sparse_opt->step(table.value(), ops::value_embed_pull(buffer));
        else dense_opt->step();
        synchronize(dev);
        const auto t1 = std::chrono::steady_clock::now();
        if (s >= 3) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        step_peak = std::max(step_peak, memory(dev).peak - base);
        g.clear();
        synchronize(dev);
        held = memory(dev).in_use - base;
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%-7s %11.3f ms %16.1f %14.1f\n", way, ms[ms.size() / 2], mib(held), mib(step_peak));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt_value_embed: %s\n", e.what());
    return 2;
  }
  return 0;
}
