// value_embed --bench (see bench.hpp): times the value-embed kernels on cuda:0 and prints the tables
// of docs/value_embed.md.
//
// Rules: every GPU time is the median of `runs` CUDA-event timings on the device's stream, each run
// after a 512 MiB memset that flushes the L2 (as triton.testing.do_bench does, so baseline.py's
// numbers compare); the pull synchronizes by design, so it is timed on the host clock. Inputs are
// random (never zeros). GB/s counts the bytes a kernel must move at least: every row it reads and
// writes once.
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "bench.hpp"
#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/value_embed.hpp"
#include "tapegrad/ops/value_embed.hpp"
#include "tapegrad/kernels/value_embed_kernels.hpp"
#include "tapegrad/optim/sparse.hpp"

namespace ve_app {

using namespace tapegrad;
using ops::ValueEmbedAccumulate;

namespace {

const Device kGpu = Device::cuda(0);

// x[k] = uniform in [-1, 1) from a hash of (seed, k), rounded to bf16
__global__ void fill_uniform_kernel(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    uint64_t h = (static_cast<uint64_t>(k) + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[k] = __float2bfloat16_rn(static_cast<float>(h >> 40) * 0x1p-23f - 1.0f);
  }
}

// ref (P*V, D) f64 += every plane gradient at its row: the exact sum, up to fp64 rounding
__global__ void reference_kernel(const __nv_bfloat16* dplanes, const int32_t* ids, double* ref, int64_t n, int64_t t,
                                 int64_t vocab, int64_t d) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / d, p = r / t;
    atomicAdd(ref + (p * vocab + ids[r - p * t]) * d + (e - r * d), static_cast<double>(__bfloat162float(dplanes[e])));
  }
}

__device__ inline double as_double(__half x) { return __half2float(x); }
__device__ inline double as_double(float x) { return x; }

// sums[0] += (buf - ref)^2, sums[1] += ref^2, *max_bits = max |buf - ref| (non-negative doubles
// order as their bits do)
template <class S>
__global__ void error_kernel(const S* buf, const double* ref, int64_t n, double* sums, unsigned long long* max_bits) {
  __shared__ double s_diff[256], s_ref[256], s_max[256];
  double diff2 = 0.0, ref2 = 0.0, worst = 0.0;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const double diff = as_double(buf[k]) - ref[k];
    diff2 += diff * diff;
    ref2 += ref[k] * ref[k];
    worst = fmax(worst, fabs(diff));
  }
  s_diff[threadIdx.x] = diff2;
  s_ref[threadIdx.x] = ref2;
  s_max[threadIdx.x] = worst;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      s_diff[threadIdx.x] += s_diff[threadIdx.x + half];
      s_ref[threadIdx.x] += s_ref[threadIdx.x + half];
      s_max[threadIdx.x] = fmax(s_max[threadIdx.x], s_max[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(sums, s_diff[0]);
    atomicAdd(sums + 1, s_ref[0]);
    atomicMax(max_bits, static_cast<unsigned long long>(__double_as_longlong(s_max[0])));
  }
}

Tensor random_bf16(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s, DType::bf16, kGpu);
  fill_uniform_kernel<<<cuda::blocks_for(t.numel()), cuda::kBlock, 0, cuda::stream_for(t)>>>(
      static_cast<__nv_bfloat16*>(t.raw_data()), t.numel(), seed);
  TG_CUDA_CHECK_LAUNCH();
  return t;
}

// T ids in [0, V): uniform, or Zipf-like (rank k drawn with weight 1 / (k + 1), ranks scattered).
std::vector<int32_t> make_ids(bool zipf, int64_t t, int64_t vocab, std::mt19937_64& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(t));
  if (!zipf) {
    std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(vocab - 1));
    for (int32_t& id : ids) id = u(rng);
    return ids;
  }
  std::vector<double> weight(static_cast<size_t>(vocab));
  for (size_t k = 0; k < weight.size(); ++k) weight[k] = 1.0 / static_cast<double>(k + 1);
  std::discrete_distribution<int32_t> rank(weight.begin(), weight.end());
  std::vector<int32_t> id_of_rank(static_cast<size_t>(vocab));
  std::iota(id_of_rank.begin(), id_of_rank.end(), 0);
  std::shuffle(id_of_rank.begin(), id_of_rank.end(), rng);
  for (int32_t& id : ids) id = id_of_rank[static_cast<size_t>(rank(rng))];
  return ids;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The median time of `work` in ms over `runs` runs, each after flushing the L2 (CUDA events).
class Timer {
 public:
  explicit Timer(int runs) : runs_(runs), flush_(Tensor::empty(Shape{int64_t{1} << 27}, DType::i32, kGpu)) {
    TG_CUDA_CHECK(cudaEventCreate(&start_));
    TG_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  double median_ms(const std::function<void()>& work, bool flush = true) {
    cudaStream_t s = cuda::stream_for(flush_);
    work();  // warm-up: module load, allocator blocks
    std::vector<double> ms;
    for (int r = 0; r < runs_; ++r) {
      if (flush) TG_CUDA_CHECK(cudaMemsetAsync(flush_.raw_data(), r & 0xff, flush_.nbytes(), s));
      TG_CUDA_CHECK(cudaEventRecord(start_, s));
      work();
      TG_CUDA_CHECK(cudaEventRecord(stop_, s));
      TG_CUDA_CHECK(cudaEventSynchronize(stop_));
      float t = 0.0f;
      TG_CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_));
      ms.push_back(t);
    }
    synchronize(kGpu);  // reports any kernel error the runs recorded
    return median(ms);
  }
  // The same on the host clock, for work that synchronizes; `prepare` runs untimed before each run.
  double median_host_ms(const std::function<void()>& prepare, const std::function<void()>& work) {
    std::vector<double> ms;
    for (int r = 0; r <= runs_; ++r) {
      prepare();
      synchronize(kGpu);
      const auto t0 = std::chrono::steady_clock::now();
      work();
      synchronize(kGpu);
      const auto t1 = std::chrono::steady_clock::now();
      if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());  // run 0 warms up
    }
    return median(ms);
  }

 private:
  int runs_;
  Tensor flush_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

void write_file(const std::string& path, const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(host.raw_data(), 1, host.nbytes(), f) != host.nbytes() || std::fclose(f) != 0)
    throw Error("[value_embed --bench] cannot write " + path);
}

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

void run_bench(const BenchConfig& c, std::FILE* out) {
  if (cuda::device_count() == 0) throw DeviceError("[value_embed --bench] no CUDA device (" + cuda::no_device_reason() + ")");
  cudaDeviceProp prop{};
  TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int64_t planes = c.planes, vocab = c.vocab, d = c.dim;
  Timer timer(c.runs);

  // The ceiling: a 1 GiB device-to-device copy, bytes read plus bytes written.
  const Tensor src = Tensor::zeros(Shape{int64_t{1} << 28}, DType::i32, kGpu);
  Tensor dst = Tensor::empty(src.shape(), DType::i32, kGpu);
  const double copy_ms = timer.median_ms([&] {
    TG_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                  cuda::stream_for(dst)));
  }, false);
  const double copy_gbs = 2.0 * static_cast<double>(src.nbytes()) / copy_ms / 1e6;
  std::fprintf(out, "value_embed --bench on %s: P=%lld V=%lld D=%lld, table and plane gradients bf16, buffer f16 unless said; "
               "median of %d runs, L2 flushed before each\n", prop.name, static_cast<long long>(planes),
               static_cast<long long>(vocab), static_cast<long long>(d), c.runs);
  std::fprintf(out, "copy bandwidth (1 GiB device to device, read + write): %.0f GB/s\n\n", copy_gbs);

  const Tensor weight = random_bf16(Shape{planes * vocab, d}, 1);
  ops::ValueEmbedBuffer f16 = ops::ValueEmbedBuffer::zeros(weight, c.planes, DType::f16);
  ops::ValueEmbedBuffer f32 = ops::ValueEmbedBuffer::zeros(weight, c.planes, DType::f32);
  Tensor table = weight.clone();
  optim::AdamWConfig adamw_config;
  optim::SparseAdamW adamw(table, adamw_config);
  std::mt19937_64 rng(20261204);
  const auto gbs = [&](double bytes, double ms) { return bytes / ms / 1e6; };

  std::fprintf(out, "%-7s %6s %6s | %8s %6s %5s | %8s %6s %5s | %8s | %8s %8s %8s | %8s %8s %7s | %9s %9s\n", "ids", "T",
               "unique", "fwd ms", "GB/s", "%copy", "bwd ms", "GB/s", "%copy", "f+b ms", "det ms", "f32 ms",
               "f32det", "pull ms", "+adamw", "rows", "extra MiB", "det MiB");
  for (bool zipf : {false, true})
    for (int64_t t : {2048, 8192, 49152}) {
      const std::vector<int32_t> id_host = make_ids(zipf, t, vocab, rng);
      const int64_t unique = static_cast<int64_t>(std::set<int32_t>(id_host.begin(), id_host.end()).size());
      const Tensor ids = Tensor::from_vector(id_host, Shape{t}, kGpu);
      const Tensor dplanes = random_bf16(Shape{planes, t, d}, 2 + static_cast<uint64_t>(t));
      Tensor out_planes = Tensor::empty(Shape{planes, t, d}, DType::bf16, kGpu);
      const double plane_bytes = static_cast<double>(planes * t * d * 2);
      const double touched_elements = static_cast<double>(planes * unique * d);  // buffer cells the backward updates

      auto backward = [&](ValueEmbedAccumulate mode, ops::ValueEmbedBuffer& b) {
        return [&, mode] { kernels::value_embed_accumulate(dplanes, ids, mode, b); };
      };
      const double fwd = timer.median_ms([&] { kernels::value_embed_gather(weight, ids, out_planes); });
      const double bwd = timer.median_ms(backward(ValueEmbedAccumulate::atomic, f16));
      const double both = timer.median_ms([&] {
        kernels::value_embed_gather(weight, ids, out_planes);
        kernels::value_embed_accumulate(dplanes, ids, ValueEmbedAccumulate::atomic, f16);
      });
      const double det = timer.median_ms(backward(ValueEmbedAccumulate::deterministic, f16));
      const double atomic32 = timer.median_ms(backward(ValueEmbedAccumulate::atomic, f32));
      const double det32 = timer.median_ms(backward(ValueEmbedAccumulate::deterministic, f32));
      (void)ops::value_embed_pull(f32);

      int64_t rows = 0;
      const auto refill = backward(ValueEmbedAccumulate::atomic, f16);
      const double pull = timer.median_host_ms(refill, [&] { rows = ops::value_embed_pull(f16).count(); });
      const double pull_adamw = timer.median_host_ms(refill, [&] { adamw.step(table, ops::value_embed_pull(f16)); });

      // Device memory beyond the inputs: the planes the lookup allocates, and the backward's workspace.
      auto extra_mib = [&](ValueEmbedAccumulate mode) {
        synchronize(kGpu);
        const size_t before = cuda::allocator_stats(0).bytes_in_use;
        cuda::reset_peak_bytes(0);
        {
          Tensor planes_out = Tensor::empty(Shape{planes, t, d}, DType::bf16, kGpu);
          kernels::value_embed_gather(weight, ids, planes_out);
          kernels::value_embed_accumulate(dplanes, ids, mode, f16);
          synchronize(kGpu);
        }
        return static_cast<double>(cuda::allocator_stats(0).peak_bytes_in_use - before) / kMiB;
      };
      const double extra = extra_mib(ValueEmbedAccumulate::atomic), extra_det = extra_mib(ValueEmbedAccumulate::deterministic);
      (void)ops::value_embed_pull(f16);

      const double fwd_bytes = 2 * plane_bytes, bwd_bytes = plane_bytes + 2 * 2 * touched_elements;  // read + write, 2 bytes each
      std::fprintf(out, "%-7s %6lld %6lld | %8.4f %6.0f %4.0f%% | %8.4f %6.0f %4.0f%% | %8.4f | %8.4f %8.4f %8.4f | %8.3f %8.3f %7lld | %9.0f %9.0f\n",
                   zipf ? "zipf" : "uniform", static_cast<long long>(t), static_cast<long long>(unique), fwd,
                   gbs(fwd_bytes, fwd), 100 * gbs(fwd_bytes, fwd) / copy_gbs, bwd, gbs(bwd_bytes, bwd),
                   100 * gbs(bwd_bytes, bwd) / copy_gbs, both, det, atomic32, det32, pull, pull_adamw,
                   static_cast<long long>(rows), extra, extra_det);
      if (!c.out_dir.empty())
        write_file(c.out_dir + "/ids_" + (zipf ? "zipf_" : "uniform_") + std::to_string(t) + ".i32", ids);
    }

  // The atomic backward's two paths (Note [combining duplicate ids]), each forced at every size,
  // whichever the op would pick: each contribution its own reduction; the grouping of the ids alone;
  // grouping and runs.
  std::fprintf(out, "\nthe atomic backward's paths (f16 buffer), ms:\n%-7s %6s | %12s %9s %9s\n", "ids", "T",
               "per contrib.", "grouping", "combined");
  std::mt19937_64 path_rng(20261204);
  for (bool zipf : {false, true})
    for (int64_t t : {2048, 8192, 49152}) {
      const Tensor ids = Tensor::from_vector(make_ids(zipf, t, vocab, path_rng), Shape{t}, kGpu);
      const Tensor dplanes = random_bf16(Shape{planes, t, d}, 2 + static_cast<uint64_t>(t));
      cuda::ValueEmbedTuning& path = cuda::value_embed_tuning();
      const cuda::ValueEmbedTuning saved = path;
      auto once = [&] { kernels::value_embed_accumulate(dplanes, ids, ValueEmbedAccumulate::atomic, f16); };
      path.combine_min_reductions = std::numeric_limits<int64_t>::max();
      const double direct = timer.median_ms(once);
      path.combine_min_reductions = 0;
      path.group_only = true;
      const double grouping = timer.median_ms(once);
      path.group_only = false;
      const double combined = timer.median_ms(once);
      path = saved;
      (void)ops::value_embed_pull(f16);
      std::fprintf(out, "%-7s %6lld | %12.4f %9.4f %9.4f\n", zipf ? "zipf" : "uniform", static_cast<long long>(t),
                   direct, grouping, combined);
    }

  // Accuracy: one backward into a zero buffer on Zipf-like ids, each mode against the fp64 sum.
  const int64_t t = 49152;
  std::mt19937_64 accuracy_rng(7);
  const Tensor ids = Tensor::from_vector(make_ids(true, t, vocab, accuracy_rng), Shape{t}, kGpu);
  const Tensor dplanes = random_bf16(Shape{planes, t, d}, 99);
  Tensor ref = Tensor::zeros(Shape{planes * vocab, d}, DType::f64, kGpu);
  cudaStream_t stream = cuda::stream_for(ref);
  reference_kernel<<<cuda::blocks_for(dplanes.numel()), cuda::kBlock, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(dplanes.raw_data()), static_cast<const int32_t*>(ids.raw_data()),
      static_cast<double*>(ref.raw_data()), dplanes.numel(), t, vocab, d);
  TG_CUDA_CHECK_LAUNCH();
  std::fprintf(out, "\nerror against the fp64 sum, one backward of T=%lld Zipf-like ids into a zero buffer:\n",
               static_cast<long long>(t));
  std::fprintf(out, "%-14s %-6s %14s %14s\n", "mode", "buffer", "rel. L2 error", "max abs error");
  for (DType dtype : {DType::f16, DType::f32})
    for (ValueEmbedAccumulate mode : {ValueEmbedAccumulate::atomic, ValueEmbedAccumulate::deterministic}) {
      ops::ValueEmbedBuffer b = ops::ValueEmbedBuffer::zeros(weight, c.planes, dtype);
      kernels::value_embed_accumulate(dplanes, ids, mode, b);
      Tensor sums = Tensor::zeros(Shape{3}, DType::f64, kGpu);
      double* s = static_cast<double*>(sums.raw_data());
      auto launch = [&]<class S>() {
        error_kernel<S><<<1024, 256, 0, stream>>>(static_cast<const S*>(b.sum.raw_data()),
                                                   static_cast<const double*>(ref.raw_data()), b.sum.numel(), s,
                                                   reinterpret_cast<unsigned long long*>(s + 2));
        TG_CUDA_CHECK_LAUNCH();
      };
      if (dtype == DType::f16) launch.template operator()<__half>();
      else launch.template operator()<float>();
      const std::vector<double> e = sums.to_doubles();
      std::fprintf(out, "%-14s %-6s %14.3e %14.3e\n", ops::value_embed_accumulate_name(mode), dtype_name(dtype),
                   std::sqrt(e[0] / e[1]), e[2]);
      if (!c.out_dir.empty() && dtype == DType::f16)
        write_file(c.out_dir + "/ours_" + ops::value_embed_accumulate_name(mode) + "_zipf_49152.f16", b.sum);
    }
  if (!c.out_dir.empty()) {
    write_file(c.out_dir + "/accuracy_ids_zipf_49152.i32", ids);
    write_file(c.out_dir + "/accuracy_dplanes_zipf_49152.bf16", dplanes);
  }
}

}  // namespace ve_app
