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

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "cuda/cuda.hpp"
#include "cuda/exact_sum.cuh"
#include "graph/graph.hpp"
#include "ops/cpu/exact_sum.hpp"
#include "ops/cr_math.hpp"
#include "ops/kernels.hpp"
#include "ops/ops.hpp"
#include "optim/sgd.hpp"

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
// (Note [exp and log on each device] in src/ops/cr_math.hpp).
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

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

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
      if (t == DType::f64) check_bits(args[2], back[2], what);
      else check_close(args[2], back[2], 1e-6, what);  // cuBLAS fp32 against the CPU's double accumulation
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

TEST_CASE("[gpu] f32 matmul uses TF32 only when allowed") {
  std::vector<Tensor> args{random(Shape{64, 256}, DType::f32), random(Shape{256, 64}, DType::f32),
                           poisoned(Shape{64, 64}, DType::f32)};
  REQUIRE(!cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::matmul(a[0], false, a[1], false, a[2]); });
  cuda::set_allow_tf32(false);
  check_close(args[2], back[2], 5e-3, "tf32 matmul");  // 10-bit products: ~1e-3 relative
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

TEST_CASE("[gpu] softmax and cross-entropy, forward and backward") {
  for (DType t : kFloats) {
    const std::string d = name(t);
    const double tol = 1e-6;  // f32: CUDA's expf against glibc's
    auto compare = [&](const Tensor& a, const Tensor& b, const std::string& what) {
      if (t == DType::f64) check_ulps(a, b, 4, what);  // exact sums; exp/log within an ulp (check_ulps)
      else check_close(a, b, tol, what);
    };
    for (int64_t m : {1, 5, 40, 300}) {
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

TEST_CASE("[gpu] optimizer updates") {
  for (DType t : kFloats) {
    std::vector<Tensor> args{random(Shape{3, 50}, t), random(Shape{3, 50}, t)};
    auto back = run_both(args, [](std::vector<Tensor>& a) { kernels::sgd_step(a[0], a[1], 0.05); });
    check_bits(args[0], back[0], std::string(name(t)) + " sgd");
  }
  std::vector<Tensor> args{random(Shape{4, 64}, DType::f32), random(Shape{4, 64}, DType::f32),
                           Tensor::zeros(Shape{4, 64}, DType::f32), Tensor::zeros(Shape{4, 64}, DType::f32)};
  for (int step = 1; step <= 5; ++step) {  // spec/bob.md's hyperparameters; fresh gradients each step
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

// Bit for bit but for exp and log (check_ulps): sums are correctly rounded on both devices.
TEST_CASE("[gpu] a model's loss, gradients and updates equal the CPU's to the last few ulps (f64)") {
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
  check_ulps(lc.value(), lg.value().to(kCpu), 16, "loss after 3 steps");
  cpu_model.g.backward(lc);
  gpu_model.g.backward(lg);
  const auto pc = cpu_model.g.parameters(), pg = gpu_model.g.parameters();
  for (size_t k = 0; k < pc.size(); ++k) {
    check_ulps(pc[k].value(), pg[k].value().to(kCpu), 16, "parameter " + pc[k].label());
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

  const int count = cuda::device_count();
  const std::string missing = message_of([count] { (void)Tensor::zeros(Shape{2}, DType::f32, Device::cuda(count)); });
  CHECK(missing.rfind("[cuda] cuda:" + std::to_string(count) + " does not exist: this machine has ", 0) == 0);
}

// ---------------------------------------------------------------------------

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  if (cuda::device_count() == 0) {
    std::printf("test_cuda: skipped: no CUDA device (%s); the host-side tests still run\n",
                cuda::no_device_reason().c_str());
    context.addFilter("test-case-exclude", "*[gpu]*");
  } else {
    const char* env = std::getenv("TAPEGRAD_TEST_SEED");
    const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("test_cuda: random seed %llu (TAPEGRAD_TEST_SEED=%llu repeats this run)\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
    rng.seed(seed);
  }
  std::fflush(stdout);
  return context.run();
}
