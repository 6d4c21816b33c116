// tests/value_embed on CUDA: every value-embed kernel against the CPU's on fresh random inputs (bit for
// bit wherever the arithmetic is the same: the gather, the deterministic backward, the pull, the
// sparse updates; within the f16 bound for the atomic backward, on both its paths), out-of-range ids
// reported as the CPU words them, 64-bit offsets on a table of more than 2^31 elements, and CUDA
// graph capture.
//
// Rule (as tests/cuda): tests named "[gpu] ..." need a device; without one they are skipped with ONE
// line saying why. A .cu file because the capture test needs the device's stream (cuda/common.cuh).
// TAPEGRAD_TEST_SEED=N repeats a run's random inputs; each GPU run prints its seed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "needs.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/value_embed.hpp"
#include "tapegrad/graph/graph.hpp"
#include "messages.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/ops/value_embed.hpp"
#include "tapegrad/kernels/value_embed_kernels.hpp"
#include "tapegrad/optim/sparse.hpp"
#include "value_embed_testing.hpp"

using namespace tapegrad;
using namespace ve_test;
using ops::ValueEmbedAccumulate;
using ops::ValueEmbedBuffer;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();
constexpr ValueEmbedAccumulate kAtomic = ValueEmbedAccumulate::atomic;
constexpr ValueEmbedAccumulate kDeterministic = ValueEmbedAccumulate::deterministic;

// An output full of NaN, so a cell a kernel forgets to write shows.
Tensor poisoned(const Shape& s, DType t) {
  return Tensor::from_doubles(std::vector<double>(static_cast<size_t>(s.numel()), std::numeric_limits<double>::quiet_NaN()),
                              s, t);
}

using testing::message_of;

// The same bytes; else the first differing element.
void check_bits(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  INFO(what);
  const std::vector<unsigned char> a = bytes(cpu), b = bytes(gpu);
  REQUIRE(a.size() == b.size());
  if (a == b) return;
  const std::vector<double> x = cpu.to_doubles(), y = gpu.to_doubles();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "first difference at element %zu: cpu %.9g, cuda %.9g", i, x[i], y[i]);
      FAIL(buf);
    }
}

// A buffer for (planes * vocab, d) with random starting values (a cycle's earlier steps).
ValueEmbedBuffer started_buffer(int planes, int64_t vocab, int64_t d, DType dtype) {
  ValueEmbedBuffer b = ValueEmbedBuffer::zeros(Tensor::empty(Shape{planes * vocab, d}, DType::f32), planes, dtype);
  b.sum = random(b.sum.shape(), dtype, -4.0, 4.0);
  return b;
}

// The same buffer on the GPU, with a workspace (as ValueEmbedBuffer::zeros makes one there).
ValueEmbedBuffer to_gpu(const ValueEmbedBuffer& b) {
  return {b.sum.to(kGpu), b.touched.to(kGpu),
          Tensor::zeros(Shape{kernels::value_embed_workspace_elements(kGpu, b.touched.dim(0))}, DType::i32, kGpu)};
}

// The atomic backward's two paths (Note [combining duplicate ids]): while one of these lives, CUDA
// combines duplicate ids at every size (combined) or never (per contribution, as without a workspace).
enum class Path { per_contribution, combined };
const char* path_name(Path p) { return p == Path::combined ? "combined" : "per contribution"; }

class ForcePath {
 public:
  explicit ForcePath(Path p) : saved_(cuda::value_embed_tuning()) {
    cuda::value_embed_tuning().combine_min_reductions = p == Path::combined ? 0 : std::numeric_limits<int64_t>::max();
  }
  ~ForcePath() { cuda::value_embed_tuning() = saved_; }
  ForcePath(const ForcePath&) = delete;
  ForcePath& operator=(const ForcePath&) = delete;

 private:
  cuda::ValueEmbedTuning saved_;
};

std::string case_name(DType g, DType s, int64_t d, int64_t t) {
  return std::string("gradient ") + dtype_name(g) + ", buffer " + dtype_name(s) + ", D " + std::to_string(d) + ", T " +
         std::to_string(t);
}

}  // namespace

TEST_CASE("[gpu] the gather equals the CPU's bit for bit, for every row width") {
  const int planes = 3;
  const int64_t vocab = 40, t = 257;
  for (DType table_type : {DType::bf16, DType::f32})
    for (DType id_type : {DType::i32, DType::i64})
      for (int64_t d : {768, 100, 7, 1}) {
        const std::string what = std::string(dtype_name(table_type)) + " table, " + dtype_name(id_type) + " ids, D " +
                                  std::to_string(d);
        const Tensor w = random(Shape{planes * vocab, d}, table_type);
        const Tensor ids = id_tensor(zipf_ids(t, vocab), id_type);
        for (DType out_type : {table_type, DType::f32}) {  // bf16 -> f32: widened
          Tensor out = poisoned(Shape{planes, t, d}, out_type), gout = out.to(kGpu);
          kernels::value_embed_gather(w, ids, out);
          kernels::value_embed_gather(w.to(kGpu), ids.to(kGpu), gout);
          check_bits(out, gout, what + " -> " + dtype_name(out_type));
        }
      }
}

TEST_CASE("[gpu] the deterministic backward gives the CPU's bits, run after run") {
  const int planes = 3;
  const int64_t vocab = 40;
  for (DType g : {DType::bf16, DType::f32})
    for (DType s : {DType::f16, DType::f32})
      for (int64_t d : {64, 10, 7})
        for (int64_t t : {1, 64, 2000}) {  // one position, one whole chunk, a hot id across ~7 chunks
          const std::string what = case_name(g, s, d, t);
          const std::vector<int64_t> ids = zipf_ids(t, vocab);
          const Tensor id_cpu = id_tensor(ids, DType::i64), id_gpu = id_cpu.to(kGpu);
          const Tensor dplanes = random(Shape{planes, t, d}, g), gdplanes = dplanes.to(kGpu);
          ValueEmbedBuffer cpu = started_buffer(planes, vocab, d, s);
          ValueEmbedBuffer first = to_gpu(cpu), second = to_gpu(cpu);
          kernels::value_embed_accumulate(dplanes, id_cpu, kDeterministic, cpu);
          kernels::value_embed_accumulate(gdplanes, id_gpu, kDeterministic, first);
          kernels::value_embed_accumulate(gdplanes, id_gpu, kDeterministic, second);
          check_bits(cpu.sum, first.sum, what + ": sum");
          check_bits(first.sum, second.sum, what + ": a second run");
          check_bits(cpu.touched, first.touched, what + ": touched");
        }
}

TEST_CASE("[gpu] the atomic backward is within the f16 bound of the fp64 sum, on Zipf-like ids, on both paths") {
  const int planes = 4;
  struct Size {
    int64_t vocab, t, d;
  };
  // Hot ids in runs across many chunks; a wider vocabulary; more ids than one group batch.
  const Size sizes[] = {{97, 3000, 768}, {97, 3000, 10}, {97, 3000, 7}, {5000, 6000, 96},
                        {300, kernels::kValueEmbedGroupBatch + 3001, 8}};
  for (Path path : {Path::per_contribution, Path::combined})
    for (DType g : {DType::bf16, DType::f32})
      for (DType s : {DType::f16, DType::f32})
        for (const Size& z : sizes) {
          const std::string what = case_name(g, s, z.d, z.t) + ", V " + std::to_string(z.vocab) + ", " + path_name(path);
          INFO(what);
          const ForcePath force(path);
          const std::vector<int64_t> ids = zipf_ids(z.t, z.vocab);
          const Tensor dplanes = random(Shape{planes, z.t, z.d}, g);
          ValueEmbedBuffer cpu = ValueEmbedBuffer::zeros(Tensor::empty(Shape{planes * z.vocab, z.d}, g), planes, s);
          ValueEmbedBuffer gpu = to_gpu(cpu);
          kernels::value_embed_accumulate(dplanes, id_tensor(ids, DType::i32), kAtomic, cpu);
          kernels::value_embed_accumulate(dplanes.to(kGpu), id_tensor(ids, DType::i64).to(kGpu), kAtomic, gpu);
          const Reference ref = reference(dplanes, ids, z.vocab);
          CHECK(accuracy(gpu.sum.to(kCpu), ref, false).worst_ratio <= 1.0);
          CHECK(accuracy(cpu.sum, ref, false).worst_ratio <= 1.0);
          check_bits(cpu.touched, gpu.touched, what + ": touched");
        }
}

TEST_CASE("[gpu] the training path through the engine: the buffer equals the CPU's (deterministic)") {
  const int planes = 2;
  const int64_t vocab = 30, t = 500, d = 16;
  const Tensor r = random(Shape{planes, t, d}, DType::f32);
  const Tensor ids = id_tensor(zipf_ids(t, vocab), DType::i32);
  for (DType table_type : {DType::f32, DType::bf16}) {  // a bf16 table gives f32 planes
    const Tensor w = random(Shape{planes * vocab, d}, table_type);
    auto run = [&](Device device) {
      Graph g;
      Var table = g.parameter(w.to(device));
      ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(table.value(), planes);
      Var y = ops::value_embed_lookup(table, g.input(ids.to(device)), planes, buffer, {kDeterministic, DType::f32});
      g.backward(ops::sum(ops::mul(y, g.input(r.to(device)))));
      CHECK_FALSE(table.grad().defined());
      return buffer.sum.to(kCpu);
    };
    check_bits(run(kCpu), run(kGpu), std::string("buffer, ") + dtype_name(table_type) + " table");
  }
}

TEST_CASE("[gpu] the training path through the engine: the atomic backward reaches the workspace") {
  const int planes = 2;
  const int64_t vocab = 30, t = 500, d = 16;
  std::vector<double> ints(static_cast<size_t>(planes * t * d));  // small integers: exact sums in any order
  for (size_t k = 0; k < ints.size(); ++k) ints[k] = static_cast<double>(static_cast<int64_t>(k % 5) - 2);
  const Tensor r = Tensor::from_doubles(ints, Shape{planes, t, d}, DType::f32);
  const Tensor ids = id_tensor(zipf_ids(t, vocab), DType::i32);
  const Tensor w = random(Shape{planes * vocab, d}, DType::f32);
  auto run = [&](Device device) {
    Graph g;
    Var table = g.parameter(w.to(device));
    ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(table.value(), planes, DType::f32);
    CHECK(buffer.workspace.defined() == device.is_cuda());
    Var y = ops::value_embed_lookup(table, g.input(ids.to(device)), planes, buffer, {kAtomic, std::nullopt});
    CHECK(g.nodes().back().inputs.size() == (device.is_cuda() ? 3 : 2));  // the workspace rides as an input
    g.backward(ops::sum(ops::mul(y, g.input(r.to(device)))));
    CHECK_FALSE(table.grad().defined());
    return buffer.sum.to(kCpu);
  };
  for (Path path : {Path::per_contribution, Path::combined}) {
    const ForcePath force(path);
    check_bits(run(kCpu), run(kGpu), std::string("buffer, ") + path_name(path));
  }
}

TEST_CASE("[gpu] the pull and the sparse updates equal the CPU's") {
  const int planes = 3;
  const int64_t vocab = 50, t = 700;
  for (DType table_type : {DType::bf16, DType::f32})
    for (int64_t d : {768, 10, 7}) {
      const std::string what = std::string(dtype_name(table_type)) + " table, D " + std::to_string(d);
      const Tensor w = random(Shape{planes * vocab, d}, table_type);
      Tensor cpu_table = w.clone(), gpu_table = w.to(kGpu);
      ValueEmbedBuffer cpu = ValueEmbedBuffer::zeros(w, planes), gpu = to_gpu(cpu);
      optim::AdamWConfig config;
      config.lr = 0.01f;
      optim::SparseAdamW cpu_adamw(cpu_table, config), gpu_adamw(gpu_table, config);
      for (int cycle = 0; cycle < 2; ++cycle) {
        const Tensor ids = id_tensor(zipf_ids(t, vocab), DType::i32), dplanes = random(Shape{planes, t, d}, DType::bf16);
        kernels::value_embed_accumulate(dplanes, ids, kDeterministic, cpu);
        kernels::value_embed_accumulate(dplanes.to(kGpu), ids.to(kGpu), kDeterministic, gpu);
        const ops::PulledRows cpu_rows = ops::value_embed_pull(cpu), gpu_rows = ops::value_embed_pull(gpu);
        check_bits(cpu_rows.rows, gpu_rows.rows, what + ": pulled row ids");
        check_bits(cpu_rows.grad, gpu_rows.grad, what + ": pulled rows");
        check_bits(cpu.sum, gpu.sum, what + ": the buffer after the pull");
        check_bits(cpu.touched, gpu.touched, what + ": touched after the pull");
        for (double x : gpu.sum.to_doubles()) REQUIRE(x == 0.0);
        if (cycle == 0) {
          optim::SparseSGD(0.5).step(cpu_table, cpu_rows);
          optim::SparseSGD(0.5).step(gpu_table, gpu_rows);
          check_bits(cpu_table, gpu_table, what + ": after sparse SGD");
        } else {
          cpu_adamw.step(cpu_table, cpu_rows);
          gpu_adamw.step(gpu_table, gpu_rows);
          check_bits(cpu_table, gpu_table, what + ": after sparse AdamW");
          check_bits(cpu_adamw.m(), gpu_adamw.m(), what + ": AdamW's m");
          check_bits(cpu_adamw.v(), gpu_adamw.v(), what + ": AdamW's v");
        }
      }
    }
}

TEST_CASE("[gpu] an out-of-range id is reported at the next synchronization, as the CPU words it") {
  const int planes = 2;
  const int64_t vocab = 6, d = 8;
  const Tensor w = random(Shape{planes * vocab, d}, DType::f32);
  const Tensor ids = id_tensor({0, 5, 9, 1, 11}, DType::i32);  // 9 at position 2 is the first bad one

  Graph cpu_graph;
  const std::string cpu_lookup = message_of([&] {
    ops::value_embed_lookup(cpu_graph.parameter(w), cpu_graph.input(ids), planes);
  });
  REQUIRE(cpu_lookup == "[value_embed_lookup] index 9 at position 2 is out of range for a table of 6 rows (shape (6, 8))");
  const std::string on_device = " (found on cuda:0, reported at the next synchronization)";

  Graph g;
  Var y = ops::value_embed_lookup(g.parameter(w.to(kGpu)), g.input(ids.to(kGpu)), planes);  // queued, no throw
  CHECK(message_of([] { synchronize(kGpu); }) == cpu_lookup + on_device);
  CHECK(message_of([] { synchronize(kGpu); }) == "(no error)");  // reported once
  const std::vector<double> planes_back = y.value().to_doubles();
  for (int64_t j = 0; j < d; ++j) CHECK(planes_back[static_cast<size_t>(2 * d + j)] == 0.0);  // the bad row is zeros

  for (auto [mode, path] : {std::pair{kAtomic, Path::per_contribution}, std::pair{kAtomic, Path::combined},
                            std::pair{kDeterministic, Path::per_contribution}}) {
    INFO(ops::value_embed_accumulate_name(mode), ", ", path_name(path));
    const ForcePath force(path);
    ValueEmbedBuffer cpu = ValueEmbedBuffer::zeros(w, planes), gpu = to_gpu(cpu);
    const Tensor dplanes = random(Shape{planes, 5, d}, DType::f32);
    const std::string cpu_backward =
        message_of([&] { kernels::value_embed_accumulate(dplanes, ids, mode, cpu); });
    REQUIRE(cpu_backward ==
            "[value_embed_backward] index 9 at position 2 is out of range for a table of 6 rows (shape (6, 8))");
    kernels::value_embed_accumulate(dplanes.to(kGpu), ids.to(kGpu), mode, gpu);
    CHECK(message_of([&] { ops::value_embed_pull(gpu); }) == cpu_backward + on_device);  // the pull reports it
    CHECK_NOTHROW(synchronize(kGpu));
  }
}

TEST_CASE("[gpu] a table of more than 2^31 elements: 64-bit offsets in every kernel") {
  const int planes = 2;
  const int64_t vocab = (int64_t{1} << 20) + 8, d = 1024;  // 2^31 + 16384 elements, 4 GiB in bf16
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  if (free_bytes < (size_t{14} << 30)) {
    MESSAGE("skipped: needs 14 GiB of free device memory, ", free_bytes >> 30, " GiB free");
    return;
  }
  Graph g;
  Var table = g.parameter(Tensor::zeros(Shape{planes * vocab, d}, DType::bf16, kGpu));
  REQUIRE(table.value().numel() > (int64_t{1} << 31));
  const std::vector<int64_t> ids{vocab - 1, 3, vocab - 2, vocab - 1};
  const Tensor dplanes = random(Shape{planes, 4, d}, DType::bf16);
  for (auto [mode, path] : {std::pair{kAtomic, Path::per_contribution}, std::pair{kAtomic, Path::combined},
                            std::pair{kDeterministic, Path::per_contribution}}) {
    INFO(ops::value_embed_accumulate_name(mode), ", ", path_name(path));
    const ForcePath force(path);
    // The same step on a small CPU table with the same rows: ids 3, V-2, V-1 become 0, 1, 2.
    const std::vector<int64_t> small_ids{2, 0, 1, 2};
    ValueEmbedBuffer small = ValueEmbedBuffer::zeros(Tensor::empty(Shape{planes * 3, d}, DType::bf16), planes);
    kernels::value_embed_accumulate(dplanes, id_tensor(small_ids, DType::i64), mode, small);
    const ops::PulledRows want = ops::value_embed_pull(small);

    ValueEmbedBuffer big = ValueEmbedBuffer::zeros(table.value(), planes);
    kernels::value_embed_accumulate(dplanes.to(kGpu), id_tensor(ids, DType::i64).to(kGpu), mode, big);
    const ops::PulledRows got = ops::value_embed_pull(big);
    CHECK(got.rows.to_doubles() == std::vector<double>{3, static_cast<double>(vocab - 2), static_cast<double>(vocab - 1),
                                                       static_cast<double>(vocab + 3), static_cast<double>(2 * vocab - 2),
                                                       static_cast<double>(2 * vocab - 1)});
    check_bits(want.grad, got.grad, "the pulled rows");

    // SGD writes -lr * g into the zero rows; the lookup reads them back from the far end of the table.
    Tensor t = table.value();
    t.zero_();
    optim::SparseSGD(1.0).step(t, got);
    Tensor small_table = Tensor::zeros(Shape{planes * 3, d}, DType::bf16);
    optim::SparseSGD(1.0).step(small_table, want);
    Var y = ops::value_embed_lookup(table, g.input(id_tensor(ids, DType::i32).to(kGpu)), planes);
    Graph h;
    Var small_y = ops::value_embed_lookup(h.parameter(small_table), h.input(id_tensor(small_ids, DType::i32)), planes);
    check_bits(small_y.value(), y.value(), "the gathered rows");
    g.clear();
  }
}

TEST_CASE("[gpu] the lookup and its atomic backward replay from a captured CUDA graph, on both paths") {
  const int planes = 4;
  const int64_t vocab = 64, t = 1000, d = 96;
  const Tensor w = random(Shape{planes * vocab, d}, DType::bf16), ids = id_tensor(zipf_ids(t, vocab), DType::i32);
  // Plane gradients of small integers: every sum (f32, and f16 below 2048) is exact, so neither the
  // order of the atomics nor the combining can show.
  std::vector<double> ints(static_cast<size_t>(planes * t * d));
  for (size_t k = 0; k < ints.size(); ++k) ints[k] = static_cast<double>(static_cast<int64_t>(k % 7) - 3);
  const Tensor dplanes = Tensor::from_doubles(ints, Shape{planes, t, d}, DType::bf16);
  Tensor planes_cpu = Tensor::empty(Shape{planes, t, d}, DType::bf16);
  kernels::value_embed_gather(w, ids, planes_cpu);
  const Tensor gw = w.to(kGpu), gids = ids.to(kGpu), gdplanes = dplanes.to(kGpu);

  for (Path path : {Path::per_contribution, Path::combined})
    for (DType dtype : {DType::f32, DType::f16}) {
      INFO(path_name(path), ", buffer ", dtype_name(dtype));
      const ForcePath force(path);
      ValueEmbedBuffer cpu = ValueEmbedBuffer::zeros(w, planes, dtype), gpu = to_gpu(cpu);
      for (int replay = 0; replay < 2; ++replay) kernels::value_embed_accumulate(dplanes, ids, kAtomic, cpu);

      Tensor gplanes = poisoned(Shape{planes, t, d}, DType::bf16).to(kGpu);
      synchronize(kGpu);
      cudaStream_t stream = cuda::context(0).stream;
      cudaGraph_t graph = nullptr;
      REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
      kernels::value_embed_gather(gw, gids, gplanes);  // neither may synchronize or allocate: capture would fail
      kernels::value_embed_accumulate(gdplanes, gids, kAtomic, gpu);
      REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
      cudaGraphExec_t exec = nullptr;
      REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
      for (int replay = 0; replay < 2; ++replay) REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
      synchronize(kGpu);
      check_bits(planes_cpu, gplanes, "planes");
      check_bits(cpu.sum, gpu.sum, "the buffer after two replays");
      check_bits(cpu.touched, gpu.touched, "touched");
      CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
      CHECK(cudaGraphDestroy(graph) == cudaSuccess);
    }
}

// The deterministic mode takes scratch from the allocator; inside tapegrad::capture that scratch
// comes from the graph's own pool (Note [graph pools] in src/cuda/memory.cu), so it replays too,
// and still gives the CPU's bits.
TEST_CASE("[gpu] the deterministic backward replays from tapegrad::capture, its scratch in the graph's pool") {
  const int planes = 4;
  const int64_t vocab = 64, t = 1000, d = 96;
  const Tensor w = random(Shape{planes * vocab, d}, DType::bf16), ids = id_tensor(zipf_ids(t, vocab), DType::i32);
  const Tensor dplanes = random(Shape{planes, t, d}, DType::bf16);
  const Tensor gids = ids.to(kGpu), gdplanes = dplanes.to(kGpu);
  for (DType dtype : {DType::f32, DType::f16}) {
    INFO("buffer ", dtype_name(dtype));
    ValueEmbedBuffer cpu = ValueEmbedBuffer::zeros(w, planes, dtype), gpu = to_gpu(cpu);
    for (int replay = 0; replay < 3; ++replay)
      kernels::value_embed_accumulate(dplanes, ids, ValueEmbedAccumulate::deterministic, cpu);
    std::unique_ptr<CapturedGraph> graph = capture(kGpu, [&] {
      kernels::value_embed_accumulate(gdplanes, gids, ValueEmbedAccumulate::deterministic, gpu);
    });
    const uint64_t mallocs = cuda::allocator_stats().cuda_malloc_count;
    for (int replay = 0; replay < 3; ++replay) graph->replay();
    synchronize(kGpu);
    CHECK(cuda::allocator_stats().cuda_malloc_count == mallocs);
    check_bits(cpu.sum, gpu.sum, "the buffer after three replays");
    check_bits(cpu.touched, gpu.touched, "touched");
  }
}

int main(int argc, char** argv) {
  // tests/needs.hpp: "[gpu]" tests need a device; meson runs this twice, --without=gpu (the host-side
  // tests) and --needs=gpu (a SKIP without a device)
  const bool device = cuda::device_count() > 0;
  if (device) {
    const char* env = std::getenv("TAPEGRAD_TEST_SEED");
    const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("%s: random seed %llu (TAPEGRAD_TEST_SEED=%llu repeats this run)\n", "test_value_embed_cuda",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
    rng().seed(seed);
  }
  return tapegrad::testing::run_tests(argc, argv, "test_value_embed_cuda",
                                      {{"gpu", device, "no CUDA device (" + cuda::no_device_reason() + ")"}});
}
