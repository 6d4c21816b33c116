// tests/cuda, normalisation and dropout: CUDA's kernels against the CPU's on fresh random inputs.
// dropout draws the CPU's mask (the same Philox words) and gives its bits; f64 layer_norm and
// rms_norm give the CPU's bits (correctly rounded sums on both); f32 within f32's rounding, with
// an f32 or a bf16 y and dy; every CUDA result the same bits run to run.
// (The op-case table's CUDA test in test_cuda.cpp runs these ops through the engine as well.)
// Tests named "[gpu] ..." need a device and SKIP without one (tests/needs.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "needs.hpp"
#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();
std::mt19937_64 rng;

Tensor random(const Shape& s, DType t, double lo = -2.0, double hi = 2.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, t);
}

// The same bits in every cell (each widened to double, which keeps f32's bits apart)
void same_bits(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  const std::vector<double> a = cpu.to_doubles(), b = gpu.to(kCpu).to_doubles();
  REQUIRE(a.size() == b.size());
  size_t first = 0;
  while (first < a.size() && std::bit_cast<uint64_t>(a[first]) == std::bit_cast<uint64_t>(b[first])) ++first;
  CHECK_MESSAGE(first == a.size(), what << ": the first difference is element " << first << ": cpu "
                                        << (first < a.size() ? a[first] : 0.0) << ", cuda " << (first < a.size() ? b[first] : 0.0));
}

// ||gpu - cpu|| <= tol * ||scale||, and every cell finite where the CPU's is. scale is the CPU's
// result itself, or for a sum whose terms may cancel, the sum of the terms' magnitudes: f32's
// rounding is relative to the terms, not to what is left of them.
void close(const Tensor& cpu, const Tensor& gpu, double tol, const std::string& what,
           const std::vector<double>& scale = {}) {
  INFO(what);
  const std::vector<double> a = cpu.to_doubles(), b = gpu.to(kCpu).to_doubles();
  REQUIRE(a.size() == b.size());
  const std::vector<double>& s = scale.empty() ? a : scale;
  REQUIRE(s.size() == a.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(std::isfinite(a[i]) == std::isfinite(b[i]));
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += s[i] * s[i];
  }
  CHECK(std::sqrt(diff) <= tol * std::sqrt(norm));
}

// The column sums' scales: sum over rows of |dy * xhat| (dweight) and of |dy| (dbias), from the
// CPU's x, dy, mean and rstd (x, dy (n, m); mean, rstd (n,); no mean for rms_norm).
std::vector<std::vector<double>> column_scales(const Tensor& x, const Tensor& dy, const Tensor& mean,
                                               const Tensor& rstd) {
  const int64_t n = x.dim(0), m = x.dim(1);
  const std::vector<double> xv = x.to_doubles(), dv = dy.to_doubles(), r = rstd.to_doubles();
  const std::vector<double> mu = mean.defined() ? mean.to_doubles() : std::vector<double>(static_cast<size_t>(n));
  std::vector<double> w(static_cast<size_t>(m)), b(static_cast<size_t>(m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      const auto e = static_cast<size_t>(i * m + j);
      w[static_cast<size_t>(j)] += std::abs(dv[e] * (xv[e] - mu[static_cast<size_t>(i)]) * r[static_cast<size_t>(i)]);
      b[static_cast<size_t>(j)] += std::abs(dv[e]);
    }
  return {w, b};
}

}  // namespace

TEST_CASE("[gpu] dropout draws the CPU's mask on CUDA, bit for bit, forward and backward") {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 3, 4, 4097, 1000003}) {
      for (double p : {0.1, 0.5, 0.9}) {
        const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) + " p=" + std::to_string(p);
        const Tensor x = random({n}, t), dy = random({n}, t);
        auto run = [&](Device device) {
          Graph g;
          Generator gen(0x5eed + static_cast<uint64_t>(n));
          (void)gen.take(11);  // an offset that is not 0
          Var xv = g.parameter(x.to(device));
          Var y = ops::dropout(xv, p, gen);
          g.backward(ops::sum(ops::mul(y, g.input(dy.to(device)))));
          return std::vector<Tensor>{y.value(), xv.grad()};
        };
        const std::vector<Tensor> cpu = run(kCpu), gpu = run(kGpu);
        same_bits(cpu[0], gpu[0], what + " forward");
        same_bits(cpu[1], gpu[1], what + " backward");
      }
    }
  }
}

TEST_CASE("[gpu] layer_norm and rms_norm kernels: f64 the CPU's bits, f32 within f32's rounding, bf16 y and dy") {
  struct Rows {
    int64_t n, c;
  };
  // one row of one; warps' strided columns with a tail; many rows (many blocks of the backward's
  // column sums, a last one short); wide rows (fewer warps a block); rows too wide for the
  // backward's shared memory with a weight and a bias (Note [norm backward blocks]: the column
  // kernel's path) but not with a weight alone; a GPT's rows; rows in registers (Note [norm
  // backward in registers]) of each chunk count, 260 leaving lanes without a last chunk
  for (const Rows r : {Rows{7, 1}, Rows{33, 45}, Rows{5000, 96}, Rows{40, 3000}, Rows{70, 7000}, Rows{2050, 768},
                       Rows{65, 260}, Rows{300, 512}, Rows{129, 1024}}) {
    for (DType t : {DType::f64, DType::f32}) {
      // y and dy: x's dtype, or bf16 for f32 rows (autocast's activations)
      for (DType io : {t, DType::bf16}) {
        if (io == DType::bf16 && t != DType::f32) continue;
        if (t == DType::f64 && r.n * r.c > 300000) continue;  // one thread a row: long enough above
        for (kernels::Norm kind : {kernels::Norm::layer, kernels::Norm::rms}) {
          for (int affine = 0; affine < 4; ++affine) {  // bit 0: weight, bit 1: bias (layer_norm only)
            if (kind == kernels::Norm::rms && (affine & 2)) continue;
            const std::string what = std::string(kind == kernels::Norm::layer ? "layer_norm " : "rms_norm ") +
                                     dtype_name(t) + " y " + dtype_name(io) + " (" + std::to_string(r.n) + ", " +
                                     std::to_string(r.c) + ") affine " + std::to_string(affine);
            const Tensor x = random({r.n, r.c}, t, -3.0, 5.0), dy = random({r.n, r.c}, io);
            const Tensor w = affine & 1 ? random({r.c}, t) : Tensor(), b = affine & 2 ? random({r.c}, t) : Tensor();
            const Tensor prior = random({r.n, r.c}, t);
            auto run = [&](Device device) {
              auto on = [&](const Tensor& v) { return v.defined() ? v.to(device) : Tensor(); };
              Tensor y = Tensor::empty(x.shape(), io, device), rstd = Tensor::empty({r.n}, t, device);
              Tensor mean = kind == kernels::Norm::layer ? Tensor::empty({r.n}, t, device) : Tensor();
              kernels::norm_rows(kind, on(x), on(w), on(b), 1e-5, y, mean, rstd);
              Tensor dx = Tensor::empty(x.shape(), t, device), db = b.defined() ? Tensor::empty({r.c}, t, device) : Tensor();
              Tensor dw = w.defined() ? Tensor::empty({r.c}, t, device) : Tensor();
              kernels::norm_rows_backward(kind, on(dy), on(x), on(w), mean, rstd, dx, dw, db);
              // dx added into a gradient so far as the kernel writes it (Note [adding into a
              // gradient]): the bits of making dx and adding it apart
              Tensor added = on(prior).clone(), apart = Tensor::empty(x.shape(), t, device), none;
              kernels::norm_rows_backward(kind, on(dy), on(x), on(w), mean, rstd, added, none, none, true);
              kernels::binary(kernels::Binary::add, on(prior), dx, apart);
              same_bits(added.to(kCpu), apart.to(kCpu), what + " dx added into a gradient on " + device.str());
              return std::vector<Tensor>{y, mean, rstd, dx, dw, db};
            };
            const std::vector<Tensor> cpu = run(kCpu), gpu = run(kGpu), again = run(kGpu);
            const char* names[] = {"y", "mean", "rstd", "dx", "dweight", "dbias"};
            // dweight and dbias sum down the columns, whose terms may cancel (7 rows of 1 column
            // of random signs often leave a small sum), so their bound is on the terms' magnitudes
            const std::vector<std::vector<double>> scales = column_scales(x, dy, cpu[1], cpu[2]);
            for (size_t k = 0; k < cpu.size(); ++k) {
              if (!cpu[k].defined()) continue;
              same_bits(gpu[k].to(kCpu), again[k], what + " " + names[k] + ": the same bits run to run");
              if (t == DType::f64) same_bits(cpu[k], gpu[k], what + " " + names[k]);
              // a bf16 y: the two devices' f32 values may differ in a last bit and round apart
              else if (k == 0 && io == DType::bf16) close(cpu[k], gpu[k], 1.0 / 256, what + " y");
              else close(cpu[k], gpu[k], 1e-6, what + " " + names[k], k >= 4 ? scales[k - 4] : std::vector<double>{});
            }
          }
        }
      }
    }
  }
}

// Note [the add before a norm]: the sum and the norm from one kernel have the bits of the add
// kernel and the norm kernel in turn, on CUDA, for an f32 or a bf16 r and an f32 or a bf16 y.
TEST_CASE("[gpu] add_norm_rows: the sum and the norm from one kernel, the bits of an add and a norm apart") {
  for (const Shape s : {Shape{7, 1}, Shape{33, 45}, Shape{2050, 768}, Shape{65, 260}, Shape{3, 5, 3000}})
    for (DType rt : {DType::f32, DType::bf16})
      for (DType io : {DType::f32, DType::bf16})
        for (kernels::Norm kind : {kernels::Norm::layer, kernels::Norm::rms})
          for (int affine = 0; affine < 4; ++affine) {
            if (kind == kernels::Norm::rms && (affine & 2)) continue;
            const int64_t c = s[s.ndim() - 1], n = s.numel() / c;
            const std::string what = std::string(kind == kernels::Norm::layer ? "layer " : "rms ") + s.str() + " r " +
                                     dtype_name(rt) + " y " + dtype_name(io) + " affine " + std::to_string(affine);
            const Tensor a = random(s, DType::f32, -3.0, 5.0).to(kGpu), r = random(s, rt).to(kGpu);
            const Tensor w = affine & 1 ? random({c}, DType::f32).to(kGpu) : Tensor();
            const Tensor b = affine & 2 ? random({c}, DType::f32).to(kGpu) : Tensor();
            auto outputs = [&] {
              return std::vector<Tensor>{Tensor::empty(s, DType::f32, kGpu), Tensor::empty(s, io, kGpu),
                                         kind == kernels::Norm::layer ? Tensor::empty({n}, DType::f32, kGpu) : Tensor(),
                                         Tensor::empty({n}, DType::f32, kGpu)};
            };
            std::vector<Tensor> one = outputs(), apart = outputs();
            kernels::add_norm_rows(kind, a, r, w, b, 1e-5, one[0], one[1], one[2], one[3]);
            kernels::binary(kernels::Binary::add, a, r, apart[0]);
            kernels::norm_rows(kind, apart[0], w, b, 1e-5, apart[1], apart[2], apart[3]);
            const char* names[] = {"sum", "y", "mean", "rstd"};
            for (size_t k = 0; k < one.size(); ++k)
              if (one[k].defined()) same_bits(apart[k].to(kCpu), one[k], what + " " + names[k]);
          }
}

int main(int argc, char** argv) {
  const bool device = cuda::device_count() > 0;
  if (device) {
    const char* env = std::getenv("TAPEGRAD_TEST_SEED");
    const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("test_norm_cuda: random seed %llu (TAPEGRAD_TEST_SEED=%llu repeats this run)\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
    rng.seed(seed);
  }
  return tapegrad::testing::run_tests(argc, argv, "test_norm_cuda",
                                      {{"gpu", device, "no CUDA device (" + cuda::no_device_reason() + ")"}});
}
