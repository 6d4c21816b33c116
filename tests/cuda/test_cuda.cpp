// tests/cuda: every CUDA kernel against the CPU kernel on fresh random inputs (f64 bit for bit,
// f32 bit for bit where the arithmetic is the same and within a tolerance fitting f32 where CUDA's
// expf/logf/tanhf or cuBLAS differ), the device error paths asserted by their messages, the
// caching allocator, and the host-side ports the kernels rely on (cr_exp/cr_log, ExactSum).
//
// Rule: tests named "[gpu] ..." need a device. Without one they are skipped with ONE line saying
// why, and the host-side tests still run, so CI (which compiles CUDA but has no GPU) passes.
// TAPEGRAD_TEST_SEED=N repeats a run's random inputs; each GPU run prints its seed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "needs.hpp"
#include "op_cases.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/cuda/exact_sum.cuh"
#include "tapegrad/graph/graph.hpp"
#include "messages.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/cr_math.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/ops/fused/attention.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/sgd.hpp"
// parameter groups, gradient transforms, optimizer state
#include "optim/gradients.hpp"
#include "tapegrad/optim/clip.hpp"

using namespace tapegrad;
using kernels::Binary;
using kernels::Unary;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();
std::mt19937_64 rng;

std::vector<double> uniform(size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}
Tensor random(const Shape& s, DType t, double lo = -2.0, double hi = 2.0) {
  return Tensor::from_doubles(uniform(static_cast<size_t>(s.numel()), lo, hi), s, t);
}
// t rounded to bf16, on the CPU.
Tensor bf(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::bf16);
  kernels::cast(t, out);
  return out;
}
// An output buffer full of NaN (integers: -1), so a cell a kernel forgets to write shows.
Tensor poisoned(const Shape& s, DType t) {
  const double poison = is_floating(t) ? std::numeric_limits<double>::quiet_NaN() : -1.0;
  return Tensor::from_doubles(std::vector<double>(static_cast<size_t>(s.numel()), poison), s, t);
}
Tensor index_tensor(const std::vector<int64_t>& ids, DType t) {
  std::vector<double> v(ids.begin(), ids.end());
  return Tensor::from_doubles(v, Shape{static_cast<int64_t>(ids.size())}, t);
}

// Runs f over host tensors `args` (inputs and outputs alike), then over copies of them on cuda:0;
// returns the device's args, copied back to the host, to compare with the host's.
std::vector<Tensor> run_both(std::vector<Tensor>& args, const std::function<void(std::vector<Tensor>&)>& f) {
  std::vector<Tensor> gpu;
  for (const Tensor& t : args) gpu.push_back(t.to(kGpu));
  f(args);
  f(gpu);
  std::vector<Tensor> back;
  for (const Tensor& t : gpu) back.push_back(t.to(kCpu));
  return back;
}

// The same bytes (NaNs compare by their bits too).
void check_bits(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  INFO(what);
  REQUIRE(cpu.nbytes() == gpu.nbytes());
  if (std::memcmp(cpu.raw_data(), gpu.raw_data(), cpu.nbytes()) == 0) return;
  const std::vector<double> a = cpu.to_doubles(), b = gpu.to_doubles();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "first difference at element %zu: cpu %.17g, cuda %.17g", i, a[i], b[i]);
      FAIL(buf);
    }
}

// f64 cells at most max_ulps apart. For results that go through exp or log: the CPU calls glibc's,
// CUDA the correctly rounded cr_exp/cr_log, which differ where glibc misrounds by one ulp
// (Note [exp and log on each device] in src/kernels/cr_math.hpp).
void check_ulps(const Tensor& cpu, const Tensor& gpu, int64_t max_ulps, const std::string& what) {
  INFO(what);
  const std::vector<double> a = cpu.to_doubles(), b = gpu.to_doubles();
  REQUIRE(a.size() == b.size());
  int64_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t ia, ib;
    std::memcpy(&ia, &a[i], 8);
    std::memcpy(&ib, &b[i], 8);
    if (ia < 0) ia = INT64_MIN - ia;  // order the bit patterns like the numbers
    if (ib < 0) ib = INT64_MIN - ib;
    worst = std::max(worst, ia > ib ? ia - ib : ib - ia);
  }
  CHECK_MESSAGE(worst <= max_ulps, "cells differ by up to ", worst, " ulps");
}

// ||gpu - cpu|| / ||cpu|| below tol, no NaN, and every cell written.
void check_close(const Tensor& cpu, const Tensor& gpu, double tol, const std::string& what) {
  INFO(what);
  const std::vector<double> a = cpu.to_doubles(), b = gpu.to_doubles();
  REQUIRE(a.size() == b.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE_MESSAGE(std::isfinite(b[i]) == std::isfinite(a[i]), "element ", i, ": cpu ", a[i], ", cuda ", b[i]);
    if (!std::isfinite(a[i])) continue;
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += a[i] * a[i];
  }
  CHECK(std::sqrt(diff) <= tol * std::sqrt(norm));
}

const char* name(DType t) { return dtype_name(t); }
constexpr DType kFloats[] = {DType::f64, DType::f32};

using testing::message_of;

}  // namespace

// ---------------------------------------------------------------------------
// host side: runs everywhere

TEST_CASE("cr_exp and cr_log are correctly rounded (against long double, away from midpoints)") {
  std::mt19937_64 local(20261130);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int checked = 0;
  // ref rounds to r unless ref is within 1/64 ulp of a midpoint, where long double is too coarse to say.
  auto correctly_rounded = [&](double got, long double ref) {
    const double r = static_cast<double>(ref);
    if (!std::isfinite(r) || r == 0.0) return got == r;
    const long double ulp = std::nextafter(std::fabs(r), INFINITY) - std::fabs(r);
    const long double off = std::fabs(ref - static_cast<long double>(r)) / ulp;  // in [0, 1/2]
    if (off > 0.5L - 1.0L / 64) return true;
    ++checked;
    return got == r;
  };
  for (int i = 0; i < 200000; ++i) {
    const double a = u(local);
    const double xe = i % 4 == 0 ? -40.0 * a : i % 4 == 1 ? 1400.0 * a - 700.0 : i % 4 == 2 ? (a - 0.5) * 1e-6 : (a - 0.5) * 20;
    CHECK_MESSAGE(correctly_rounded(cr_exp(xe), std::exp(static_cast<long double>(xe))), "exp of ", xe);
    const double xl = i % 3 == 0 ? 4.0 * a + 1e-300 : i % 3 == 1 ? std::ldexp(1.0 + a, static_cast<int>(local() % 2000) - 1000)
                                                               : 1.0 + (a - 0.5) * 1e-3;
    CHECK_MESSAGE(correctly_rounded(cr_log(xl), std::log(static_cast<long double>(xl))), "log of ", xl);
  }
  CHECK(checked > 380000);  // about 3% of the samples are too close to a midpoint to judge
  CHECK(cr_exp(0.0) == 1.0);
  CHECK(cr_log(1.0) == 0.0);
  CHECK(std::isinf(cr_exp(710.0)));
  CHECK(cr_exp(-746.0) == 0.0);
  CHECK(cr_exp(-745.0) == std::exp(-745.0));  // subnormal: 2^-1074 * 1 (and glibc agrees)
  CHECK(cr_log(0.0) == -INFINITY);
  CHECK(std::isnan(cr_log(-1.0)));
  CHECK(std::isnan(cr_exp(NAN)));
  CHECK(cr_log(0x1p-1074) == std::log(0x1p-1074));
}

TEST_CASE("ExactSum (the device's fsum) gives the CPU exact_sum's bits") {
  std::mt19937_64 local(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto check = [](const std::vector<double>& v) {
    cuda::ExactSum acc;
    for (double x : v) acc.add(x);
    const double got = acc.result(), want = cpu::exact_sum(v.data(), v.size());
    CHECK(!acc.out_of_partials);
    CHECK_MESSAGE(std::memcmp(&got, &want, sizeof got) == 0, "n = ", v.size(), ": ", got, " vs ", want);
  };
  check({});
  check({1e-16, 1.0, 1e16});
  check({1e100, 1.0, -1e100, 1e-100});
  check({INFINITY, 1.0});
  check({INFINITY, -INFINITY});
  check({-0.0, -0.0});
  check({0.1, 0.2, 0.3, -0.6});
  for (int n = 1; n < 300; n += 7) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = std::ldexp(u(local), static_cast<int>(local() % 200) - 100);  // wide exponents
    check(v);
    for (double& x : v) x = u(local);  // plain
    check(v);
  }
}

// ---------------------------------------------------------------------------
// GPU: every kernel against the CPU

TEST_CASE("[gpu] elementwise kernels") {
  const Shape s{7, 33};
  for (DType t : kFloats) {
    const std::string d = name(t);
    std::vector<Tensor> args{poisoned(s, t)};
    auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::fill(a[0], 0.37); });
    check_bits(args[0], back[0], d + " fill");

    args = {poisoned(s, t), random(Shape{}, t)};
    back = run_both(args, [](std::vector<Tensor>& a) { kernels::fill_from_scalar(a[0], a[1], 7.0); });
    check_bits(args[0], back[0], d + " fill_from_scalar");

    for (Unary op : {Unary::neg, Unary::exp, Unary::log, Unary::tanh, Unary::relu}) {
      const std::string what = d + " " + kernels::unary_name(op);
      Tensor x = op == Unary::log ? random(s, t, 0.01, 5.0) : random(s, t);
      args = {x, poisoned(s, t)};
      back = run_both(args, [op](std::vector<Tensor>& a) { kernels::unary(op, a[0], a[1]); });
      const bool same_math = op == Unary::neg || op == Unary::relu;
      if (same_math) check_bits(args[1], back[1], what);
      else if (t == DType::f64 && op != Unary::tanh) check_ulps(args[1], back[1], 1, what);  // glibc vs cr_exp/cr_log
      else check_close(args[1], back[1], t == DType::f64 ? 1e-15 : 1e-6, what);

      args = {x, args[1], random(s, t), poisoned(s, t)};  // x, y = f(x) from the CPU, dy, dx
      back = run_both(args, [op](std::vector<Tensor>& a) { kernels::unary_backward(op, a[0], a[1], a[2], a[3]); });
      check_bits(args[3], back[3], what + " backward");
    }
    for (Binary op : {Binary::add, Binary::sub, Binary::mul, Binary::div}) {
      args = {random(s, t), random(s, t, 0.5, 3.0), poisoned(s, t)};
      back = run_both(args, [op](std::vector<Tensor>& a) { kernels::binary(op, a[0], a[1], a[2]); });
      check_bits(args[2], back[2], d + " " + kernels::binary_name(op));
    }
    args = {random(s, t), poisoned(s, t)};
    back = run_both(args, [](std::vector<Tensor>& a) { kernels::scale(a[0], -0.3, a[1]); });
    check_bits(args[1], back[1], d + " scale");
  }
}

TEST_CASE("[gpu] matmul, transpose, add_row and reductions") {
  for (DType t : kFloats) {
    const std::string d = name(t);
    const int64_t n = 9, k = 37, m = 13;
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      std::vector<Tensor> args{random(ta ? Shape{k, n} : Shape{n, k}, t), random(tb ? Shape{m, k} : Shape{k, m}, t),
                               poisoned(Shape{n, m}, t)};
      auto back = run_both(args, [&](std::vector<Tensor>& a) { kernels::matmul(a[0], ta, a[1], tb, a[2]); });
      const std::string what = d + " matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
      check_close(args[2], back[2], t == DType::f64 ? 1e-14 : 1e-6, what);  // cuBLAS against OpenBLAS
      if (t == DType::f64) {  // the tiny step's product: correctly rounded sums on both, the same bits
        std::vector<Tensor> fsum{args[0], args[1], poisoned(Shape{n, m}, t)};
        auto fsum_back = run_both(fsum, [&](std::vector<Tensor>& a) { kernels::matmul_fsum(a[0], ta, a[1], tb, a[2]); });
        check_bits(fsum[2], fsum_back[2], "matmul_fsum ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      }
    }
    std::vector<Tensor> args{random(Shape{11, 6}, t), poisoned(Shape{6, 11}, t)};
    auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::transpose(a[0], a[1]); });
    check_bits(args[1], back[1], d + " transpose");

    args = {random(Shape{11, 6}, t), random(Shape{6}, t), poisoned(Shape{11, 6}, t)};
    back = run_both(args, [](std::vector<Tensor>& a) { kernels::add_row(a[0], a[1], a[2]); });
    check_bits(args[2], back[2], d + " add_row");

    args = {random(Shape{300, 17}, t), poisoned(Shape{17}, t)};
    back = run_both(args, [](std::vector<Tensor>& a) { kernels::sum_rows(a[0], a[1]); });
    check_bits(args[1], back[1], d + " sum_rows");

    args = {random(Shape{1001}, t), poisoned(Shape{}, t), poisoned(Shape{}, t)};
    back = run_both(args, [](std::vector<Tensor>& a) {
      kernels::sum_all(a[0], a[1]);
      kernels::mean_all(a[0], a[2]);
    });
    if (t == DType::f64) {
      check_bits(args[1], back[1], "f64 sum");
      check_bits(args[2], back[2], "f64 mean");
    } else {  // a fixed tree of double partial sums, rounded once to f32
      check_close(args[1], back[1], 1e-7, "f32 sum");
      check_close(args[2], back[2], 1e-7, "f32 mean");
    }
  }
}

// Batched products with broadcast and summed batch axes, every transpose: cuBLAS's strided-batched
// calls and their loops against the CPU's tiles (the plan is the same; the sums are each BLAS's).
TEST_CASE("[gpu] batched matmul: broadcast and summed batch axes, folded ones, every transpose") {
  struct Case {
    Shape a, b, out;  // op(a), op(b) and out: a and b are stored with their last two axes swapped where ta, tb
  };
  const std::vector<Case> cases = {
      {{4, 6, 5}, {5, 7}, {4, 6, 7}},                 // a weight for a batch: folded into rows
      {{4, 5, 6}, {4, 6, 7}, {5, 7}},                 // its gradient x^T @ dy: folded into k when ta
      {{2, 1, 6, 5}, {3, 5, 7}, {2, 3, 6, 7}},        // broadcast both ways
      {{2, 3, 6, 5}, {3, 5, 7}, {1, 3, 6, 7}},        // summed over the outer axis
      {{2, 3, 6, 5}, {2, 3, 5, 7}, {6, 7}},           // summed over everything
      {{70000, 2, 3}, {70000, 3, 2}, {70000, 2, 2}},  // more products than one call takes
  };
  for (DType t : kFloats)
    for (const Case& c : cases)
      for (int flags = 0; flags < 4; ++flags) {
        const bool ta = flags & 1, tb = flags & 2;
        auto swap_last = [](const Shape& s) {
          Shape r = s;
          r.set(s.ndim() - 1, s[s.ndim() - 2]);
          r.set(s.ndim() - 2, s[s.ndim() - 1]);
          return r;
        };
        std::vector<Tensor> args{random(ta ? swap_last(c.a) : c.a, t), random(tb ? swap_last(c.b) : c.b, t),
                                 poisoned(c.out, t)};
        auto back = run_both(args, [&](std::vector<Tensor>& a) { kernels::matmul(a[0], ta, a[1], tb, a[2]); });
        check_close(args[2], back[2], t == DType::f64 ? 1e-14 : 1e-6,
                    std::string(name(t)) + " " + c.a.str() + " @ " + c.b.str() + " -> " + c.out.str() + " ta=" +
                        std::to_string(ta) + " tb=" + std::to_string(tb));
        // accumulate (beta 1): out += the product, on both devices
        std::vector<Tensor> more{args[0], args[1], random(c.out, t)};
        auto added = run_both(more, [&](std::vector<Tensor>& a) { kernels::matmul(a[0], ta, a[1], tb, a[2], true); });
        check_close(more[2], added[2], t == DType::f64 ? 1e-14 : 1e-6,
                    std::string(name(t)) + " accumulate " + c.a.str() + " @ " + c.b.str() + " -> " + c.out.str());
      }
}

TEST_CASE("[gpu] f32 matmul uses TF32 only when allowed") {
  std::vector<Tensor> args{random(Shape{64, 256}, DType::f32), random(Shape{256, 64}, DType::f32),
                           poisoned(Shape{64, 64}, DType::f32)};
  REQUIRE(!cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::matmul(a[0], false, a[1], false, a[2]); });
  cuda::set_allow_tf32(false);
  check_close(args[2], back[2], 5e-3, "tf32 matmul");  // 10-bit products: ~1e-3 relative
}

TEST_CASE("[gpu] bf16 casts give the CPU's bits; autocast's products the CPU's within their rounding") {
  // every f32 bit pattern class: random words (NaNs, infinities, subnormals among them) and ties
  std::vector<float> words;
  std::mt19937 bits(11);
  for (int i = 0; i < 100000; ++i) words.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits())));
  // and a length that is not a multiple of 4 (the f32 -> bf16 kernel's tail)
  // (the f32 -> bf16 pairs go through one cvt.rn.bf16x2.f32 each: kernels::pack_bf16x2), subnormal
  // ties and the tie at the largest finite value among them
  for (uint32_t tie : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff800001u, 0x80000000u, 0x00008000u, 0x00018000u,
                       0x7f7f8000u, 0x807f8000u})
    words.push_back(std::bit_cast<float>(tie));
  const Tensor x = Tensor::from_vector(words, Shape{static_cast<int64_t>(words.size())});
  const Shape n = x.shape();
  for (DType from : {DType::f32, DType::f64, DType::i32}) {
    std::vector<Tensor> args{from == DType::f32 ? x : random(n, from, -1e3, 1e3), poisoned(n, DType::bf16),
                             poisoned(n, DType::f32)};
    auto back = run_both(args, [](std::vector<Tensor>& a) {
      kernels::cast(a[0], a[1]);
      kernels::cast(a[1], a[2]);
    });
    check_bits(args[1], back[1], std::string(name(from)) + " -> bf16");
    check_bits(args[2], back[2], std::string(name(from)) + " -> bf16 -> f32");
  }
  // autocast's linear (bias, 3-D x) and batched matmul, forward and backward, CUDA against the CPU
  for (const bool batched : {false, true}) {
    const std::string what = batched ? "autocast matmul (3, 64, 96) @ (3, 96, 48)" : "autocast linear (4, 50, 96) -> 80";
    const Tensor a = batched ? random({3, 64, 96}, DType::f32) : random({4, 50, 96}, DType::f32);
    const Tensor w = batched ? random({3, 96, 48}, DType::f32) : random({80, 96}, DType::f32);
    const Tensor b = random({80}, DType::f32);
    const Tensor dy = batched ? random({3, 64, 48}, DType::f32) : random({4, 50, 80}, DType::f32);
    auto run = [&](Device d) {
      Graph g;
      Var av = g.parameter(a.to(d)), wv = g.parameter(w.to(d)), bv = g.parameter(b.to(d));
      Var y;
      {
        ops::Autocast scope;
        y = batched ? ops::matmul(av, wv) : ops::linear(av, wv, bv);
      }
      g.backward(ops::sum(ops::mul(y, g.input(dy.to(d)))));
      std::vector<Tensor> out{y.value().to(kCpu), av.grad().to(kCpu), wv.grad().to(kCpu)};
      if (!batched) out.push_back(bv.grad().to(kCpu));
      return out;
    };
    const std::vector<Tensor> cpu = run(kCpu), gpu = run(kGpu);
    const char* names[] = {"y", "dx", "dW", "db"};
    // y is bf16 (Note [bf16 activations]): f32 sums that differ in their last bit may round to
    // neighbouring bf16 values, 2^-8 apart relatively; the gradients are f32 sums of the same bf16
    // operands on both devices
    CHECK(cpu[0].dtype() == DType::bf16);
    for (size_t k = 0; k < cpu.size(); ++k) check_close(cpu[k], gpu[k], k == 0 ? 4e-3 : 1e-5, what + " " + names[k]);
  }
}

// Note [bias in the epilogue]: autocast's linear with a bias as one cuBLASLt GEMM, against the
// CPU's f32 sums, add_row and cast (bf16 results 2^-8 apart where f32 sums differ in a last bit),
// and against CUDA's own separate kernels; sizes cuBLASLt may refuse (7 columns: rows of 14 bytes)
// fall back to those kernels.
TEST_CASE("[gpu] matmul_bias and its gradients: one cuBLASLt GEMM each, as the separate kernels compute them") {
  struct Size {
    int64_t n, k, m;
  };
  for (const Size sz : {Size{5, 7, 3}, Size{64, 96, 80}, Size{300, 384, 1152}, Size{1, 8, 8}})
    for (DType bias_type : {DType::f32, DType::bf16}) {
      const std::string what = "(" + std::to_string(sz.n) + ", " + std::to_string(sz.k) + ") @ (" + std::to_string(sz.m) +
                               ", " + std::to_string(sz.k) + ")^T + bias " + name(bias_type);
      const Tensor x = bf(random({sz.n, sz.k}, DType::f32)), w = bf(random({sz.m, sz.k}, DType::f32));
      const Tensor b32 = random({sz.m}, DType::f32), bias = bias_type == DType::f32 ? b32 : bf(b32);
      std::vector<Tensor> args{x, w, bias, poisoned({sz.n, sz.m}, DType::bf16)};
      auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::matmul_bias(a[0], a[1], a[2], a[3]); });
      check_close(args[3], back[3], 4e-3, what + ": CUDA against the CPU");
      // CUDA's separate kernels: f32 sums by cublasGemmEx, add_row, cast
      Tensor sums = Tensor::empty({sz.n, sz.m}, DType::f32, kGpu), apart = Tensor::empty({sz.n, sz.m}, DType::bf16, kGpu);
      Tensor bias32 = Tensor::empty({sz.m}, DType::f32, kGpu);
      kernels::cast(bias.to(kGpu), bias32);
      kernels::matmul(x.to(kGpu), false, w.to(kGpu), true, sums);
      kernels::add_row(sums, bias32, sums);
      kernels::cast(sums, apart);
      check_close(apart.to(kCpu), back[3], 4e-3, what + ": one GEMM against CUDA's separate kernels");
      if (sz.k % 8 == 0 && sz.m % 8 == 0) {  // rows of 16-byte multiples: cuBLASLt has a kernel
        // bf16 out with a bf16 bias, f32 out (the sums with the bias) with an f32 one
        Tensor lt = Tensor::empty({sz.n, sz.m}, bias_type, kGpu);
        CHECK_MESSAGE(cuda::matmul_bias(x.to(kGpu), w.to(kGpu), bias.to(kGpu), lt), what << ": cuBLASLt ran it");
        if (bias_type == DType::f32) check_close(sums.to(kCpu), lt.to(kCpu), 1e-5, what + ": the f32 sums with the bias");
      }
      if (bias_type == DType::bf16) continue;
      // the backward's weight and bias gradients from one GEMM (BGRADB), against the CPU's matmul and sum_rows
      const Tensor dy = bf(random({sz.n, sz.m}, DType::f32));
      std::vector<Tensor> grads{dy, x, poisoned({sz.m, sz.k}, DType::f32), poisoned({sz.m}, DType::f32)};
      auto gback = run_both(grads, [](std::vector<Tensor>& a) { kernels::matmul_weight_bias_grad(a[0], a[1], a[2], a[3]); });
      if (sz.k % 8 == 0 && sz.m % 8 == 0) {
        Tensor dw = Tensor::empty({sz.m, sz.k}, DType::f32, kGpu), db = Tensor::empty({sz.m}, DType::f32, kGpu);
        CHECK_MESSAGE(cuda::matmul_weight_bias_grad(dy.to(kGpu), x.to(kGpu), dw, db), what << ": cuBLASLt ran dW, db");
      }
      check_close(grads[2], gback[2], 1e-5, what + ": dW against the CPU");
      check_close(grads[3], gback[3], 1e-5, what + ": db against the CPU");
    }
}

// Note [the MLP's epilogues]: the first product with GELU (tanh form) in cuBLASLt's epilogue, act
// and its aux matrix pre, and the backward's product with gelu' in its epilogue, against the
// CPU's unfused kernels (which round pre and dact to bf16 before gelu and gelu' act: results a
// bf16 rounding or two apart); an aux matrix of rows that are not a multiple of 8 (h = 36) is
// refused by cuBLASLt's rule and falls back to CUDA's unfused kernels.
TEST_CASE("[gpu] matmul_activation: GELU and its derivative in cuBLASLt's epilogues, as the CPU computes them") {
  struct Size {
    int64_t n, k, h;
  };
  const kernels::Unary gelu = kernels::Unary::gelu_tanh;
  for (const Size sz : {Size{64, 96, 256}, Size{300, 384, 1536}, Size{512, 768, 3072}, Size{40, 16, 36}}) {
    const std::string what = "(" + std::to_string(sz.n) + ", " + std::to_string(sz.k) + ") @ (" +
                             std::to_string(sz.h) + ", " + std::to_string(sz.k) + ")^T";
    const bool lt = sz.h % 8 == 0;
    const Tensor x = bf(random({sz.n, sz.k}, DType::f32, -1.0, 1.0)), w = bf(random({sz.h, sz.k}, DType::f32, -0.2, 0.2));
    // without a bias (GELU_AUX), then with a bf16 one (GELU_AUX_BIAS, a fifth argument)
    const Tensor bias = bf(random({sz.h}, DType::f32, -0.5, 0.5));
    std::vector<Tensor> args;  // the CPU's x, w, pre, act without a bias, for the backward
    for (bool with_bias : {false, true}) {
      const std::string with = what + (with_bias ? " + bf16 bias" : "");
      std::vector<Tensor> in{x, w, poisoned({sz.n, sz.h}, DType::bf16), poisoned({sz.n, sz.h}, DType::bf16)};
      if (with_bias) in.push_back(bias);
      auto out = run_both(in, [&](std::vector<Tensor>& a) {
        kernels::matmul_activation(gelu, a[0], a[1], a.size() == 5 ? a[4] : Tensor(), a[2], a[3]);
      });
      check_close(in[2], out[2], 4e-3, with + ": pre, CUDA against the CPU");
      check_close(in[3], out[3], 8e-3, with + ": act = gelu_tanh(pre), CUDA against the CPU");
      Tensor pre = Tensor::empty({sz.n, sz.h}, DType::bf16, kGpu), act = Tensor::empty({sz.n, sz.h}, DType::bf16, kGpu);
      CHECK_MESSAGE(cuda::matmul_gelu(x.to(kGpu), w.to(kGpu), with_bias ? bias.to(kGpu) : Tensor(), pre, act) == lt,
                    with << ": cuBLASLt ran it (h % 8 == 0)");
      if (!with_bias) args = in;
    }
    // the backward: dpre = (dy @ w2) * gelu'(pre), w2 (m, h), against the CPU's unfused kernels
    const int64_t m = sz.k;
    const Tensor dy = bf(random({sz.n, m}, DType::f32, -1.0, 1.0)), w2 = bf(random({m, sz.h}, DType::f32, -0.2, 0.2));
    std::vector<Tensor> grads{dy, w2, args[2], args[3], poisoned({sz.n, sz.h}, DType::bf16)};
    auto gback = run_both(grads, [&](std::vector<Tensor>& a) {
      kernels::matmul_activation_backward(gelu, a[0], a[1], a[2], a[3], a[4]);
    });
    check_close(grads[4], gback[4], 1e-2, what + ": dpre, CUDA against the CPU");
    Tensor dpre = Tensor::empty({sz.n, sz.h}, DType::bf16, kGpu);
    CHECK_MESSAGE(cuda::matmul_dgelu(dy.to(kGpu), w2.to(kGpu), args[2].to(kGpu), dpre) == lt, what << ": cuBLASLt ran dgelu");
    if (lt) check_bits(gback[4], dpre.to(kCpu), what + ": the facade ran the same GEMM");
  }
}

// The fused MLP on CUDA, gelu_tanh (the epilogues; with bf16 parameters its bias in the epilogue
// too) and exact gelu (the separate kernels), against the CPU's: values and every gradient within
// bf16's rounding. f32 parameters run under autocast, bf16 ones as they are.
TEST_CASE("[gpu] ops::mlp with bf16 products: CUDA against the CPU, forward and backward") {
  for (ops::MlpActivation f : {ops::MlpActivation::gelu_tanh, ops::MlpActivation::gelu})
    for (bool biases : {false, true})
      for (DType params : {DType::f32, DType::bf16}) {
        const std::string what = std::string(ops::mlp_activation_name(f)) + (biases ? ", biases, " : ", no biases, ") +
                                 name(params) + " parameters";
        std::vector<Tensor> init{random({4, 64, 96}, DType::f32, -1.0, 1.0), random({384, 96}, DType::f32, -0.1, 0.1),
                                 random({96, 384}, DType::f32, -0.1, 0.1), random({384}, DType::f32, -0.5, 0.5),
                                 random({96}, DType::f32, -0.5, 0.5)};
        if (params == DType::bf16)
          for (Tensor& t : init) t = bf(t);
        std::vector<std::vector<Tensor>> results;
        for (Device d : {kCpu, kGpu}) {
          Graph g;
          std::vector<Var> p;
          for (size_t i = 0; i < (biases ? 5u : 3u); ++i) p.push_back(g.parameter(init[i].to(d)));
          Var y;
          {
            ops::Autocast scope(DType::bf16);
            y = ops::mlp(p[0], p[1], p[2], f, biases ? p[3] : Var(), biases ? p[4] : Var());
          }
          g.backward(ops::sum(ops::to(y, DType::f32)));
          std::vector<Tensor> out{y.value().to(kCpu)};
          for (const Var& v : p) out.push_back(v.grad().to(kCpu));
          results.push_back(std::move(out));
        }
        for (size_t k = 0; k < results[0].size(); ++k)
          check_close(results[0][k], results[1][k], k == 0 ? 8e-3 : 1e-2, what + ": output " + std::to_string(k));
      }
}

TEST_CASE("[gpu] gather and its scatter backward, with repeated ids") {
  const std::vector<int64_t> ids{4, 0, 4, 2, 4, 1, 0};
  for (DType it : {DType::i32, DType::i64}) {
    for (DType t : {DType::f64, DType::f32, DType::bf16}) {
      std::vector<Tensor> args{random(Shape{5, 19}, t), index_tensor(ids, it), poisoned(Shape{7, 19}, t)};
      auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::gather_rows(a[0], a[1], a[2]); });
      check_bits(args[2], back[2], std::string(name(t)) + " gather, " + name(it) + " ids");
    }
    for (DType t : kFloats) {
      for (bool overwrite : {false, true}) {
        std::vector<Tensor> args{random(Shape{5, 19}, t), index_tensor(ids, it), random(Shape{7, 19}, t)};
        auto back = run_both(args, [overwrite](std::vector<Tensor>& a) { kernels::scatter_rows(a[0], a[1], a[2], overwrite); });
        check_bits(args[0], back[0], std::string(name(t)) + (overwrite ? " scatter (overwrite)" : " scatter (add)"));
      }
    }
  }
}

// Notes [scatter by row] and [ranked scatter] in src/cuda/rows.cu. Three kernels, each adding in
// the CPU's order, so the CPU's bits: a warp per row while rows * B <= 2^22 (12 rows here, with ids
// in several chunks of 1024 past B = 1024; 108 rows and 16384 ids, a character GPT's batch), the
// ranked kernel for larger tables up to 1024 ids (5000 rows with 1000 ids), one thread per column
// beyond (3000 rows with 2000 ids).
TEST_CASE("[gpu] the scatter backward at batch sizes around the kernels' limits") {
  for (const auto& [table_rows, b] : std::vector<std::pair<int64_t, int64_t>>{
           {12, 1}, {12, 7}, {12, 255}, {12, 1000}, {12, 1024}, {12, 1025}, {12, 3000}, {108, 16384}, {5000, 1000},
           {5000, 300}, {3000, 2000}, {50304, 16384}, {60000, 1030}}) {
    std::vector<int64_t> ids(static_cast<size_t>(b));
    std::uniform_int_distribution<int64_t> pick(0, 11);  // 12 distinct rows: long runs of repeated ids
    for (int64_t& id : ids) id = pick(rng) * (table_rows / 12);
    for (DType t : kFloats) {
      for (bool overwrite : {false, true}) {
        std::vector<Tensor> args{random(Shape{table_rows, 70}, t), index_tensor(ids, DType::i32), random(Shape{b, 70}, t)};
        auto back = run_both(args, [overwrite](std::vector<Tensor>& a) { kernels::scatter_rows(a[0], a[1], a[2], overwrite); });
        check_bits(args[0], back[0], "B = " + std::to_string(b) + ", " + name(t) + (overwrite ? ", overwrite" : ", add"));
        // into a fresh gradient: every cell written, zeros where no id points
        std::vector<Tensor> fresh{poisoned(Shape{table_rows, 70}, t), args[1], args[2]};
        back = run_both(fresh, [overwrite](std::vector<Tensor>& a) { kernels::scatter_rows_fresh(a[0], a[1], a[2], overwrite); });
        check_bits(fresh[0], back[0], "fresh, B = " + std::to_string(b) + ", " + name(t) + (overwrite ? ", overwrite" : ", add"));
      }
    }
  }
  const Tensor ids = index_tensor({3, 1, 12, 3, -1}, DType::i64).to(kGpu);  // the lowest bad position is reported
  Tensor dst = Tensor::zeros(Shape{12, 70}, DType::f32, kGpu);
  kernels::scatter_rows(dst, ids, random(Shape{5, 70}, DType::f32).to(kGpu), false);
  CHECK(message_of([] { synchronize(kGpu); }) ==
        "[gather_backward] index 12 at position 2 is out of range for a table of 12 rows (shape (12, 70))"
        " (found on cuda:0, reported at the next synchronization)");
}

TEST_CASE("[gpu] softmax and cross-entropy, forward and backward") {
  for (DType t : kFloats) {
    const std::string d = name(t);
    const double tol = 1e-6;  // f32: CUDA's expf against glibc's
    auto compare = [&](const Tensor& a, const Tensor& b, const std::string& what) {
      if (t == DType::f64) check_ulps(a, b, 4, what);  // exact sums; exp/log within an ulp (check_ulps)
      else check_close(a, b, tol, what);
    };
    for (int64_t m : {1, 5, 40, 256, 257, 300, 700}) {  // 256, 257: the 8-column row cache and past it; 700: longer than a warp's registers hold (the re-reading path)
      const std::string sm = " m=" + std::to_string(m);
      std::vector<Tensor> args{random(Shape{6, m}, t, -8.0, 8.0), poisoned(Shape{6, m}, t)};
      auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::softmax_rows(a[0], a[1]); });
      compare(args[1], back[1], d + " softmax" + sm);

      args = {args[1], random(Shape{6, m}, t), poisoned(Shape{6, m}, t)};  // y from the CPU, dy, dx
      back = run_both(args, [](std::vector<Tensor>& a) { kernels::softmax_rows_backward(a[0], a[1], a[2]); });
      compare(args[2], back[2], d + " softmax_backward" + sm);

      std::vector<int64_t> targets;
      for (int i = 0; i < 6; ++i) targets.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(m)));
      args = {random(Shape{6, m}, t, -8.0, 8.0), index_tensor(targets, DType::i32), poisoned(Shape{6, m}, t),
              poisoned(Shape{6}, t)};
      back = run_both(args, [](std::vector<Tensor>& a) { kernels::cross_entropy(a[0], a[1], a[2], a[3]); });
      compare(args[2], back[2], d + " cross_entropy probs" + sm);
      compare(args[3], back[3], d + " cross_entropy losses" + sm);
      for (bool mean : {true, false}) {  // with the reduction: fused on CUDA in f32
        std::vector<Tensor> rargs{args[0], args[1], poisoned(Shape{6, m}, t), poisoned(Shape{6}, t), poisoned(Shape{}, t)};
        auto rback = run_both(rargs, [mean](std::vector<Tensor>& a) {
          kernels::cross_entropy_reduced(a[0], a[1], a[2], a[3], a[4], mean);
        });
        compare(rargs[3], rback[3], d + " cross_entropy_reduced losses" + sm);
        compare(rargs[4], rback[4], d + (mean ? " cross_entropy_reduced mean" : " cross_entropy_reduced sum") + sm);
      }

      for (bool per_row : {false, true}) {
        std::vector<Tensor> bargs{args[2], args[1], random(per_row ? Shape{6} : Shape{}, t), poisoned(Shape{6, m}, t)};
        const double divisor = per_row ? 1.0 : 6.0;
        auto bback = run_both(bargs, [divisor](std::vector<Tensor>& a) {
          kernels::cross_entropy_backward(a[0], a[1], a[2], divisor, a[3]);
        });
        check_bits(bargs[3], bback[3], d + " cross_entropy_backward" + sm + (per_row ? " per row" : " mean"));
      }
    }
  }
}

// The fused f32 reduction (its last block sums the losses) gives the bits of the separate kernels.
TEST_CASE("[gpu] cross-entropy's fused mean equals cross_entropy then mean_all, bit for bit, over many blocks") {
  for (int64_t b : {1, 255, 1000, 5000}) {
    std::vector<int64_t> targets;
    for (int64_t i = 0; i < b; ++i) targets.push_back(static_cast<int64_t>(rng() % 40));
    const Tensor logits = random(Shape{b, 40}, DType::f32, -8.0, 8.0).to(kGpu);
    const Tensor ids = index_tensor(targets, DType::i32).to(kGpu);
    for (bool mean : {true, false}) {
      Tensor probs = Tensor::empty(Shape{b, 40}, DType::f32, kGpu), losses = Tensor::empty(Shape{b}, DType::f32, kGpu);
      Tensor fused = Tensor::empty(Shape{}, DType::f32, kGpu), apart = Tensor::empty(Shape{}, DType::f32, kGpu);
      kernels::cross_entropy_reduced(logits, ids, probs, losses, fused, mean);
      kernels::cross_entropy(logits, ids, probs, losses);
      if (mean) kernels::mean_all(losses, apart);
      else kernels::sum_all(losses, apart);
      check_bits(apart.to(kCpu), fused.to(kCpu), "B = " + std::to_string(b) + (mean ? ", mean" : ", sum"));
    }
  }
}

// linear_cross_entropy's blocks: the losses, the count and dz = softmax - onehot in one pass,
// against the CPU's (the same formulas; CUDA's sums run in another order, so within rounding), warp
// rows (V <= 1024) and block rows, ignored rows and extreme logits.
TEST_CASE("[gpu] cross_entropy_rows: losses, count and softmax - onehot against the CPU") {
  for (DType t : kFloats)
    for (int64_t v : {1, 65, 1000, 1025, 50304}) {
      const int64_t n = v > 5000 ? 7 : 37;
      std::vector<int64_t> targets;
      for (int64_t i = 0; i < n; ++i) targets.push_back(i % 5 == 3 ? -100 : static_cast<int64_t>(rng() % static_cast<uint64_t>(v)));
      Tensor z = random(Shape{n, v}, t, -8.0, 8.0);
      if (v > 1) {  // one row with a logit far above the rest: the loss is exact, not inf
        std::vector<double> zz = z.to_doubles();
        zz[static_cast<size_t>(v + 1)] = 745.0;
        z = Tensor::from_doubles(zz, z.shape(), t);
      }
      const std::string what = std::string(name(t)) + " (" + std::to_string(n) + ", " + std::to_string(v) + ")";
      if (t == DType::f32) {  // bf16 logits (autocast's): f32 arithmetic on both, f32 losses, a bf16 dz
        Tensor zb = Tensor::empty(z.shape(), DType::bf16);
        kernels::cast(z, zb);
        std::vector<Tensor> args{zb, index_tensor(targets, DType::i32), poisoned(Shape{n}, t), poisoned(Shape{}, t),
                                 poisoned(Shape{n, v}, DType::bf16)};
        auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::cross_entropy_rows(a[0], a[1], -100, a[2], a[3], a[4]); });
        check_close(args[2], back[2], 1e-6, what + " bf16 logits: losses");
        check_bits(args[3], back[3], what + " bf16 logits: count");
        check_close(args[4], back[4], 1e-2, what + " bf16 logits: dz");
      }
      for (DType grad : {t, DType::bf16}) {
        if (grad == DType::bf16 && t != DType::f32) continue;
        std::vector<Tensor> args{z, index_tensor(targets, DType::i32), poisoned(Shape{n}, t), poisoned(Shape{}, t),
                                 poisoned(Shape{n, v}, grad)};
        auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::cross_entropy_rows(a[0], a[1], -100, a[2], a[3], a[4]); });
        check_close(args[2], back[2], t == DType::f64 ? 1e-13 : 1e-6, what + " losses");
        check_bits(args[3], back[3], what + " count");
        check_close(args[4], back[4], t == DType::f64 ? 1e-13 : grad == DType::bf16 ? 1e-2 : 3e-6,
                    what + " dz " + name(grad));
      }
      std::vector<Tensor> args{z, index_tensor(targets, DType::i32), poisoned(Shape{n}, t), poisoned(Shape{}, t), Tensor()};
      auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::cross_entropy_rows(a[0], a[1], -100, a[2], a[3], a[4]); });
      check_close(args[2], back[2], t == DType::f64 ? 1e-13 : 1e-6, what + " losses, no dz");
    }
}

// A long row kept in shared memory between the kernel's two reads (Note [a loss row kept in shared
// memory]) gives the bits of the row read twice from device memory: for each pair of logits' and
// gradients' dtypes the kernel takes (a bf16 dz for f32 logits, the logits' own dtype for either),
// and rows of 1028 bf16 and 1030 f32 (not whole 16-byte pieces: read twice either way).
TEST_CASE("[gpu] cross_entropy_rows: a row kept in shared memory, the bits of a row read twice") {
  struct Case {
    DType z, grad;
    int64_t v;
  };
  for (const Case& c : {Case{DType::bf16, DType::bf16, 50304}, Case{DType::bf16, DType::bf16, 1032},
                        Case{DType::bf16, DType::bf16, 1028}, Case{DType::f32, DType::f32, 1030},
                        Case{DType::f32, DType::f32, 4096}, Case{DType::f32, DType::bf16, 28000},
                        Case{DType::f32, DType::bf16, 1036}}) {
    const int64_t n = 9;
    const std::string what = std::string(name(c.z)) + " logits (" + std::to_string(n) + ", " + std::to_string(c.v) +
                             "), dz " + name(c.grad);
    std::vector<int64_t> targets;
    for (int64_t i = 0; i < n; ++i) targets.push_back(i == 4 ? -100 : static_cast<int64_t>(rng() % static_cast<uint64_t>(c.v)));
    Tensor z = Tensor::empty(Shape{n, c.v}, c.z);
    kernels::cast(random(Shape{n, c.v}, DType::f32, -8.0, 8.0), z);
    const Tensor zg = z.to(kGpu), ids = index_tensor(targets, DType::i32).to(kGpu);
    auto run = [&](bool keep) {
      cuda::set_cross_entropy_kept_rows(keep);
      Tensor losses = Tensor::empty(Shape{n}, DType::f32, kGpu), count = Tensor::empty(Shape{}, DType::f32, kGpu);
      Tensor dz = Tensor::empty(Shape{n, c.v}, c.grad, kGpu);
      kernels::cross_entropy_rows(zg, ids, -100, losses, count, dz);
      cuda::set_cross_entropy_kept_rows(true);
      return std::vector<Tensor>{losses.to(kCpu), dz.to(kCpu)};
    };
    const std::vector<Tensor> kept = run(true), twice = run(false);
    check_bits(kept[0], twice[0], what + ": losses");
    check_bits(kept[1], twice[1], what + ": dz");
  }
}

// AdamW with bf16 weight copies (Note [bf16 weight copies]): the products of an autocast MLP
// take the copies its updates wrote, and 4 steps give the bits of the same steps with casts.
TEST_CASE("[gpu] AdamW's bf16 weight copies: autocast training on cuda keeps its bits") {
  const Tensor w1_0 = random(Shape{64, 48}, DType::f32, -1.0, 1.0), w2_0 = random(Shape{8, 64}, DType::f32, -1.0, 1.0);
  std::vector<Tensor> xs;
  for (int step = 0; step < 4; ++step) xs.push_back(random(Shape{32, 48}, DType::f32, -1.0, 1.0));
  auto train = [&](bool copies) {
    Graph g;
    Var w1 = g.parameter(w1_0.to(kGpu)), w2 = g.parameter(w2_0.to(kGpu));
    optim::AdamW adamw({w1, w2}, {.lr = 0.05});
    if (copies) adamw.keep_bf16_copies();
    std::vector<Tensor> out;
    for (int step = 0; step < 4; ++step) {
      if (copies) {
        const Tensor kept = ops::current_bf16_copy(w1.value());
        REQUIRE(kept.defined());
        Tensor cast = Tensor::empty(w1.shape(), DType::bf16, kGpu);
        kernels::cast(w1.value(), cast);
        check_bits(cast.to(kCpu), kept.to(kCpu), "w1's copy before step " + std::to_string(step));
      }
      g.clear();
      g.zero_grad();
      Var y;
      {
        ops::Autocast autocast;
        y = ops::to(ops::linear(ops::gelu(ops::linear(g.input(xs[static_cast<size_t>(step)].to(kGpu)), w1)), w2),
                    DType::f32);
      }
      Var loss = ops::sum(ops::mul(y, y));
      out.push_back(loss.value().to(kCpu));
      g.backward(loss);
      adamw.step();
    }
    out.push_back(w1.value().to(kCpu));
    out.push_back(w2.value().to(kCpu));
    return out;
  };
  const std::vector<Tensor> with = train(true), without = train(false);
  for (size_t k = 0; k < with.size(); ++k) check_bits(without[k], with[k], "tensor " + std::to_string(k));
}

TEST_CASE("[gpu] optimizer updates") {
  for (DType t : kFloats) {
    std::vector<Tensor> args{random(Shape{3, 50}, t), random(Shape{3, 50}, t)};
    auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::sgd_step(a[0], a[1], 0.05); });
    check_bits(args[0], back[0], std::string(name(t)) + " sgd");
  }
  std::vector<Tensor> args{random(Shape{4, 64}, DType::f32), random(Shape{4, 64}, DType::f32),
                           Tensor::zeros(Shape{4, 64}, DType::f32), Tensor::zeros(Shape{4, 64}, DType::f32)};
  for (int step = 1; step <= 5; ++step) {  // docs/bob.md's hyperparameters ("Learner"); fresh gradients each step
    const double bc1 = 1.0 - std::pow(0.9f, step), bc2 = 1.0 - std::pow(0.95f, step);
    const kernels::AdamWScalars s{0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, static_cast<float>(0.1f / bc1),
                                  static_cast<float>(std::sqrt(bc2))};
    args[1] = random(Shape{4, 64}, DType::f32);
    auto back = run_both(args, [&s](std::vector<Tensor>& a) { kernels::adamw_step(a[0], a[1], a[2], a[3], s); });
    check_bits(args[0], back[0], "adamw w, step " + std::to_string(step));
    check_bits(args[2], back[2], "adamw m, step " + std::to_string(step));
    check_bits(args[3], back[3], "adamw v, step " + std::to_string(step));
    for (int k : {0, 2, 3}) args[static_cast<size_t>(k)] = back[static_cast<size_t>(k)];  // carry on from the GPU's state
  }
  // Many parameters in one call (on CUDA one launch per 16): 19 of sizes 1 to 3000, each as on the CPU.
  const kernels::AdamWScalars s{0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.5f, 0.25f};
  std::vector<Tensor> many;
  for (int64_t k = 0; k < 19; ++k) {
    const Shape shape{1 + k * k * 8};
    for (int part = 0; part < 3; ++part) many.push_back(random(shape, DType::f32));  // w, g, m
    many.push_back(random(shape, DType::f32, 0.0, 2.0));                          // v >= 0
  }
  auto back = run_both(many, [&s](std::vector<Tensor>& a) {
    std::vector<kernels::AdamWSlot> slots;
    for (size_t k = 0; k < a.size(); k += 4) slots.push_back({&a[k], &a[k + 1], &a[k + 2], &a[k + 3]});
    kernels::adamw_step_many(slots, s);
  });
  for (size_t k = 0; k < many.size(); ++k)
    if (k % 4 != 1) check_bits(many[k], back[k], "adamw_step_many, tensor " + std::to_string(k));
  // With bf16 copies (Note [bf16 weight copies]): the kernel rounds each new w as the CPU's cast
  // does after its update, for every other parameter (the rest without one, in the same launch).
  std::vector<Tensor> with;
  for (size_t k = 0; k < many.size(); k += 4) {
    for (size_t part = 0; part < 4; ++part) with.push_back(many[k + part]);
    with.push_back(Tensor::zeros(many[k].shape(), DType::bf16));
  }
  back = run_both(with, [&s](std::vector<Tensor>& a) {
    std::vector<kernels::AdamWSlot> slots;
    for (size_t k = 0; k < a.size(); k += 5) {
      kernels::AdamWSlot slot{&a[k], &a[k + 1], &a[k + 2], &a[k + 3]};
      if (k % 10 == 0) slot.copy = &a[k + 4];
      slots.push_back(slot);
    }
    kernels::adamw_step_many(slots, s);
  });
  for (size_t k = 0; k < with.size(); ++k)
    if (k % 5 != 1) check_bits(with[k], back[k], "adamw_step_many with bf16 copies, tensor " + std::to_string(k));
}

// ---------------------------------------------------------------------------
// GPU: the graph end to end

namespace {

struct TinyModel {  // gather -> matmul -> add_row -> cross-entropy, plus a sum and a mean of the logits
  Graph g;
  Var E, W, b;
  Tensor ids, targets;
  TinyModel(Device dev, const std::vector<Tensor>& init) {
    E = g.parameter(init[0].to(dev), "E");
    W = g.parameter(init[1].to(dev), "W");
    b = g.parameter(init[2].to(dev), "b");
    ids = index_tensor({1, 3, 1, 0, 5}, DType::i32).to(dev);
    targets = index_tensor({2, 0, 2, 6, 1}, DType::i64).to(dev);
  }
  Var loss() {
    Var logits = ops::add_row(ops::matmul(ops::gather(E, g.input(ids)), W), b);
    Var ce = ops::cross_entropy(logits, g.input(targets));
    Var extra = ops::add(ops::scale(ops::sum(ops::mul(logits, logits)), 1e-3), ops::mean(ops::softmax(logits)));
    return ops::add(ce, extra);
  }
  void step() {
    g.clear();
    g.zero_grad();
    g.backward(loss());
    optim::SGD(0.1).step(g.parameters());
  }
};

}  // namespace

// Close to the last bits: the sums are correctly rounded on both devices but the matmul's, which
// are each device's BLAS (cuBLAS and OpenBLAS), and exp and log may differ by an ulp.
TEST_CASE("[gpu] a model's loss, gradients and updates equal the CPU's to about 1e-13 (f64)") {
  const std::vector<Tensor> init{random(Shape{6, 4}, DType::f64), random(Shape{4, 7}, DType::f64),
                                 random(Shape{7}, DType::f64)};
  const uint64_t fallbacks = host_fallback_count();
  TinyModel cpu_model(kCpu, init), gpu_model(kGpu, init);
  for (int step = 0; step < 3; ++step) {
    cpu_model.step();
    gpu_model.step();
  }
  cpu_model.g.clear();
  gpu_model.g.clear();
  Var lc = cpu_model.loss(), lg = gpu_model.loss();
  check_close(lc.value(), lg.value().to(kCpu), 1e-13, "loss after 3 steps");
  cpu_model.g.backward(lc);
  gpu_model.g.backward(lg);
  const auto pc = cpu_model.g.parameters(), pg = gpu_model.g.parameters();
  for (size_t k = 0; k < pc.size(); ++k) {
    check_close(pc[k].value(), pg[k].value().to(kCpu), 1e-13, "parameter " + pc[k].label());
    check_close(pc[k].grad(), pg[k].grad().to(kCpu), 1e-12, "gradient of " + pc[k].label());
  }
  CHECK(host_fallback_count() == fallbacks);
}

TEST_CASE("[gpu] the caching allocator: no cudaMalloc once a training loop is warm") {
  const std::vector<Tensor> init{random(Shape{6, 4}, DType::f64), random(Shape{4, 7}, DType::f64),
                                 random(Shape{7}, DType::f64)};
  TinyModel model(kGpu, init);
  for (int i = 0; i < 3; ++i) model.step();
  synchronize(kGpu);
  cuda::reset_peak_bytes();
  const cuda::AllocatorStats warm = cuda::allocator_stats();
  CHECK(warm.peak_bytes_in_use == warm.bytes_in_use);
  for (int i = 0; i < 50; ++i) model.step();
  synchronize(kGpu);
  const cuda::AllocatorStats after = cuda::allocator_stats();
  CHECK(after.cuda_malloc_count == warm.cuda_malloc_count);
  CHECK(after.bytes_in_use == warm.bytes_in_use);
  CHECK(after.allocations > warm.allocations + 50);
  CHECK(after.peak_bytes_in_use >= after.bytes_in_use);
  cuda::empty_cache();
  const cuda::AllocatorStats emptied = cuda::allocator_stats();
  CHECK(emptied.bytes_cached == 0);
  CHECK(emptied.cuda_free_count > after.cuda_free_count);
}

// ---------------------------------------------------------------------------
// GPU: captured graphs (Note [graph capture] in src/cuda/capture.cu)

namespace {

// A next-token table trained with AdamW: bob's model at another size, with repeated ids.
struct TableLearner {
  Graph g;
  Var w;
  Tensor x, y;
  optim::AdamW adamw;
  TableLearner(const Tensor& init, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys)
      : w(g.parameter(init.to(kGpu), "W")),
        x(index_tensor(xs, DType::i32).to(kGpu)),
        y(index_tensor(ys, DType::i32).to(kGpu)),
        adamw({w}, {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.01f}) {}
  Tensor forward_backward(bool overwrite_bug) {
    g.zero_grad();
    g.clear();
    Var loss = ops::cross_entropy(ops::gather(w, g.input(x)), g.input(y));
    g.backward(loss, {.overwrite_bug = overwrite_bug});
    return loss.value();
  }
};

}  // namespace

TEST_CASE("[gpu] a captured graph of AdamW updates replays them bit for bit, with no cudaMalloc") {
  constexpr size_t kUpdates = 5;
  const Tensor init = random(Shape{16, 16}, DType::f32, -0.1, 0.1);
  std::vector<int64_t> xs(300), ys(300);
  std::uniform_int_distribution<int64_t> pick(0, 15);
  for (size_t i = 0; i < xs.size(); ++i) {
    xs[i] = pick(rng) % 6;  // 6 distinct inputs: rows accumulate many contributions
    ys[i] = pick(rng);
  }
  for (bool bug : {false, true}) {
    const std::string mode = bug ? "overwrite-bug mode" : "accumulating";
    INFO(mode);
    TableLearner eager(init, xs, ys), captured(init, xs, ys);
    const cuda::AllocatorStats before = cuda::allocator_stats();
    captured.adamw.write_schedule(0, kUpdates);
    std::vector<Tensor> losses;
    std::unique_ptr<CapturedGraph> graph = capture(kGpu, [&] {
      for (size_t k = 0; k < kUpdates; ++k) {
        losses.push_back(captured.forward_backward(bug));
        captured.adamw.scheduled_step(k);
      }
    });
    CHECK(graph->nodes() >= kUpdates * 6);
    CHECK(cuda::allocator_stats().graph_pool_bytes > before.graph_pool_bytes);
    uint64_t mallocs = 0;
    for (uint64_t round = 0; round < 3; ++round) {
      if (round == 2) mallocs = cuda::allocator_stats().cuda_malloc_count;
      captured.adamw.write_schedule(round * kUpdates, kUpdates);
      graph->replay();
      for (size_t k = 0; k < kUpdates; ++k) {
        const Tensor loss = eager.forward_backward(bug);
        eager.adamw.step();
        check_bits(loss.to(kCpu), losses[k].to(kCpu), "loss of update " + std::to_string(round * kUpdates + k + 1));
      }
      check_bits(eager.w.value().to(kCpu), captured.w.value().to(kCpu), "W after round " + std::to_string(round));
      check_bits(eager.adamw.m(0).to(kCpu), captured.adamw.m(0).to(kCpu), "M after round " + std::to_string(round));
      check_bits(eager.adamw.v(0).to(kCpu), captured.adamw.v(0).to(kCpu), "V after round " + std::to_string(round));
    }
    CHECK(cuda::allocator_stats().cuda_malloc_count == mallocs);
    graph.reset();
    CHECK(cuda::allocator_stats().graph_pool_bytes == before.graph_pool_bytes);
  }
}

TEST_CASE("[gpu] a captured model with matmul (cuBLAS) and SGD replays its steps bit for bit (f32)") {
  const std::vector<Tensor> init{random(Shape{6, 4}, DType::f32), random(Shape{4, 7}, DType::f32),
                                 random(Shape{7}, DType::f32)};
  TinyModel eager(kGpu, init), captured(kGpu, init);
  eager.step();  // the cuBLAS handle is made outside the capture
  captured.step();
  std::unique_ptr<CapturedGraph> graph = capture(kGpu, [&] { captured.step(); });
  for (int k = 0; k < 4; ++k) {
    eager.step();
    graph->replay();
  }
  const auto pe = eager.g.parameters(), pc = captured.g.parameters();
  for (size_t k = 0; k < pe.size(); ++k)
    check_bits(pe[k].value().to(kCpu), pc[k].value().to(kCpu), "parameter " + pe[k].label() + " after 5 steps");
}

TEST_CASE("[gpu] a captured body may hold scalar constants (x + 1, x / 3, masked_fill): fills, not host copies") {
  for (DType t : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(t));
    const Tensor x0 = random(Shape{5, 3}, t).to(kGpu);
    const Tensor mask = index_tensor({1, 0, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0}, DType::u8).reshape(Shape{5, 3}).to(kGpu);
    Tensor x = Tensor::zeros(Shape{5, 3}, t, kGpu);
    Graph g;
    auto body = [&] {
      g.clear();
      Var v = g.input(x);
      return ops::masked_fill((v + 1.0) / 3.0 - 0.25, g.input(mask), -7.5).value();
    };
    x.copy_from(x0);
    const Tensor eager = body().to(kCpu);
    x.zero_();
    Tensor out;
    std::unique_ptr<CapturedGraph> graph = capture(kGpu, [&] { out = body(); });
    x.copy_from(x0);  // what the replay reads, written after the capture
    graph->replay();
    check_bits(eager, out.to(kCpu), "replayed (x + 1) / 3 - 0.25, masked");
    CHECK((t == DType::f32 ? double{eager.data<float>()[0]} : eager.data<double>()[0]) == -7.5);  // mask[0] is set
  }
}

TEST_CASE("[gpu] capture refuses what a graph cannot replay, and leaves the device working") {
  const cuda::AllocatorStats before = cuda::allocator_stats();
  Graph g;
  Var w = g.parameter(random(Shape{4, 3}, DType::f32).to(kGpu));
  const Tensor ids = index_tensor({0, 3, 1}, DType::i32).to(kGpu);
  CHECK(message_of([&] { (void)capture(kGpu, [&] { (void)ops::sum(ops::gather(w, g.input(ids))).value().item(); }); }) ==
        "[capture] the captured body waits for cuda:0 (a copy to the host, item() or synchronize()), which a graph "
        "cannot replay; read values after replay() instead");
  CHECK(message_of([&] { (void)capture(kGpu, [&] { (void)index_tensor({1, 2}, DType::i32).to(kGpu); }); }) ==
        "[capture] the captured body copies 8 bytes from the host to cuda:0, which a graph cannot replay; make the "
        "tensor on the device before the capture, or copy_from into one between replays");
  CHECK(message_of([&] { (void)capture(kGpu, [&] { (void)capture(kGpu, [] {}); }); }) ==
        "[capture] cuda:0 is already capturing; captures do not nest");
  CHECK(message_of([] { (void)capture(kCpu, [] {}); }) ==
        "[capture] graph capture records device work for replay; on the CPU ops run as they are called, so call the "
        "body instead");
  g.clear();
  CHECK(cuda::allocator_stats().graph_pool_bytes == before.graph_pool_bytes);
  CHECK(ops::sum(ops::gather(w, g.input(ids))).value().item() != 0.0);  // eager work goes on

  optim::AdamW adamw({w}, {});
  CHECK(message_of([&] { adamw.scheduled_step(0); }) ==
        "[adamw] scheduled_step(0) needs a step schedule with slot 0; call write_schedule first");
  adamw.write_schedule(0, 2);
  CHECK(message_of([&] { adamw.write_schedule(0, 3); }) ==
        "[adamw] the step schedule has 2 slots (a captured graph reads them, so it does not grow); 3 were asked for");
}

TEST_CASE("[gpu] a replayed kernel reports a bad index, read from device memory written between replays") {
  const Tensor table = random(Shape{4, 3}, DType::f32).to(kGpu);
  Tensor ids = index_tensor({0, 3}, DType::i32).to(kGpu);
  Tensor out = Tensor::zeros(Shape{2, 3}, DType::f32, kGpu);
  std::unique_ptr<CapturedGraph> graph = capture(kGpu, [&] { kernels::gather_rows(table, ids, out); });
  graph->replay();
  CHECK_NOTHROW(synchronize(kGpu));
  ids.copy_from(index_tensor({0, 9}, DType::i32));  // the same address, new contents
  graph->replay();
  CHECK(message_of([] { synchronize(kGpu); }) ==
        "[gather] index 9 at position 1 is out of range for a table of 4 rows (shape (4, 3))"
        " (found on cuda:0, reported at the next synchronization)");
}

// ---------------------------------------------------------------------------
// GPU: errors

TEST_CASE("[gpu] an out-of-range index is reported at the next synchronization, as the CPU words it") {
  const Tensor table = random(Shape{4, 3}, DType::f32);
  const Tensor ids = index_tensor({0, 3, 7, 1, 9}, DType::i32);  // 7 at position 2 is the first bad one
  Tensor out = poisoned(Shape{5, 3}, DType::f32);
  const std::string cpu_gather = message_of([&] { kernels::gather_rows(table, ids, out); });
  REQUIRE(cpu_gather == "[gather] index 7 at position 2 is out of range for a table of 4 rows (shape (4, 3))");

  const Tensor gtable = table.to(kGpu), gids = ids.to(kGpu);
  Tensor gout = out.to(kGpu);
  kernels::gather_rows(gtable, gids, gout);  // queued: the kernel records, skips and returns
  const std::string gpu_gather = message_of([] { cuda::check_kernel_errors(); });
  CHECK(gpu_gather == cpu_gather + " (found on cuda:0, reported at the next synchronization)");
  CHECK(message_of([] { cuda::check_kernel_errors(); }) == "(no error)");  // reported once, then cleared

  Tensor grows = random(Shape{5, 3}, DType::f32).to(kGpu), gdst = Tensor::zeros(Shape{4, 3}, DType::f32, kGpu);
  kernels::scatter_rows(gdst, gids, grows, false);
  const std::string gpu_scatter = message_of([&] { (void)gdst.to(kCpu); });  // a copy to the host checks too
  CHECK(gpu_scatter.rfind("[gather_backward] index 7 at position 2 is out of range for a table of 4 rows", 0) == 0);

  Graph g;  // through the ops: the loss's item() reports a bad target
  Var logits = g.parameter(random(Shape{3, 4}, DType::f64).to(kGpu));
  Var loss = ops::cross_entropy(logits, g.input(index_tensor({1, 4, 0}, DType::i64).to(kGpu)));
  CHECK(message_of([&] { (void)loss.value().item(); }) ==
        "[cross_entropy] target 4 at position 1 is out of range for 4 classes (logits (3, 4))"
        " (found on cuda:0, reported at the next synchronization)");

  Tensor good = poisoned(Shape{2, 3}, DType::f32).to(kGpu);
  kernels::gather_rows(gtable, index_tensor({3, 0}, DType::i32).to(kGpu), good);
  CHECK_NOTHROW(synchronize(kGpu));  // the device works on after an error
}

TEST_CASE("[gpu] device errors name the op, the devices and what was asked") {
  Graph g;
  Var a = g.parameter(random(Shape{2, 3}, DType::f32));
  Var b = g.parameter(random(Shape{2, 3}, DType::f32).to(kGpu));
  CHECK(message_of([&] { ops::add(a, b); }) ==
        "[add] inputs are on different devices: cpu and cuda:0; move them with .to(device) first");
  CHECK(message_of([&] { ops::matmul(b, ops::transpose(a)); }) ==
        "[matmul] inputs are on different devices: cuda:0 and cpu; move them with .to(device) first");

  const std::string oom = message_of([] { (void)Tensor::empty(Shape{int64_t{1} << 48}, DType::f32, kGpu); });
  CHECK(oom.rfind("[cuda] out of device memory on cuda:0: asked for 1048576.00 GiB, ", 0) == 0);
  CHECK(oom.find(" free of ") != std::string::npos);
  CHECK_NOTHROW(synchronize(kGpu));

  // the fused embedding_cross_entropy saves (B, V) probabilities and no row map on CUDA, and the
  // CPU-only kernels of its host path refuse the device by name
  Graph ce;
  Var table = ce.parameter(random(Shape{3, 4}, DType::f32).to(kGpu));
  ops::embedding_cross_entropy(table, ce.input(index_tensor({1, 0, 1, 1}, DType::i32).to(kGpu)),
                               ce.input(index_tensor({0, 1, 2, 3}, DType::i32).to(kGpu)));
  CHECK(ce.nodes().back().saved[0].shape() == Shape{4, 4});
  CHECK(!ce.nodes().back().saved[1].defined());
  Tensor probs = Tensor::empty(Shape{2, 4}, DType::f32, kGpu), losses = Tensor::empty(Shape{4}, DType::f32, kGpu);
  CHECK(message_of([&] {
          kernels::cross_entropy_of_rows(table.value(), index_tensor({1, 0}, DType::i32).to(kGpu),
                                         index_tensor({0, 1, 0, 0}, DType::i32).to(kGpu),
                                         index_tensor({0, 1, 2, 3}, DType::i32).to(kGpu), probs, losses);
        }) == "[cross_entropy_of_rows] is a CPU kernel; there is none for cuda:0");
  Tensor dz = Tensor::empty(Shape{4, 4}, DType::f32, kGpu);
  CHECK(message_of([&] {
          kernels::cross_entropy_backward_of_rows(probs, index_tensor({0, 1, 0, 0}, DType::i32).to(kGpu),
                                                  index_tensor({0, 1, 2, 3}, DType::i32).to(kGpu),
                                                  Tensor::scalar(1.0, DType::f32, kGpu), 4.0, dz, 0);
        }) == "[cross_entropy_backward_of_rows] is a CPU kernel; there is none for cuda:0");

  const int count = cuda::device_count();
  const std::string missing = message_of([count] { (void)Tensor::zeros(Shape{2}, DType::f32, Device::cuda(count)); });
  CHECK(missing.rfind("[cuda] cuda:" + std::to_string(count) + " does not exist: this machine has ", 0) == 0);
}

// Every case of the op-case table (tests/op_cases.hpp) on CUDA against the CPU, the forward value
// and every input's gradient through the engine: f64 within a few ulps' worth of relative error
// (the devices' exp, log and tanh differ by ulps), f32 within f32's.
TEST_CASE("[gpu] every case of the op-case table: CUDA against the CPU, forward and backward") {
  for (const testing::OpCase& c : testing::op_cases()) {
    for (const DType dtype : {DType::f64, DType::f32}) {
      const std::string what = c.op + " " + c.label + " " + dtype_name(dtype);
      auto run = [&](Device device) {
        Graph g;
        const testing::Built b = testing::build_case(g, c, false, dtype, 23, device);
        Var loss = b.out.shape().ndim() == 0 ? b.out : ops::sum(ops::mul(b.out, b.out));
        g.backward(loss);
        std::vector<Tensor> out{b.out.value().to(kCpu)};
        for (const Var& in : b.inputs)
          if (in.requires_grad()) out.push_back(in.grad().to(kCpu));
        return out;
      };
      const std::vector<Tensor> cpu = run(kCpu), gpu = run(kGpu);
      REQUIRE(cpu.size() == gpu.size());
      for (size_t k = 0; k < cpu.size(); ++k)
        check_close(cpu[k], gpu[k], dtype == DType::f64 ? 1e-13 : 2e-6, what + (k ? " gradient " + std::to_string(k) : " forward"));
    }
  }
}

// The N-d kernels' other launch paths, which the op cases' small shapes do not reach: packed loops
// and their tails, packed broadcasts, reductions a warp per output, in pieces, and element by element.
TEST_CASE("[gpu] N-d kernels on large and odd shapes: CUDA against the CPU") {
  for (const DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-13 : 2e-6;
    for (const Shape& s : {Shape{1001}, Shape{64, 128}, Shape{63, 127}, Shape{3, 5, 1024}}) {
      const Tensor a = random(s, dt), b = random(s, dt);
      Shape row_shape{s[s.ndim() - 1]};
      const Tensor row = random(row_shape, dt);
      for (const kernels::Binary op : {kernels::Binary::add, kernels::Binary::mul, kernels::Binary::maximum}) {
        for (const Tensor* other : {&b, &row}) {
          Tensor c = Tensor::empty(s, dt), g = Tensor::empty(s, dt, kGpu);
          kernels::binary(op, a, *other, c);
          kernels::binary(op, a.to(kGpu), other->to(kGpu), g);
          check_close(c, g, tol, std::string(kernels::binary_name(op)) + " " + s.str() + " by " + other->shape().str());
        }
      }
      Tensor c = Tensor::empty(s, dt), g = Tensor::empty(s, dt, kGpu);
      kernels::unary(kernels::Unary::tanh, a, c);
      kernels::unary(kernels::Unary::tanh, a.to(kGpu), g);
      check_close(c, g, tol, "tanh " + s.str());
    }
    // reductions: over the first axis (pieces), the last (a warp per output), a middle one (one thread)
    for (const auto& [shape, kept] : {std::pair{Shape{5000, 37}, Shape{1, 37}}, std::pair{Shape{37, 5000}, Shape{37, 1}},
                                      std::pair{Shape{6, 300, 7}, Shape{6, 1, 7}}, std::pair{Shape{300, 9}, Shape{1, 1}}}) {
      const Tensor x = random(shape, dt);
      for (const kernels::Reduce op : {kernels::Reduce::sum, kernels::Reduce::mean, kernels::Reduce::max}) {
        Tensor c = Tensor::empty(kept, dt), g = Tensor::empty(kept, dt, kGpu);
        kernels::reduce(op, x, kept, c);
        kernels::reduce(op, x.to(kGpu), kept, g);
        check_close(c, g, tol, "reduce " + std::to_string(static_cast<int>(op)) + " " + shape.str() + " to " + kept.str());
      }
    }
  }
}

// ---------------------------------------------------------------------------
// the fused attention (src/cuda/attention.cu) past one tile of 64

// scaled_dot_product_attention on CUDA against the CPU at T = 300 (five tiles, the last partial),
// hd = 64, causal and not, Tq != Tk both ways, dv != d, a head that takes the flash kernels' D = 128,
// one past 128 (the reference kernels in f32 too) and an odd one: the forward and every gradient,
// and the same bits from a second run.
TEST_CASE("[gpu] scaled_dot_product_attention at T = 300, hd = 64 and other sizes: CUDA against the CPU") {
  struct Size {
    int64_t b, h, tq, tk, d, dv;
    bool causal;
  };
  const Size sizes[] = {{2, 3, 300, 300, 64, 64, false}, {2, 3, 300, 300, 64, 64, true}, {1, 2, 100, 300, 64, 64, false},
                        {1, 2, 300, 77, 64, 48, false},  {1, 2, 130, 130, 128, 96, true}, {1, 1, 70, 70, 160, 3, true},
                        {1, 1, 65, 65, 7, 5, true}};
  for (const Size& s : sizes) {
    for (DType dtype : kFloats) {
      char label[96];
      std::snprintf(label, sizeof label, "(%lld, %lld, Tq %lld, Tk %lld, d %lld, dv %lld)%s %s", static_cast<long long>(s.b),
                    static_cast<long long>(s.h), static_cast<long long>(s.tq), static_cast<long long>(s.tk),
                    static_cast<long long>(s.d), static_cast<long long>(s.dv), s.causal ? " causal" : "", name(dtype));
      const std::string what = label;
      const Tensor q = random({s.b, s.h, s.tq, s.d}, dtype, -1, 1), k = random({s.b, s.h, s.tk, s.d}, dtype, -1, 1);
      const Tensor v = random({s.b, s.h, s.tk, s.dv}, dtype, -1, 1), r = random({s.b, s.h, s.tq, s.dv}, dtype, -1, 1);
      auto run = [&](Device device) {
        Graph g;
        Var vq = g.parameter(q.to(device)), vk = g.parameter(k.to(device)), vv = g.parameter(v.to(device));
        Var y = ops::scaled_dot_product_attention(vq, vk, vv, s.causal);
        g.backward(ops::sum(ops::mul(y, g.input(r.to(device)))));
        return std::vector<Tensor>{y.value().to(kCpu), vq.grad().to(kCpu), vk.grad().to(kCpu), vv.grad().to(kCpu)};
      };
      const std::vector<Tensor> cpu = run(kCpu), gpu = run(kGpu), again = run(kGpu);
      const std::string parts[] = {" forward", " dq", " dk", " dv"};
      for (size_t i = 0; i < 4; ++i) {
        check_bits(gpu[i], again[i], what + parts[i] + ": the same bits on every run");
        check_close(cpu[i], gpu[i], dtype == DType::f64 ? 1e-13 : 5e-6, what + parts[i]);
      }
    }
  }
}

// Note [dS kept] in src/cuda/attention.cu: dq from the kept tiles of dS and dq recomputed give the
// same bits, and qkv_attention (the operands in place, Note [attention layouts]) those of the
// contiguous op on its gathered heads, on CUDA as on the CPU (tests/ops/test_attention.cpp).
TEST_CASE("[gpu] attention's dq from the kept dS tiles has the recomputed dq's bits; qkv_attention the composite's") {
  struct Size {
    int64_t b, t, h, d;
    bool causal;
  };
  for (const Size& s : {Size{2, 300, 3, 64, true}, Size{1, 130, 2, 64, false}, Size{2, 70, 2, 128, true}, Size{1, 65, 3, 7, true}}) {
    const int64_t C = s.h * s.d;
    const std::string what = "(B " + std::to_string(s.b) + ", T " + std::to_string(s.t) + ", H " + std::to_string(s.h) +
                             ", d " + std::to_string(s.d) + ")" + (s.causal ? " causal" : "");
    const Tensor x = random({s.b, s.t, 3 * C}, DType::f32, -1, 1), r = random({s.b, s.t, C}, DType::f32, -1, 1);
    const Tensor add = random({s.t, C}, DType::f32, -1, 1);
    auto run = [&](bool packed, const char* kept) {
      setenv("TAPEGRAD_ATTENTION_KEPT_BYTES", kept, 1);
      Graph g;
      Var qkv = g.parameter(x.to(kGpu)), a = g.parameter(add.to(kGpu));
      Var y;
      if (packed) {
        y = ops::qkv_attention(qkv, s.h, s.causal, a);
      } else {
        std::vector<Var> p = ops::split(qkv, {C, C, C}, 2);
        auto heads = [&](Var t) { return ops::transpose(ops::reshape(t, {s.b, s.t, s.h, s.d}), 1, 2); };
        y = ops::scaled_dot_product_attention(heads(p[0]), heads(p[1]), heads(p[2] + a), s.causal);
        y = ops::reshape(ops::transpose(y, 1, 2), {s.b, s.t, C});
      }
      g.backward(ops::sum(ops::mul(y, g.input(r.to(kGpu)))));
      unsetenv("TAPEGRAD_ATTENTION_KEPT_BYTES");
      return std::vector<Tensor>{y.value().to(kCpu), qkv.grad().to(kCpu), a.grad().to(kCpu)};
    };
    const std::vector<Tensor> kept = run(true, "1e12"), recomputed = run(true, "0"), composite = run(false, "1e12");
    const std::string parts[] = {" forward", " d qkv", " d value_add"};
    for (size_t i = 0; i < 3; ++i) {
      check_bits(kept[i], recomputed[i], what + parts[i] + ": kept dS against recomputed");
      check_bits(kept[i], composite[i], what + parts[i] + ": qkv_attention against the composite");
    }
  }
}

TEST_CASE("[gpu] qkv_attention under autocast: bf16 products within bf16's reach of the f32 kernels, the same bits each run") {
  struct Size {
    int64_t b, t, h, d;
    bool causal;
  };
  // odd lengths (tiles cut short), both head sizes' kernels (64 and 128, whose tiles stream 32
  // rows), 7 (padded columns), and T = 1024 (many tiles, the causal order of the blocks)
  for (const Size& s : {Size{2, 300, 3, 64, true}, Size{1, 130, 2, 64, false}, Size{2, 70, 2, 96, true},
                        Size{1, 200, 2, 128, false}, Size{1, 65, 3, 7, true}, Size{2, 256, 6, 64, true},
                        Size{1, 1024, 2, 64, true}}) {
    const int64_t C = s.h * s.d;
    const std::string what = "(B " + std::to_string(s.b) + ", T " + std::to_string(s.t) + ", H " + std::to_string(s.h) +
                             ", d " + std::to_string(s.d) + ")" + (s.causal ? " causal" : "");
    const Tensor x = random({s.b, s.t, 3 * C}, DType::f32, -1, 1), r = random({s.b, s.t, C}, DType::f32, -1, 1);
    const Tensor add = random({s.t, C}, DType::f32, -1, 1);
    auto run = [&](bool bf16) {
      Graph g;
      Var qkv = g.parameter(x.to(kGpu)), a = g.parameter(add.to(kGpu));
      Var y;
      {
        ops::Autocast scope(bf16 ? DType::bf16 : DType::f32);
        y = ops::qkv_attention(qkv, s.h, s.causal, a);
      }
      g.backward(ops::sum(ops::mul(y, g.input(r.to(kGpu)))));
      return std::vector<Tensor>{y.value().to(kCpu), qkv.grad().to(kCpu), a.grad().to(kCpu)};
    };
    const std::vector<Tensor> f32 = run(false), bf16 = run(true), again = run(true);
    const std::string parts[] = {" forward", " d qkv", " d value_add"};
    for (size_t i = 0; i < 3; ++i) {
      check_bits(bf16[i], again[i], what + parts[i] + ": bf16 products, two runs");
      const std::vector<double> a = f32[i].to_doubles(), b = bf16[i].to_doubles();
      double diff = 0.0, norm = 0.0;
      for (size_t j = 0; j < a.size(); ++j) diff += (a[j] - b[j]) * (a[j] - b[j]), norm += a[j] * a[j];
      MESSAGE(what << parts[i] << ": |bf16 - f32| / |f32| = " << std::sqrt(diff / norm));
      check_close(f32[i], bf16[i], 2e-2, what + parts[i] + ": bf16 products against f32");
      CHECK_MESSAGE(a != b, what << parts[i] << ": the bf16 products gave the f32 kernels' bits (not taken?)");
    }
  }
}

// Note [wgmma attention]: the same products through wgmma as through mma.sync, so the two agree up
// to the order of f32 sums (and a bf16 rounding of P or dS that such an order may flip); a wrong
// descriptor or layout would be off by O(1). Both operand paths: f32 qkv (packed copies) and bf16
// qkv read where it lies.
// The wgmma policy's layouts alone, on small integers (exact in bf16, their sums exact in f32): a
// wrong swizzle, descriptor or fragment layout shows as cells holding another cell's value, and
// the test names where each wrong cell's value belongs.
TEST_CASE("[gpu] wgmma probe: a b^T and a b through the attention's Wgmma policy, exactly") {
  if (!cuda::attention_wgmma_available(0)) {
    MESSAGE("SKIP: cuda:0 is not compute capability 9.0, so the wgmma kernels do not run here");
    return;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<double> av(64 * 64), bv(64 * 64);
  for (double& x : av) x = small(rng);
  for (double& x : bv) x = small(rng);
  const Tensor a = Tensor::from_doubles(av, Shape{64, 64}, DType::bf16), b = Tensor::from_doubles(bv, Shape{64, 64}, DType::bf16);
  Tensor c1, c2;
  CHECK(message_of([&] { cuda::attention_wgmma_probe(a.to(kGpu), Tensor::zeros({64, 32}, DType::bf16, kGpu), c1, c2); }) ==
        "[wgmma probe] takes (64, 64) bf16, not (64, 32) bf16");
  cuda::attention_wgmma_probe(a.to(kGpu), b.to(kGpu), c1, c2);
  const std::vector<double> got1 = c1.to(kCpu).to_doubles(), got2 = c2.to(kCpu).to_doubles();
  std::vector<double> abt(64 * 64, 0.0), ab(64 * 64, 0.0);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j)
      for (int k = 0; k < 64; ++k) {
        abt[i * 64 + j] += av[i * 64 + k] * bv[j * 64 + k];
        ab[i * 64 + j] += av[i * 64 + k] * bv[k * 64 + j];
      }
  auto report = [](const char* what, const std::vector<double>& want, const std::vector<double>& got) {
    int wrong = 0;
    for (int c = 0; c < 64 * 64; ++c) {
      if (want[c] == got[c]) continue;
      if (++wrong > 8) continue;
      std::string from;
      for (int d = 0; d < 64 * 64 && from.size() < 60; ++d)
        if (want[d] == got[c]) from += " (" + std::to_string(d / 64) + ", " + std::to_string(d % 64) + ")";
      MESSAGE(what << ": cell (" << c / 64 << ", " << c % 64 << ") is " << got[c] << ", not " << want[c]
                   << "; that value is at" << (from.empty() ? " no cell" : from));
    }
    CHECK_MESSAGE(wrong == 0, what << ": " << wrong << " of 4096 cells wrong");
  };
  report("a b^T (scores)", abt, got1);
  report("a b (pz)", ab, got2);
}

TEST_CASE("[gpu] the attention's wgmma kernels (Hopper) against its mma.sync kernels, forward and backward") {
  if (!cuda::attention_wgmma_available(0)) {
    MESSAGE("SKIP: cuda:0 is not compute capability 9.0, so the wgmma kernels do not run here");
    return;
  }
  struct Size {
    int64_t b, t, h, d;
    bool causal;
  };
  for (const Size& s : {Size{2, 300, 3, 64, true}, Size{1, 130, 2, 64, false}, Size{1, 65, 3, 7, true},
                        Size{2, 256, 6, 64, true}, Size{1, 1024, 2, 64, true}, Size{1, 100, 2, 40, false}}) {
    for (bool bf16_qkv : {false, true}) {
      const int64_t C = s.h * s.d;
      const std::string what = "(B " + std::to_string(s.b) + ", T " + std::to_string(s.t) + ", H " + std::to_string(s.h) +
                               ", d " + std::to_string(s.d) + ")" + (s.causal ? " causal" : "") +
                               (bf16_qkv ? ", bf16 qkv" : ", f32 qkv");
      const Tensor x = random({s.b, s.t, 3 * C}, DType::f32, -1, 1), r = random({s.b, s.t, C}, DType::f32, -1, 1);
      auto run = [&](bool wgmma, unsigned overlap = cuda::kOverlapDefault) {
        const bool was = cuda::attention_wgmma();
        const unsigned overlapped = cuda::attention_overlap();
        cuda::set_attention_wgmma(wgmma);
        cuda::set_attention_overlap(overlap);
        Graph g;
        Var qkv = g.parameter(x.to(kGpu));
        Var y;
        {
          ops::Autocast scope(DType::bf16);
          y = ops::to(ops::qkv_attention(bf16_qkv ? ops::to(qkv, DType::bf16) : qkv, s.h, s.causal), DType::f32);
        }
        g.backward(ops::sum(ops::mul(y, g.input(r.to(kGpu)))));
        cuda::set_attention_wgmma(was);
        cuda::set_attention_overlap(overlapped);
        return std::vector<Tensor>{y.value().to(kCpu), qkv.grad().to(kCpu)};
      };
      const std::vector<Tensor> mma = run(false), wg = run(true), again = run(true);
      // Note [overlapped wgmma forward]: every kernel a product at a time, and every one overlapped
      const std::vector<Tensor> one_at_a_time = run(true, 0), all_overlapped = run(true, 7);
      const std::string parts[] = {" forward", " d qkv"};
      for (size_t i = 0; i < 2; ++i) {
        check_bits(wg[i], again[i], what + parts[i] + ": wgmma, two runs");
        check_bits(one_at_a_time[i], wg[i], what + parts[i] + ": wgmma kernels a product at a time, and by default");
        check_bits(one_at_a_time[i], all_overlapped[i], what + parts[i] + ": wgmma a product at a time, and all overlapped");
        const std::vector<double> a = mma[i].to_doubles(), b = wg[i].to_doubles();
        double diff = 0.0, norm = 0.0, worst = 0.0;
        size_t same = 0, worst_at = 0;
        for (size_t j = 0; j < a.size(); ++j) {
          diff += (a[j] - b[j]) * (a[j] - b[j]), norm += a[j] * a[j];
          same += a[j] == b[j];
          if (std::abs(a[j] - b[j]) > worst) worst = std::abs(a[j] - b[j]), worst_at = j;
        }
        MESSAGE(what << parts[i] << ": |wgmma - mma| / |mma| = " << std::sqrt(diff / norm) << ", " << same << " of "
                     << a.size() << " the same, the largest difference " << worst << " at " << worst_at << " ("
                     << a[worst_at] << " against " << b[worst_at] << ")");
        CHECK_MESSAGE(std::sqrt(diff / norm) < 2e-3, what << parts[i] << ": wgmma against mma.sync");
      }
    }
  }
}

TEST_CASE("[gpu] scaled_dot_product_attention under autocast: the bf16 kernels, within bf16's reach of f32") {
  for (bool causal : {true, false}) {
    const Tensor q = random({2, 3, 150, 64}, DType::f32, -1, 1), k = random({2, 3, 150, 64}, DType::f32, -1, 1);
    const Tensor v = random({2, 3, 150, 64}, DType::f32, -1, 1), r = random({2, 3, 150, 64}, DType::f32, -1, 1);
    auto run = [&](bool bf16) {
      Graph g;
      Var vq = g.parameter(q.to(kGpu)), vk = g.parameter(k.to(kGpu)), vv = g.parameter(v.to(kGpu));
      Var y;
      {
        ops::Autocast scope(bf16 ? DType::bf16 : DType::f32);
        y = ops::scaled_dot_product_attention(vq, vk, vv, causal);
      }
      g.backward(ops::sum(ops::mul(y, g.input(r.to(kGpu)))));
      return std::vector<Tensor>{y.value().to(kCpu), vq.grad().to(kCpu), vk.grad().to(kCpu), vv.grad().to(kCpu)};
    };
    const std::vector<Tensor> f32 = run(false), bf16 = run(true);
    const char* parts[] = {" out", " dq", " dk", " dv"};
    for (size_t i = 0; i < 4; ++i) {
      check_close(f32[i], bf16[i], 2e-2, std::string(causal ? "causal" : "full") + parts[i]);
      CHECK_MESSAGE(f32[i].to_doubles() != bf16[i].to_doubles(), parts[i], ": the f32 kernels' bits (bf16 not taken?)");
    }
  }
}

// Note [bf16 activations]: the kernels a bf16 model runs, against the CPU's (which compute the
// same f32 arithmetic on widened values, rounded once).
TEST_CASE("[gpu] bf16 activations: elementwise kernels, bf16 products and attention against the CPU") {
  for (int64_t n : {1, 7, 8, 1000, 100003}) {  // packs of 8 and tails
    const std::string what = "n " + std::to_string(n);
    const Tensor x = bf(random(Shape{n}, DType::f32)), y = bf(random(Shape{n}, DType::f32)), f = random(Shape{n}, DType::f32);
    std::vector<Tensor> args{x, poisoned(Shape{n}, DType::bf16)};
    auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::unary(Unary::gelu_erf, a[0], a[1]); });
    check_close(args[1], back[1], 4e-3, what + " gelu bf16");
    args = {x, bf(random(Shape{n}, DType::f32)), y, poisoned(Shape{n}, DType::bf16)};
    back = run_both(args, [](std::vector<Tensor>& a) { kernels::unary_backward(Unary::gelu_erf, a[0], a[1], a[2], a[3]); });
    check_close(args[3], back[3], 4e-3, what + " gelu backward bf16");
    for (kernels::Binary op : {kernels::Binary::add, kernels::Binary::mul, kernels::Binary::div}) {
      args = {f, x, poisoned(Shape{n}, DType::f32)};  // f32 op bf16 -> f32: exact on both
      back = run_both(args, [op](std::vector<Tensor>& a) { kernels::binary(op, a[0], a[1], a[2]); });
      check_bits(args[2], back[2], what + " f32 " + kernels::binary_name(op) + " bf16");
      args = {x, y, poisoned(Shape{n}, DType::bf16)};
      back = run_both(args, [op](std::vector<Tensor>& a) { kernels::binary(op, a[0], a[1], a[2]); });
      check_bits(args[2], back[2], what + " bf16 " + kernels::binary_name(op) + " bf16");
    }
  }
  // bf16 operands into a bf16 out: the f32 sums rounded once (cuBLAS's and OpenBLAS's sums differ)
  std::vector<Tensor> args{bf(random(Shape{3, 70, 40}, DType::f32)), bf(random(Shape{40, 90}, DType::f32)),
                           poisoned(Shape{3, 70, 90}, DType::bf16)};
  auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::matmul(a[0], false, a[1], false, a[2]); });
  check_close(args[2], back[2], 1e-2, "matmul bf16 into bf16");
  // a bf16 model's attention: qkv bf16 in, bf16 out and gradients, against the CPU's f32 path; the
  // kernels read qkv where it lies (heads of 64, and of 96 in tiles of 128 columns), or pack it
  // (heads of 36: not whole 16-byte copies)
  for (int64_t d : {64, 96, 36}) {
    const int64_t H = d == 64 ? 2 : 1, C = H * d, T = d == 64 ? 150 : 70;
    const Tensor qkv = random({2, T, 3 * C}, DType::f32, -1, 1), r = random({2, T, C}, DType::f32, -1, 1);
    const Tensor add = random({2, T, C}, DType::f32, -1, 1);
    auto run = [&](Device dev) {
      Graph g;
      Var x = g.parameter(bf(qkv).to(dev)), a = g.parameter(add.to(dev));
      Var y = ops::qkv_attention(x, H, true, a);
      CHECK(y.value().dtype() == DType::bf16);
      g.backward(ops::sum(ops::mul(y, g.input(r.to(dev)))));
      CHECK(x.grad().dtype() == DType::bf16);
      return std::vector<Tensor>{y.value().to(kCpu), x.grad().to(kCpu), a.grad().to(kCpu)};
    };
    const std::vector<Tensor> cpu = run(kCpu), gpu = run(kGpu);
    const char* parts[] = {"out", "d qkv", "d value_add"};
    for (size_t i = 0; i < 3; ++i)
      check_close(cpu[i], gpu[i], 2e-2, "bf16 qkv_attention, d " + std::to_string(d) + " " + parts[i]);
  }
}

// ---------------------------------------------------------------------------
// GPU: SGD with momentum, gradient transforms, parameter groups, optimizer state (src/optim)

TEST_CASE("[gpu] SGD with momentum and the sum of squares give the CPU's bits") {
  const kernels::SGDScalars configs[] = {
      {.lr = 0.1, .momentum = 0.9, .first_step = true},
      {.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true},
      {.lr = 0.3, .weight_decay = 0.5},
  };
  for (DType t : kFloats)
    for (const kernels::SGDScalars& s : configs) {
      std::vector<Tensor> args{random(Shape{5, 333}, t), random(Shape{5, 333}, t), random(Shape{5, 333}, t)};
      auto back = run_both(args, [&s](std::vector<Tensor>& a) { kernels::sgd_momentum_step(a[0], a[1], a[2], s); });
      const std::string what = std::string(name(t)) + " sgd, momentum " + std::to_string(s.momentum);
      check_bits(args[0], back[0], what + ": p");
      check_bits(args[2], back[2], what + ": buf");
    }
  // Note [sum of squares order]: chunks of 4096 by a warp's lanes, at the sizes where they change
  for (DType t : kFloats)
    for (int64_t n : {0, 1, 31, 33, 4096, 4097, 8193, 70001, 3000001, 9000001}) {
      std::vector<Tensor> args{random(Shape{n}, t, -30.0, 30.0), poisoned(Shape{3}, DType::f64)};
      auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::sum_squares(a[0], a[1], 1); });
      check_bits(args[1], back[1], std::string(name(t)) + " sum_squares of " + std::to_string(n));
    }
}

// clip_grad_norm's multi-tensor kernels: 100 tensors of mixed dtypes and assorted sizes (more than
// two CUDA groups of 48; empty ones, and sizes where a chunk's warp or a block's chunks change),
// the CPU's bits chunk by chunk.
TEST_CASE("[gpu] sum_squares_chunks and scale_many give the CPU's bits over several groups") {
  const int64_t sizes[] = {0, 1, 7, 255, 4097, 1000, 8193, 70001, (int64_t{1} << 17) + 3, 3};
  std::vector<Tensor> args;
  int64_t chunks = 0;
  for (int64_t i = 0; i < 100; ++i) {
    args.push_back(random(Shape{sizes[i % 10]}, i % 3 == 0 ? DType::f64 : DType::f32, -30.0, 30.0));
    chunks += kernels::sum_squares_chunk_count(sizes[i % 10]);
  }
  const size_t k = args.size();
  args.push_back(poisoned(Shape{chunks}, DType::f64));
  auto back = run_both(args, [k](std::vector<Tensor>& a) {
    std::vector<const Tensor*> xs;
    for (size_t i = 0; i < k; ++i) xs.push_back(&a[i]);
    kernels::sum_squares_chunks(xs, a[k]);
  });
  check_bits(args[k], back[k], "sum_squares_chunks of 100 tensors");

  args.pop_back();
  for (const double s : {0.1, -3.0}) {
    back = run_both(args, [s](std::vector<Tensor>& a) {
      std::vector<Tensor*> xs;
      for (Tensor& x : a) xs.push_back(&x);
      kernels::scale_many(xs, s);
    });
    for (size_t i = 0; i < k; ++i)
      check_bits(args[i], back[i], "scale_many by " + std::to_string(s) + ", tensor " + std::to_string(i));
  }
  // A list that spans two devices is refused by name.
  Tensor on_cpu = random(Shape{3}, DType::f32), on_gpu = on_cpu.to(kGpu);
  CHECK(message_of([&] { kernels::scale_many({&on_cpu, &on_gpu}, 2.0); }) ==
        "[scale_many] inputs are on different devices: cpu and cuda:0; move them with .to(device) first");
}

namespace {

// Two parameters given the same gradients on either device (gradients.hpp: exact on both).
struct GivenGradients {
  Graph g;
  Var w, b;
  GivenGradients(Device dev, DType t, const std::vector<Tensor>& init)
      : w(g.parameter(init[0].clone().to(dev), "w")), b(g.parameter(init[1].clone().to(dev), "b")) {
    REQUIRE(w.dtype() == t);
  }
  void give(const std::vector<Tensor>& grads) {
    testing::give_gradients(g, {{w, grads[0].to_doubles()}, {b, grads[1].to_doubles()}});
  }
};

}  // namespace

TEST_CASE("[gpu] clip_grad_norm, grouped SGD and AdamW on CUDA give the CPU's bits, state moved across") {
  for (DType t : kFloats) {
    INFO(name(t));
    const std::vector<Tensor> init{random(Shape{40, 70}, t), random(Shape{70}, t)};
    GivenGradients cpu_model(kCpu, t, init), gpu_model(kGpu, t, init), on_device(kGpu, t, init);
    auto groups = [](GivenGradients& m) { return optim::decay_groups({m.w, m.b}, 0.05); };
    optim::SGD cpu_sgd(groups(cpu_model), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    optim::SGD gpu_sgd(groups(gpu_model), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> grads{random(Shape{40, 70}, t), random(Shape{70}, t)};
      cpu_model.give(grads);
      gpu_model.give(grads);
      const double cpu_norm = optim::clip_grad_norm({cpu_model.w, cpu_model.b}, 5.0);
      const double gpu_norm = optim::clip_grad_norm({gpu_model.w, gpu_model.b}, 5.0);
      CHECK_MESSAGE(std::memcmp(&cpu_norm, &gpu_norm, sizeof cpu_norm) == 0, cpu_norm, " vs ", gpu_norm);
      check_bits(cpu_model.w.grad(), gpu_model.w.grad().to(kCpu), "clipped w grad, step " + std::to_string(step));
      // without the read-back: the same norm and gradients, clipped (5) or not (1000)
      for (double max_norm : {5.0, 1000.0}) {
        on_device.give(grads);
        GivenGradients host(kCpu, t, init);
        host.give(grads);
        const double want = optim::clip_grad_norm({host.w, host.b}, max_norm);
        const double got = optim::clip_grad_norm_on_device({on_device.w, on_device.b}, max_norm).item();
        CHECK_MESSAGE(std::memcmp(&want, &got, sizeof got) == 0, want, " vs ", got);
        check_bits(host.w.grad(), on_device.w.grad().to(kCpu), "w grad clipped on the device to " + std::to_string(max_norm));
        check_bits(host.b.grad(), on_device.b.grad().to(kCpu), "b grad clipped on the device to " + std::to_string(max_norm));
      }
      cpu_sgd.set_lr(0.1 / (step + 1));
      gpu_sgd.set_lr(0.1 / (step + 1));
      cpu_sgd.step();
      gpu_sgd.step();
      check_bits(cpu_model.w.value(), gpu_model.w.value().to(kCpu), "w after sgd step " + std::to_string(step));
      check_bits(cpu_model.b.value(), gpu_model.b.value().to(kCpu), "b after sgd step " + std::to_string(step));
    }
    // The GPU's SGD state loaded into a fresh CPU optimizer carries on with the same bits.
    GivenGradients resumed(kCpu, t, {gpu_model.w.value().to(kCpu), gpu_model.b.value().to(kCpu)});
    optim::SGD resumed_sgd(groups(resumed), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    resumed_sgd.load_state(gpu_sgd.state_tensors());
    const std::vector<Tensor> grads{random(Shape{40, 70}, t), random(Shape{70}, t)};
    resumed.give(grads);
    gpu_model.give(grads);
    resumed_sgd.step();
    gpu_sgd.step();
    check_bits(resumed.w.value(), gpu_model.w.value().to(kCpu), "w after the resumed step");
  }
  // AdamW (f32 on CUDA): two groups, lr changed between steps, state moved from the GPU to the CPU
  const std::vector<Tensor> init{random(Shape{40, 70}, DType::f32), random(Shape{70}, DType::f32)};
  GivenGradients cpu_model(kCpu, DType::f32, init), gpu_model(kGpu, DType::f32, init);
  const optim::AdamWConfig config{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
  optim::AdamW cpu_adamw(optim::decay_groups({cpu_model.w, cpu_model.b}, 0.1), config);
  optim::AdamW gpu_adamw(optim::decay_groups({gpu_model.w, gpu_model.b}, 0.1), config);
  for (int step = 0; step < 4; ++step) {
    const std::vector<Tensor> grads{random(Shape{40, 70}, DType::f32), random(Shape{70}, DType::f32)};
    cpu_model.give(grads);
    gpu_model.give(grads);
    cpu_adamw.set_lr(0.01 * (step + 1));
    gpu_adamw.set_lr(0.01 * (step + 1));
    cpu_adamw.step();
    gpu_adamw.step();
    check_bits(cpu_model.w.value(), gpu_model.w.value().to(kCpu), "w after adamw step " + std::to_string(step));
    check_bits(cpu_model.b.value(), gpu_model.b.value().to(kCpu), "b after adamw step " + std::to_string(step));
  }
  cpu_adamw.load_state(gpu_adamw.state_tensors());  // the same state: a no-op in bits
  const std::vector<Tensor> grads{random(Shape{40, 70}, DType::f32), random(Shape{70}, DType::f32)};
  cpu_model.give(grads);
  gpu_model.give(grads);
  cpu_adamw.step();
  gpu_adamw.step();
  check_bits(cpu_model.w.value(), gpu_model.w.value().to(kCpu), "w after the step from the loaded state");
  check_bits(cpu_adamw.m(0), gpu_adamw.m(0).to(kCpu), "m after the step from the loaded state");
  // the clipping coefficient applied inside AdamW's kernel (step(factor)): the CPU's clipping then
  // step(), clipped or not, and the gradients left as they were
  for (double max_norm : {0.5, 1000.0}) {
    const std::vector<Tensor> more{random(Shape{40, 70}, DType::f32), random(Shape{70}, DType::f32)};
    cpu_model.give(more);
    gpu_model.give(more);
    (void)optim::clip_grad_norm({cpu_model.w, cpu_model.b}, max_norm);
    cpu_adamw.step();
    const optim::ClipFactor f = optim::clip_grad_factor_on_device({gpu_model.w, gpu_model.b}, max_norm);
    gpu_adamw.step(f.factor);
    check_bits(cpu_model.w.value(), gpu_model.w.value().to(kCpu), "w after step(factor), max_norm " + std::to_string(max_norm));
    check_bits(cpu_model.b.value(), gpu_model.b.value().to(kCpu), "b after step(factor), max_norm " + std::to_string(max_norm));
    check_bits(cpu_adamw.v(0), gpu_adamw.v(0).to(kCpu), "v after step(factor), max_norm " + std::to_string(max_norm));
    check_bits(more[0], gpu_model.w.grad().to(kCpu), "w's gradient untouched by step(factor)");
  }
}

TEST_CASE("[gpu] a captured AdamW update of two groups replays its steps bit for bit") {
  constexpr size_t kUpdates = 4;
  const Tensor w0 = random(Shape{16, 16}, DType::f32, -0.1, 0.1), b0 = random(Shape{16}, DType::f32, -0.1, 0.1);
  const Tensor x = index_tensor({1, 3, 1, 0, 5, 7, 2}, DType::i32).to(kGpu);
  const Tensor y = index_tensor({2, 0, 2, 6, 1, 9, 4}, DType::i32).to(kGpu);
  struct Learner {
    Graph g;
    Var w, b;
    optim::AdamW adamw;
    Learner(const Tensor& w0, const Tensor& b0)
        : w(g.parameter(w0.to(kGpu), "w")),
          b(g.parameter(b0.to(kGpu), "b")),
          adamw({{{w}, {.lr = 0.05, .weight_decay = 0.1}}, {{b}, {.lr = 0.02, .weight_decay = 0.0}}},
                {.beta1 = 0.9, .beta2 = 0.95}) {}
    void forward_backward(const Tensor& x, const Tensor& y) {
      g.zero_grad();
      g.clear();
      g.backward(ops::cross_entropy(ops::add_row(ops::gather(w, g.input(x)), b), g.input(y)));
    }
  };
  Learner eager(w0, b0), captured(w0, b0);
  captured.adamw.write_schedule(0, kUpdates);
  std::unique_ptr<CapturedGraph> graph = capture(kGpu, [&] {
    for (size_t k = 0; k < kUpdates; ++k) {
      captured.forward_backward(x, y);
      captured.adamw.scheduled_step(k);
    }
  });
  for (uint64_t round = 0; round < 3; ++round) {
    captured.adamw.write_schedule(round * kUpdates, kUpdates);
    graph->replay();
    for (size_t k = 0; k < kUpdates; ++k) {
      eager.forward_backward(x, y);
      eager.adamw.step();
    }
    check_bits(eager.w.value().to(kCpu), captured.w.value().to(kCpu), "w after round " + std::to_string(round));
    check_bits(eager.b.value().to(kCpu), captured.b.value().to(kCpu), "b after round " + std::to_string(round));
    check_bits(eager.adamw.v(1).to(kCpu), captured.adamw.v(1).to(kCpu), "v of b after round " + std::to_string(round));
  }
}

// ---------------------------------------------------------------------------

int main(int argc, char** argv) {
  // tests/needs.hpp: "[gpu]" tests need a device; meson runs this twice, --without=gpu (the host-side
  // tests) and --needs=gpu (a SKIP without a device)
  const bool device = cuda::device_count() > 0;
  if (device) {
    const char* env = std::getenv("TAPEGRAD_TEST_SEED");
    const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("%s: random seed %llu (TAPEGRAD_TEST_SEED=%llu repeats this run)\n", "test_cuda",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
    rng.seed(seed);
  }
  return tapegrad::testing::run_tests(argc, argv, "test_cuda",
                                      {{"gpu", device, "no CUDA device (" + cuda::no_device_reason() + ")"}});
}
